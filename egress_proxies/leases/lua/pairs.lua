-- Pairs: ARGV = now, cooldown window. Returns "<key>\n<f>", count pairs of the pairs
-- holding active leases (f: "t:<target>", or "g" for leases without a target).
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
end_due(now, window)
return redis.call('HGETALL', B .. 'pheld')
