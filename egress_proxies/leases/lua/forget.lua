-- Forget a proxy: ARGV = now, proxy key, cooldown window. Ends its leases (ended ones
-- stop taking reports: every lease up to the current sequence is forgotten) and
-- drops its cooldowns and paces.
local now, key, window = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
end_due(now, window)
for _, id in ipairs(redis.call('ZRANGE', B .. 'holders:' .. key, 0, -1)) do
  redis.call('ZREM', B .. 'exp', id)
  leave_pair(id, key, redis.call('HGET', B .. 'lease:' .. id, 't') or '')
  redis.call('DEL', B .. 'lease:' .. id)
end
redis.call('DEL', B .. 'pace:' .. key)
redis.call('DEL', B .. 'holders:' .. key)
redis.call('DEL', B .. 'revoked:' .. key)
redis.call('DEL', B .. 'renewed:' .. key)
redis.call('HDEL', B .. 'held', key)
redis.call('HSET', B .. 'forgot', key, redis.call('GET', B .. 'seq') or '0')
local fields = redis.call('HKEYS', B .. 'cool:' .. key)
for _, f in ipairs(fields) do
  if string.sub(f, 1, 2) == 'u|' then
    local pair = key .. '\n' .. string.sub(f, 3)
    redis.call('ZREM', B .. 'coolq', pair)
    redis.call('ZREM', B .. 'coolu', pair)
  end
end
redis.call('DEL', B .. 'cool:' .. key)
return 1
