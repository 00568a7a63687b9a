-- Report: ARGV = now, lease id, result (ok|rate_limited|banned), target ("" none),
-- retry after ("" none), cooldown window, backoff cap, rate window, max strikes,
-- max rate strikes, storm share, storm window, storm pause, ok count, the requests
-- the site accepted in the second before a rate limit ("": not counted), the report
-- target's pace cap ("": the lease's), then the pace parameters (nine).
-- Returns nil for an unknown lease, else {proxy key, lease target, resolved target,
-- ttl, expires at, pool digest, pool size, paused until|"", then pace_reply's five}.
local now, id, result, target = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local retry_after = tonumber(ARGV[5])
local window, cap, rate_window = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local max_strikes, max_rate = tonumber(ARGV[9]), tonumber(ARGV[10])
local storm_share, storm_window, storm_pause = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local count, accepted = tonumber(ARGV[14]), tonumber(ARGV[15])
local pace_cap, P = tonumber(ARGV[16]), pace_params(17)
end_due(now, window)
local lease = known_lease(id)
if lease == nil then return nil end
local resolved = target
if resolved == '' then resolved = lease.t end
local key = lease.k
local field = target_field(resolved)
local hash = B .. 'cool:' .. key
local pair = key .. '\n' .. field

local function save(until_, strikes, rate, from_ban, forget_at)
  redis.call('HSET', hash, 'u|' .. field, fmt(until_), 'm|' .. field,
    strikes .. ' ' .. rate .. ' ' .. from_ban)
  redis.call('ZADD', B .. 'coolq', fmt(forget_at), pair)
  redis.call('ZADD', B .. 'coolu', fmt(until_), pair)
end

local state = nil
local stored = redis.call('HMGET', hash, 'u|' .. field, 'm|' .. field)
if stored[1] and stored[2] then
  local s, r, b = string.match(stored[2], '^(%d+) (%d+) (%d)$')
  state = {until_ = tonumber(stored[1]), strikes = tonumber(s), rate = tonumber(r), from_ban = b == '1'}
end

local function record()
  if result == 'ok' then
    if state then save(state.until_, 0, 0, state.from_ban and 1 or 0, state.until_) end
    return
  end
  local strikes = state and state.strikes or 0
  local rate = state and state.rate or 0
  local duration
  if result == 'banned' then
    if state and state.from_ban and state.until_ > now then return end
    strikes = math.min(strikes + 1, max_strikes)
    duration = math.min(window * 2 ^ (strikes - 1), cap)
  elseif retry_after then
    duration = math.min(retry_after, window)
  else
    if state == nil or state.until_ <= now then rate = math.min(rate + 1, max_rate) end
    duration = math.min(rate_window * 2 ^ (math.max(rate, 1) - 1), window)
  end
  local until_ = now + duration
  if state and state.until_ > until_ then until_ = state.until_ end
  local from_ban = result == 'banned' or (state ~= nil and state.from_ban and state.until_ > now)
  local forget_at = until_
  if strikes > 0 or rate > 0 then forget_at = until_ + cap end
  save(until_, strikes, rate, from_ban and 1 or 0, forget_at)
end
record()
if result ~= 'banned' then
  -- A lease granted before paces were kept has no cap of its own: the ceiling applies.
  local cap_ = pace_cap or tonumber(lease.c) or P.ceiling
  record_pace(key, resolved, now, P, cap_, result == 'rate_limited', count, retry_after,
    accepted)
end

local paused = ''
if result == 'banned' and resolved ~= '' then
  local bans = B .. 'bans:' .. resolved
  redis.call('ZADD', bans, fmt(now), key)
  redis.call('ZREMRANGEBYSCORE', bans, '-inf', fmt(now - storm_window))
  redis.call('PEXPIRE', bans, math.ceil(storm_window * 1000))
  if not paused_until(resolved, now) then
    local pool = B .. 'poolset:' .. lease.p
    local banned = 0
    for _, k in ipairs(redis.call('ZRANGE', bans, 0, -1)) do
      if redis.call('SISMEMBER', pool, k) == 1 then banned = banned + 1 end
    end
    if banned >= 2 and banned > storm_share * tonumber(lease.s) then
      local until_ = now + storm_pause
      redis.call('ZADD', B .. 'paused', fmt(until_), resolved)
      redis.call('DEL', bans)
      paused = fmt(until_)
    end
  end
end
local pace = pace_reply(key, resolved, now, P)
return {key, lease.t, resolved, lease.l, lease.e, lease.p, lease.s, paused,
  pace[1], pace[2], pace[3], pace[4], pace[5]}
