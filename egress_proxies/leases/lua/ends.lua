-- Ends: ARGV = now, proxy key. The proxy's leases that end otherwise than their
-- credentials say: {n, n released ids, then renewed id, its end, ...}. Each is
-- forgotten once the lease's (last) end has passed.
local now, key = tonumber(ARGV[1]), ARGV[2]
redis.call('ZREMRANGEBYSCORE', B .. 'revoked:' .. key, '-inf', fmt(now))
redis.call('ZREMRANGEBYSCORE', B .. 'renewed:' .. key, '-inf', fmt(now))
local revoked = redis.call('ZRANGE', B .. 'revoked:' .. key, 0, -1)
local reply = {tostring(#revoked)}
for _, id in ipairs(revoked) do reply[#reply + 1] = id end
local renewed = redis.call('ZRANGE', B .. 'renewed:' .. key, 0, -1, 'WITHSCORES')
for _, item in ipairs(renewed) do reply[#reply + 1] = item end
return reply
