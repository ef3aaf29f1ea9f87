-- changes.lua: the records changed after a version, oldest first.
-- KEYS[1] records, KEYS[2] log, KEYS[3] version, KEYS[4] floor.
-- ARGV[1] the version the caller has, ARGV[2] at most this many changes.
-- Reply   {version, 1, id, version of its change, JSON or '', ...}, or
--         {version, 0} when the log no longer reaches back to ARGV[1].
local ver = tonumber(redis.call('GET', KEYS[3]) or '0')
local floor = tonumber(redis.call('GET', KEYS[4]) or '0')
if tonumber(ARGV[1]) < floor then
  return {ver, 0}
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {ver, 1}
for i = 1, #ids, 2 do
  out[#out + 1] = ids[i]
  out[#out + 1] = ids[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[1], ids[i]) or ''
end
return out
