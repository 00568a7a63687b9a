-- Release: ARGV = now, lease id, cooldown window, max ttl. Ends an active lease and
-- revokes it on its proxy for max ttl (the longest its credentials can outlive it);
-- returns its proxy key, or false when the lease was not active.
local now, id, window, max_ttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
end_due(now, window)
if redis.call('HGET', B .. 'lease:' .. id, 'a') ~= '1' then return false end
local key = redis.call('HGET', B .. 'lease:' .. id, 'k')
end_lease(id, now, window)
redis.call('ZADD', B .. 'revoked:' .. key, fmt(now + max_ttl), id)
return key
