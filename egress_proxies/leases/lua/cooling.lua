-- Cooling: ARGV = now, cooldown window, most pairs listed. Returns the pairs cooling
-- now, the soonest to end first: {proxy key, target field, until, from ban (0|1), ...}.
local now, window, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
end_due(now, window)
local out = {}
local pairs_ = redis.call('ZRANGEBYSCORE', B .. 'coolu', '(' .. fmt(now), '+inf', 'WITHSCORES', 'LIMIT', 0, most)
for i = 1, #pairs_, 2 do
  local pair = pairs_[i]
  local nl = string.find(pair, '\n', 1, true)
  local key, field = string.sub(pair, 1, nl - 1), string.sub(pair, nl + 1)
  local meta = redis.call('HGET', B .. 'cool:' .. key, 'm|' .. field) or ''
  local from_ban = string.match(meta, ' (%d)$') or '0'
  out[#out + 1] = key
  out[#out + 1] = field
  out[#out + 1] = pairs_[i + 1]
  out[#out + 1] = from_ban
end
return out
