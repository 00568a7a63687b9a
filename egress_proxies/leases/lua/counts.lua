-- Counts: ARGV = now, cooldown window. Returns {active leases, cooling pairs, paused
-- targets, then proxy key, count pairs of the proxies holding leases}.
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
end_due(now, window)
local out = {
  redis.call('ZCARD', B .. 'exp'),
  redis.call('ZCOUNT', B .. 'coolu', '(' .. fmt(now), '+inf'),
  redis.call('ZCOUNT', B .. 'paused', '(' .. fmt(now), '+inf'),
}
for _, v in ipairs(redis.call('HGETALL', B .. 'held')) do out[#out + 1] = v end
return out
