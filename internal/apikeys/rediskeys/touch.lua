-- touch.lua: keep the latest last-used time of each key still held.
-- KEYS[1] records, KEYS[2] last used (hash ID -> Unix seconds).
-- ARGV    ID, seconds, ID, seconds, ...
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[i]) or '0')
    if tonumber(ARGV[i + 1]) > cur then
      redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
    end
  end
end
return 0
