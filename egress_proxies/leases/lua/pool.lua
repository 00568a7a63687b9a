-- Pool upload: ARGV = pool digest, pool ttl (ms), then key, most leases per target,
-- most targets ("" any number) triples in rank order (latency, key). The list is what acquire walks; the set is what the ban-storm
-- guard counts bans in. Content-addressed by the digest, so uploading twice is harmless.
local digest, pool_ttl = ARGV[1], ARGV[2]
local list, set = B .. 'pool:' .. digest, B .. 'poolset:' .. digest
redis.call('DEL', list, set)
local CHUNK = 3999
for from = 3, #ARGV, CHUNK do
  local to = math.min(from + CHUNK - 1, #ARGV)
  redis.call('RPUSH', list, unpack(ARGV, from, to))
  local keys = {}
  for i = from, to, 3 do keys[#keys + 1] = ARGV[i] end
  redis.call('SADD', set, unpack(keys))
end
redis.call('PEXPIRE', list, pool_ttl)
redis.call('PEXPIRE', set, pool_ttl)
return 1
