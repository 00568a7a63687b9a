-- Release: ARGV = now, lease id, cooldown window. Ends an active lease and revokes it
-- on its proxy until its end (no credentials of it last longer); returns its proxy key,
-- or false when the lease was not active.
local now, id, window = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
end_due(now, window)
local lease = redis.call('HMGET', B .. 'lease:' .. id, 'a', 'k', 'e')
if lease[1] ~= '1' then return false end
local key = lease[2]
end_lease(id, now, window)
redis.call('ZREMRANGEBYSCORE', B .. 'revoked:' .. key, '-inf', fmt(now))
redis.call('ZADD', B .. 'revoked:' .. key, lease[3], id)
redis.call('ZREM', B .. 'renewed:' .. key, id)
return key
