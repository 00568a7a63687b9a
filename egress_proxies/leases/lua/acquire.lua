-- Acquire: ARGV = now, ttl, target ("" none), lease id, pool digest, pool size,
-- cooldown window, pool ttl (ms), then key, capacity pairs in rank order (latency, key).
-- Returns {1, winner index, expires at} or {0, at capacity, in cooldown, free at|"", paused}.
local now, ttl, target, id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local digest, pool_size, window, pool_ttl = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]
end_due(now, window)
local first = 9
local n = (#ARGV - first + 1) / 2
local keys = {}
for i = 1, n do keys[i] = ARGV[first + 2 * (i - 1)] end
-- Lua's unpack() is bounded by its C stack: large pools go in chunks.
local CHUNK = 4000
local function each_chunk(fn)
  for from = 1, n, CHUNK do fn(from, math.min(from + CHUNK - 1, n)) end
end
local counts = {}
each_chunk(function(from, to)
  local got = redis.call('HMGET', B .. 'held', unpack(keys, from, to))
  for i = 1, #got do counts[from + i - 1] = got[i] end
end)
local paused = paused_until(target, now)
local winner, winner_count = nil, 0
local at_capacity, in_cooldown = 0, 0
for i = 1, n do
  local count = tonumber(counts[i]) or 0
  local capacity = tonumber(ARGV[first + 2 * (i - 1) + 1])
  if count >= capacity then
    at_capacity = at_capacity + 1
  elseif paused or cooling_until(keys[i], target, now) then
    in_cooldown = in_cooldown + 1
  elseif winner == nil or count < winner_count then
    winner, winner_count = i, count
    if count == 0 then break end
  end
end
if winner == nil then
  local earliest = nil
  for i = 1, n do
    local free_at = now
    local capacity = tonumber(ARGV[first + 2 * (i - 1) + 1])
    if (tonumber(counts[i]) or 0) >= capacity then
      local soonest = redis.call('ZRANGE', B .. 'holders:' .. keys[i], 0, 0, 'WITHSCORES')
      if #soonest > 0 then free_at = tonumber(soonest[2]) end
    end
    local cooling = cooling_until(keys[i], target, now)
    if cooling and cooling > free_at then free_at = cooling end
    if earliest == nil or free_at < earliest then earliest = free_at end
  end
  if paused then
    if earliest == nil or earliest < paused then earliest = paused end
  end
  return {0, at_capacity, in_cooldown, earliest and fmt(earliest) or '', paused and 1 or 0}
end
local key = keys[winner]
local expires_at = now + ttl
local seq = redis.call('INCR', B .. 'seq')
redis.call('HSET', B .. 'lease:' .. id, 'k', key, 't', target, 'l', ARGV[2], 'e', fmt(expires_at),
  'p', digest, 's', pool_size, 'n', seq, 'a', '1')
redis.call('ZADD', B .. 'exp', fmt(expires_at), id)
redis.call('ZADD', B .. 'holders:' .. key, fmt(expires_at), id)
redis.call('HINCRBY', B .. 'held', key, 1)
if redis.call('EXISTS', B .. 'pool:' .. digest) == 0 then
  each_chunk(function(from, to) redis.call('SADD', B .. 'pool:' .. digest, unpack(keys, from, to)) end)
end
redis.call('PEXPIRE', B .. 'pool:' .. digest, pool_ttl)
return {1, winner, fmt(expires_at)}
