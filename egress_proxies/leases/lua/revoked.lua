-- Revoked: ARGV = now, proxy key. The ids of the proxy's leases released within the
-- last max ttl (those gone longer are forgotten here).
local now, key = tonumber(ARGV[1]), ARGV[2]
redis.call('ZREMRANGEBYSCORE', B .. 'revoked:' .. key, '-inf', fmt(now))
return redis.call('ZRANGE', B .. 'revoked:' .. key, 0, -1)
