-- Acquire: ARGV = now, ttl, target ("" none), lease id, pool digest ("" for an empty
-- pool), pool size, cooldown window, pool ttl (ms), the target's most leases ("" no
-- bound), the target's pace cap, the leases the requester holds for the target, the
-- waiting window and the contended retry (leases/waiting.py), then the pace
-- parameters (nine, see pace_params).
-- Returns {1, winner index, expires at, then pace_reply's five},
-- {0, at capacity, in cooldown, free at|"", paused, target full},
-- or {2} when the pool is not in Redis yet (upload it with pool.lua, then ask again).
local now, ttl, target, id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local digest, pool_size, window, pool_ttl = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]
local most_leases, cap = tonumber(ARGV[9]), ARGV[10]
local held, waiting_window, contended = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local P = pace_params(14)
end_due(now, window)

-- waiting.py: a refusal (not a paused target's) tells the target's holders that a
-- crawler holding `held` waits; it asks again soon if others hold more of the target.
local function refused(free_at)
  if target == '' then return free_at end
  redis.call('SET', B .. 'want:' .. target, held .. ' ' .. fmt(now + waiting_window),
    'PX', math.ceil(waiting_window * 1000))
  if redis.call('ZCARD', B .. 'tlease:' .. target) > held + 1 then
    local soon = now + contended
    if free_at == nil or free_at > soon then return soon end
  end
  return free_at
end

-- The pool's ranked key, most leases per target, most targets list lives in Redis
-- (uploaded once by pool.lua): an acquire sends no candidate list, and reads only as
-- far as the first idle proxy. Capacity is per {proxy, target} (leases/capacity.py).
local list = B .. 'pool:' .. digest
if digest ~= '' and redis.call('EXISTS', list) == 0 then return {2} end
local CHUNK = 64
local field = target_field(target)
local keys, most, most_targets, pair_counts, counts = {}, {}, {}, {}, {}
local n = 0
local function load_more()
  if digest == '' then return false end
  local got = redis.call('LRANGE', list, 3 * n, 3 * (n + CHUNK) - 1)
  if #got == 0 then return false end
  local chunk, pairs_ = {}, {}
  for i = 1, #got, 3 do
    n = n + 1
    keys[n], most[n], most_targets[n] = got[i], tonumber(got[i + 1]), tonumber(got[i + 2])
    chunk[#chunk + 1] = got[i]
    pairs_[#pairs_ + 1] = got[i] .. '\n' .. field
  end
  local from = n - #chunk
  local held = redis.call('HMGET', B .. 'held', unpack(chunk))
  local pair_held = redis.call('HMGET', B .. 'pheld', unpack(pairs_))
  for i = 1, #chunk do
    counts[from + i] = tonumber(held[i]) or 0
    pair_counts[from + i] = tonumber(pair_held[i]) or 0
  end
  return true
end
-- The targets a proxy holds leases for, counted from its leases (only for a proxy with
-- a maxTargets bound: no counter to keep, none to drift).
local function targets_of(key)
  local seen, count = {}, 0
  for _, lease in ipairs(redis.call('ZRANGE', B .. 'holders:' .. key, 0, -1)) do
    local t = redis.call('HGET', B .. 'lease:' .. lease, 't') or ''
    if not seen[t] then
      seen[t] = true
      count = count + 1
    end
  end
  return count
end
-- capacity.py's is_full_for.
local function is_full(i)
  if pair_counts[i] >= most[i] then return true end
  if pair_counts[i] > 0 or most_targets[i] == nil or counts[i] < most_targets[i] then
    return false
  end
  return targets_of(keys[i]) >= most_targets[i]
end
-- When a full proxy has room for the target: the first of its leases for the target to
-- end, else the first of its other targets to have all its leases end.
local function room_at(i)
  local ends = {}
  local held = redis.call('ZRANGE', B .. 'holders:' .. keys[i], 0, -1, 'WITHSCORES')
  for j = 1, #held, 2 do
    local t = redis.call('HGET', B .. 'lease:' .. held[j], 't') or ''
    local e = tonumber(held[j + 1])
    local known = ends[t]
    if t == target then
      if known == nil or e < known then ends[t] = e end
    elseif known == nil or e > known then
      ends[t] = e
    end
  end
  if ends[target] ~= nil then return ends[target] end
  local soonest = nil
  for _, e in pairs(ends) do
    if soonest == nil or e < soonest then soonest = e end
  end
  return soonest
end
local paused = paused_until(target, now)
if not paused and most_leases and target ~= '' then
  local leases = B .. 'tlease:' .. target
  if redis.call('ZCARD', leases) >= most_leases then
    local soonest = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
    local offerable = 0
    if digest ~= '' then offerable = redis.call('LLEN', list) / 3 end
    return {0, offerable, 0, fmt(refused(tonumber(soonest[2]))), 0, 1}
  end
end
-- The winner: room for the target, the fewest leases for it, then the fewest in all.
local winner = nil
local at_capacity, in_cooldown = 0, 0
local i = 0
while winner == nil or pair_counts[winner] > 0 or counts[winner] > 0 do
  i = i + 1
  if i > n and not load_more() then break end
  if is_full(i) then
    at_capacity = at_capacity + 1
  elseif paused or cooling_until(keys[i], target, now) then
    in_cooldown = in_cooldown + 1
  elseif winner == nil or pair_counts[i] < pair_counts[winner]
      or (pair_counts[i] == pair_counts[winner] and counts[i] < counts[winner]) then
    winner = i
  end
end
if winner == nil then
  local earliest = nil
  for i = 1, n do
    local free_at = now
    if is_full(i) then free_at = room_at(i) or now end
    local cooling = cooling_until(keys[i], target, now)
    if cooling and cooling > free_at then free_at = cooling end
    if earliest == nil or free_at < earliest then earliest = free_at end
  end
  if paused then
    if earliest == nil or earliest < paused then earliest = paused end
  else
    earliest = refused(earliest)
  end
  return {0, at_capacity, in_cooldown, earliest and fmt(earliest) or '', paused and 1 or 0, 0}
end
local key = keys[winner]
local expires_at = now + ttl
local seq = redis.call('INCR', B .. 'seq')
redis.call('HSET', B .. 'lease:' .. id, 'k', key, 't', target, 'l', ARGV[2], 'e', fmt(expires_at),
  'p', digest, 's', pool_size, 'n', seq, 'a', '1', 'c', cap)
redis.call('ZADD', B .. 'exp', fmt(expires_at), id)
redis.call('ZADD', B .. 'holders:' .. key, fmt(expires_at), id)
redis.call('HINCRBY', B .. 'held', key, 1)
redis.call('HINCRBY', B .. 'pheld', key .. '\n' .. field, 1)
if target ~= '' then redis.call('ZADD', B .. 'tlease:' .. target, fmt(expires_at), id) end
redis.call('PEXPIRE', list, pool_ttl)
redis.call('PEXPIRE', B .. 'poolset:' .. digest, pool_ttl)
local pace = pace_reply(key, target, now, P)
return {1, winner, fmt(expires_at), pace[1], pace[2], pace[3], pace[4], pace[5]}
