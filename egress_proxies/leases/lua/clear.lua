-- Clear a cooldown: ARGV = now, cooldown window, proxy key, target ("" the global one).
-- Forgets the pair (its cooldown and strikes). Returns 1 when it was cooling, else 0.
local now, window, key, target = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
end_due(now, window)
local field = target_field(target)
local pair = key .. '\n' .. field
local until_ = tonumber(redis.call('HGET', B .. 'cool:' .. key, 'u|' .. field) or '')
redis.call('HDEL', B .. 'cool:' .. key, 'u|' .. field, 'm|' .. field)
redis.call('ZREM', B .. 'coolq', pair)
redis.call('ZREM', B .. 'coolu', pair)
if until_ and until_ > now then return 1 end
return 0
