-- Release: ARGV = now, lease id, cooldown window. Returns 1 when it ended an active lease.
local now, id, window = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
end_due(now, window)
if redis.call('HGET', B .. 'lease:' .. id, 'a') ~= '1' then return 0 end
end_lease(id, now, window)
return 1
