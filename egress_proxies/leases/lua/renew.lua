-- Renew: ARGV = now, lease id, ttl, cooldown window, then the pace parameters (nine).
-- Returns {proxy key, target, expires at, pool digest, pool size, then pace_reply's five}
-- or nil once it has ended. The proxy's renewed set notes the new end (ends.lua).
local now, id, ttl, window = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local P = pace_params(5)
end_due(now, window)
local lease = known_lease(id)
if lease == nil or lease.a ~= '1' then return nil end
local expires_at = fmt(now + ttl)
redis.call('HSET', B .. 'lease:' .. id, 'l', ARGV[3], 'e', expires_at)
redis.call('ZADD', B .. 'exp', expires_at, id)
redis.call('ZADD', B .. 'holders:' .. lease.k, expires_at, id)
redis.call('ZADD', B .. 'renewed:' .. lease.k, expires_at, id)
if lease.t ~= '' then redis.call('ZADD', B .. 'tlease:' .. lease.t, expires_at, id) end
local pace = pace_reply(lease.k, lease.t, now, P)
return {lease.k, lease.t, expires_at, lease.p, lease.s, pace[1], pace[2], pace[3], pace[4],
  pace[5]}
