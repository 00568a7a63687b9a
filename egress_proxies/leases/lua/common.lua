-- Shared by every lease script (prepended to each before SCRIPT LOAD).
--
-- KEYS[1] is the key base, e.g. "{egress-proxies}:" (one hash slot). Keys under it:
--   lease:<id>    hash  k=proxy key, t=target ("" none), l=ttl, e=expires at,
--                       p=pool digest, s=pool size, n=sequence, a=1 while active
--   exp           zset  active lease id -> expires at
--   ended         zset  ended lease id -> when its reports stop being accepted
--   holders:<key> zset  active lease id -> expires at, per proxy
--   held          hash  proxy key -> active lease count
--   cool:<key>    hash  u|<f> = cooling until, m|<f> = "strikes rate_strikes from_ban"
--                       per target field <f> ("t:<target>" or "g" for global)
--   coolq         zset  "<key>\n<f>" -> when the pair may be forgotten
--   coolu         zset  "<key>\n<f>" -> cooling until (for the count)
--   bans:<target> zset  proxy key -> when it was banned for the target
--   paused        zset  target -> pause end
--   pool:<digest> set   the offerable proxy keys of one candidate pool
--   revoked:<key> zset  lease id released before its end -> that end, per proxy
--   renewed:<key> zset  renewed active lease id -> its current end, per proxy
--   seq           string lease sequence; forgot hash: proxy key -> sequence when forgotten
--   (and the pace's keys, below)
-- Times are the caller's clock in seconds, passed as strings and returned as %.17g.
local B = KEYS[1]
local function fmt(x) return string.format('%.17g', x) end
local PRUNE_BATCH = 512

local function target_field(target)
  if target == '' then return 'g' end
  return 't:' .. target
end

-- A lease leaves its pair's and its target's counts (acquire enters them).
local function leave_pair(id, key, target)
  local pair = key .. '\n' .. target_field(target)
  if redis.call('HINCRBY', B .. 'pheld', pair, -1) <= 0 then redis.call('HDEL', B .. 'pheld', pair) end
  if target ~= '' then redis.call('ZREM', B .. 'tlease:' .. target, id) end
end

local function end_lease(id, ended_at, window)
  local lease = redis.call('HMGET', B .. 'lease:' .. id, 'k', 't')
  local key = lease[1]
  redis.call('ZREM', B .. 'exp', id)
  if not key then return end
  redis.call('ZREM', B .. 'holders:' .. key, id)
  if redis.call('HINCRBY', B .. 'held', key, -1) <= 0 then redis.call('HDEL', B .. 'held', key) end
  leave_pair(id, key, lease[2])
  redis.call('HSET', B .. 'lease:' .. id, 'a', '0')
  redis.call('ZADD', B .. 'ended', fmt(ended_at + window), id)
end

-- End what the clock says is over: due leases, forgotten ended ones, faded cooldowns.
local function end_due(now, window)
  local due = redis.call('ZRANGEBYSCORE', B .. 'exp', '-inf', fmt(now), 'WITHSCORES', 'LIMIT', 0, PRUNE_BATCH)
  for i = 1, #due, 2 do end_lease(due[i], tonumber(due[i + 1]), window) end
  local gone = redis.call('ZRANGEBYSCORE', B .. 'ended', '-inf', fmt(now), 'LIMIT', 0, PRUNE_BATCH)
  for _, id in ipairs(gone) do
    redis.call('DEL', B .. 'lease:' .. id)
    redis.call('ZREM', B .. 'ended', id)
  end
  local faded = redis.call('ZRANGEBYSCORE', B .. 'coolq', '-inf', fmt(now), 'LIMIT', 0, PRUNE_BATCH)
  for _, pair in ipairs(faded) do
    local nl = string.find(pair, '\n', 1, true)
    local ckey, field = string.sub(pair, 1, nl - 1), string.sub(pair, nl + 1)
    redis.call('HDEL', B .. 'cool:' .. ckey, 'u|' .. field, 'm|' .. field)
    redis.call('ZREM', B .. 'coolq', pair)
    redis.call('ZREM', B .. 'coolu', pair)
  end
  redis.call('ZREMRANGEBYSCORE', B .. 'paused', '-inf', fmt(now))
end


-- When the proxy may serve the target again (its own pair or the global one), or nil.
local function cooling_until(key, target, now)
  local u = redis.call('HMGET', B .. 'cool:' .. key, 'u|' .. target_field(target), 'u|g')
  local best = nil
  for _, v in ipairs(u) do
    if v then
      local until_ = tonumber(v)
      if until_ > now and (best == nil or until_ > best) then best = until_ end
    end
  end
  return best
end

local function paused_until(target, now)
  if target == '' then return nil end
  local until_ = redis.call('ZSCORE', B .. 'paused', target)
  if until_ and tonumber(until_) > now then return tonumber(until_) end
  return nil
end

-- The lease's hash as a table when it is known (active or ended, not forgotten), else nil.
local function known_lease(id)
  local fields = redis.call('HGETALL', B .. 'lease:' .. id)
  if #fields == 0 then return nil end
  local lease = {}
  for i = 1, #fields, 2 do lease[fields[i]] = fields[i + 1] end
  local forgot = redis.call('HGET', B .. 'forgot', lease.k)
  if forgot and tonumber(lease.n) <= tonumber(forgot) then return nil end
  return lease
end

-- The pace (leases/pace.py, the same algorithm). Keys under the base:
--   pace:<key>      hash  <f> = "rate lowered_at|- hold_until touched_at limit|- probe_at
--                         changed_at before|- counted_from|- counted" per target field
--   tpace:<target>  string "rate touched_at limit|- probe_at changed_at accepted before|-":
--                          where a proxy new to the target starts, when its rate last moved
--                          and from what, and the most requests/s its pairs in slow start
--                          had accepted
--   tlease:<target> zset  active lease id -> expires at, per target
--   pheld           hash  "<key>\n<f>" -> active leases on the pair
--   want:<target>   string "held until": the leases held by the crawler last refused
--                          one for the target, and when that stops counting (waiting.py)
-- P is the store's pace parameters, nine ARGV from `from`: start, floor, increase,
-- decrease, settle, memory (seconds), ceiling, cruise, probe after. A pace untouched
-- for `memory` reads as absent. Values written before limits were kept have four
-- (pair) or two (target) fields: no limit, slow start; pair values written before
-- counts added up over reports have eight: counting since the pair's last report.
local SLOW_START_GROWTH, GROWTH, CONVERGE, SITE_WINDOW, MOST_SECONDS = 4.0, 2.0, 0.9, 1.0, 64.0
local PROBE_REQUESTS, EXPLORING, MEASURED_OVER = 100.0, 2.0, 0.9
local function pace_params(from)
  return {start = tonumber(ARGV[from]), floor = tonumber(ARGV[from + 1]),
    increase = tonumber(ARGV[from + 2]), decrease = tonumber(ARGV[from + 3]),
    settle = tonumber(ARGV[from + 4]), memory = tonumber(ARGV[from + 5]),
    ceiling = tonumber(ARGV[from + 6]), cruise = tonumber(ARGV[from + 7]),
    probe_after = tonumber(ARGV[from + 8])}
end

local function words(v)
  local out = {}
  for w in string.gmatch(v, '%S+') do out[#out + 1] = w end
  return out
end

local function learned_pace(key, target, now, P)
  local v = redis.call('HGET', B .. 'pace:' .. key, target_field(target))
  if v then
    local w = words(v)
    if tonumber(w[4]) + P.memory > now then
      local counted_from = tonumber(w[4])
      if w[9] then counted_from = tonumber(w[9]) end  -- '-': not counting
      return {rate = tonumber(w[1]), lowered = tonumber(w[2]), hold = tonumber(w[3]),
        limit = w[5] and tonumber(w[5]), probe = tonumber(w[6] or '0'),
        changed = tonumber(w[7] or '0'), before = w[8] and tonumber(w[8]),
        counted_from = counted_from, counted = tonumber(w[10] or '0')}
    end
  end
  local state = {rate = P.start, lowered = nil, hold = 0, limit = nil, probe = 0,
    changed = 0, before = nil, counted_from = nil, counted = 0}
  if target ~= '' then
    local t = redis.call('GET', B .. 'tpace:' .. target)
    if t then
      local w = words(t)
      if tonumber(w[2]) + P.memory > now then
        state.rate = tonumber(w[1])
        state.limit = w[3] and tonumber(w[3])
        state.probe = tonumber(w[4] or '0')
        -- pace.py's `learned`: at the cruise below the limit found, else behind the
        -- target's explorer, if one is at it.
        if state.limit ~= nil then
          state.rate = math.max(P.floor, P.cruise * state.limit)
        elseif now - tonumber(w[5] or '0') < EXPLORING then
          state.rate = math.min(state.rate, math.max(P.start, tonumber(w[6] or '0')))
        end
      end
    end
  end
  return state
end


-- {learned rate, lowered at|"", holders of the pair, leases on the target,
-- leases held by a crawler waiting for the target|""}.
local function pace_reply(key, target, now, P)
  local state = learned_pace(key, target, now, P)
  local holders = tonumber(redis.call('HGET', B .. 'pheld', key .. '\n' .. target_field(target))) or 0
  local leases, waiting = 0, ''
  if target ~= '' then
    leases = redis.call('ZCARD', B .. 'tlease:' .. target)
    local want = redis.call('GET', B .. 'want:' .. target)
    if want then
      local w = words(want)
      if tonumber(w[2]) > now then waiting = w[1] end
    end
  end
  return {fmt(state.rate), state.lowered and fmt(state.lowered) or '', holders, leases, waiting}
end

local function or_dash(x)
  if x then return fmt(x) end
  return '-'
end

-- PaceState.change: move to `rate` from now.
local function change(state, rate, now)
  state.before, state.changed, state.rate = state.rate, now, rate
end

-- pace.py's `raised`: the new rate after `count` accepted requests, or nil (unchanged).
local function raised_rate(state, count, now, P, cap, trail, follow)
  if now < state.hold or state.rate >= cap then return nil end
  local seconds = math.min(count / state.rate, MOST_SECONDS)
  local rate
  if state.limit == nil then
    rate = trail
    if trail == nil then rate = state.rate * SLOW_START_GROWTH ^ seconds end
  elseif state.rate < P.cruise * state.limit then
    rate = math.min(P.cruise * state.limit, state.rate * GROWTH ^ seconds)
  elseif now >= state.probe then
    rate = follow
    if follow == nil then rate = state.rate * (1 + P.increase) ^ seconds end
  else
    return nil
  end
  rate = math.min(cap, rate)
  if rate == state.rate then return nil end
  return rate
end

-- pace.py's `lowered` past the hold: the limit the holder counted (else the pace the
-- site saw), then lower.
local function lower(state, now, P, retry_after, accepted)
  local seen = state.rate
  local new_rate
  -- One short of the remembered limit (none, at 1/s): that limit, counted a little late.
  local short = accepted ~= nil and state.limit ~= nil and accepted >= state.limit - 1
    and accepted < state.limit
  if accepted and (accepted >= 1 or short) then
    seen = accepted
    if short then seen = state.limit end
    -- As counted: to the cruise below it, or by CONVERGE when already there.
    new_rate = math.min(P.cruise * seen, state.rate * CONVERGE)
  else
    if state.before ~= nil then
      local share = math.min(math.max(now - state.changed, 0) / SITE_WINDOW, 1)
      seen = state.before + share * (state.rate - state.before)
    end
    if state.limit ~= nil and now < state.probe then seen = seen * CONVERGE end
    new_rate = math.min(state.rate * P.decrease, P.cruise * seen)
  end
  state.limit = seen
  change(state, math.max(P.floor, new_rate), now)
  state.lowered = now
  state.hold = now + math.max(P.settle, retry_after or 0)
  state.probe = now + math.max(P.probe_after, PROBE_REQUESTS / state.limit)
end

-- The target's pace (tpace) as a table, or nil when absent or forgotten.
local function fleet_pace(target, now, P)
  if target == '' then return nil end
  local t = redis.call('GET', B .. 'tpace:' .. target)
  if not t then return nil end
  local w = words(t)
  if tonumber(w[2]) + P.memory <= now then return nil end
  return {rate = tonumber(w[1]), limit = w[3] and tonumber(w[3]),
    probe = tonumber(w[4] or '0'), changed = tonumber(w[5] or '0'),
    accepted = tonumber(w[6] or '0'), before = w[7] and tonumber(w[7])}
end

-- pace.py's `measured`: what the site accepted from a pair in slow start (requests/s)
-- over about a second or more up to now, 0 before that; reports closer together add up.
local function measure(state, count, now)
  if state.counted_from == nil then
    state.counted, state.counted_from = 0, now
    return 0
  end
  state.counted = state.counted + count
  local span = now - state.counted_from
  if span < MEASURED_OVER then return 0 end
  local rate = state.counted / span
  state.counted, state.counted_from = 0, now
  return rate
end

-- pace.py's `trailing`: where a pair in slow start goes while another pair explores
-- the target above it (what the site was measured to accept, no higher), or nil.
local function trailing(state, fleet, now)
  if state.limit ~= nil or fleet == nil or fleet.limit ~= nil then return nil end
  if now - fleet.changed >= EXPLORING or state.rate >= fleet.rate then return nil end
  return math.max(state.rate, fleet.accepted)
end

-- pace.py's `following`: while another pair probes the target above the cruise below
-- its limit, its pace before its last raise (no higher), else nil (probe itself).
local function following(state, fleet, now, P)
  if fleet == nil or fleet.limit == nil or fleet.rate <= P.cruise * fleet.limit
      or now - fleet.changed >= EXPLORING or state.rate >= fleet.rate then
    return nil
  end
  return math.max(state.rate, fleet.before or state.rate)
end

-- pace.py's `adopted`: a pair takes what the fleet found for its target: in slow start
-- the limit; once its own probe is due, a probe another pair settled since (its next
-- probe time, and its limit when higher); then the cruise below the limit.
local function adopt(state, fleet, now, P)
  if fleet == nil or fleet.limit == nil then return end
  if state.limit == nil then
    state.limit, state.probe = fleet.limit, fleet.probe
  elseif now >= state.probe and fleet.probe > now then
    state.probe, state.limit = fleet.probe, math.max(state.limit, fleet.limit)
  else
    return
  end
  local cruise = math.max(P.floor, P.cruise * state.limit)
  if state.rate ~= cruise then change(state, cruise, now) end
end

-- Apply a report to the pair's pace: ok (count accepted requests) or a rate limit.
local function record_pace(key, target, now, P, cap, rate_limited, count, retry_after,
    accepted)
  local state = learned_pace(key, target, now, P)
  -- What the site accepted over the last second or more, in slow start.
  local measured = 0
  if rate_limited or state.limit ~= nil then
    state.counted, state.counted_from = 0, nil
  else
    measured = measure(state, count, now)
  end
  local fleet = fleet_pace(target, now, P)
  adopt(state, fleet, now, P)
  local trail = trailing(state, fleet, now)
  local changed = false
  if rate_limited then
    if now >= state.hold then
      lower(state, now, P, retry_after, accepted)
      changed = true
    end
  else
    local rate = raised_rate(state, count, now, P, cap, trail, following(state, fleet, now, P))
    if rate then
      change(state, rate, now)
      changed = true
    end
  end
  local hash = B .. 'pace:' .. key
  redis.call('HSET', hash, target_field(target), fmt(state.rate) .. ' ' ..
    or_dash(state.lowered) .. ' ' .. fmt(state.hold) .. ' ' .. fmt(now) .. ' ' ..
    or_dash(state.limit) .. ' ' .. fmt(state.probe) .. ' ' .. fmt(state.changed) .. ' ' ..
    or_dash(state.before) .. ' ' .. or_dash(state.counted_from) .. ' ' .. state.counted)
  redis.call('PEXPIRE', hash, math.ceil(P.memory * 1000))
  if not changed and fleet ~= nil and measured > fleet.accepted then
    -- Unchanged (held behind the explorer): only the measurement reaches the target.
    redis.call('SET', B .. 'tpace:' .. target, fmt(fleet.rate) .. ' ' .. fmt(now) .. ' ' ..
      or_dash(fleet.limit) .. ' ' .. fmt(fleet.probe) .. ' ' .. fmt(fleet.changed) .. ' ' ..
      fmt(measured) .. ' ' .. or_dash(fleet.before), 'PX', math.ceil(P.memory * 1000))
  end
  if changed and target ~= '' then
    local tkey = B .. 'tpace:' .. target
    local rate, limit, probe, moved, most, before = state.rate, nil, 0, now, measured, nil
    if rate_limited then limit, probe = state.limit, state.probe end
    local t = redis.call('GET', tkey)
    if t then
      local w = words(t)
      local known = tonumber(w[1])
      if tonumber(w[2]) + P.memory > now then
        if rate_limited and rate < known or not rate_limited and rate > known then
          before = known
        else
          rate, moved, before = known, tonumber(w[5] or '0'), w[7] and tonumber(w[7])
        end
        most = math.max(most, tonumber(w[6] or '0'))
        if not rate_limited then
          limit, probe = w[3] and tonumber(w[3]), tonumber(w[4] or '0')
        end
      end
    end
    redis.call('SET', tkey, fmt(rate) .. ' ' .. fmt(now) .. ' ' .. or_dash(limit) .. ' ' ..
      fmt(probe) .. ' ' .. fmt(moved) .. ' ' .. fmt(most) .. ' ' .. or_dash(before),
      'PX', math.ceil(P.memory * 1000))
  end
end
