-- enqueue.lua: add one job of a kind for a tenant.
-- KEYS[1] the tenant's stream   KEYS[2] the job's hash   KEYS[3] ring (zset)
-- KEYS[4] depth (string)        KEYS[5] tdepth (hash)    KEYS[6] weight (hash)
-- KEYS[7] seq (string)
-- ARGV: id, tenant, tenant tag, payload, weight, refuse (0: none), the
--       tenant's share of refuse (0: none)
-- Reply: {1, depth after} added, {0, depth} refused (the kind over its
-- threshold) or {2, tenant depth} refused (the tenant at its share).
-- Every key shares the kind's hash tag.
local depth = tonumber(redis.call('GET', KEYS[4]) or '0')
local refuse = tonumber(ARGV[6])
if refuse > 0 and depth >= refuse then return {0, depth} end
local tlim = tonumber(ARGV[7])
if tlim > 0 then
  local td = tonumber(redis.call('HGET', KEYS[5], ARGV[3]) or '0')
  if td >= tlim then return {2, td} end
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], 'w', '0', 'MKSTREAM')
end
local eid = redis.call('XADD', KEYS[1], '*', 'id', ARGV[1])
redis.call('HSET', KEYS[2], 'tenant', ARGV[2], 'tag', ARGV[3], 'status', 'queued', 'attempts', '0',
  'payload', ARGV[4], 'entry', eid, 'created', fmt(now), 'updated', fmt(now))
redis.call('INCR', KEYS[4])
redis.call('HINCRBY', KEYS[5], ARGV[3], 1)
redis.call('HSET', KEYS[6], ARGV[3], ARGV[5])
if not redis.call('ZSCORE', KEYS[3], ARGV[3]) then
  redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[7]), ARGV[3])
end
return {1, depth + 1}
