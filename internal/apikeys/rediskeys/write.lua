-- write.lua: create, update or delete one key record and log the change,
-- in one atomic step.
-- KEYS[1] records (hash ID -> JSON), KEYS[2] log (sorted set ID by the
--         version of its last change), KEYS[3] version, KEYS[4] floor (the
--         highest version trimmed from the log), KEYS[5] last used (hash).
-- ARGV[1] op (create, update, delete), ARGV[2] ID, ARGV[3] JSON,
--         ARGV[4] the writer's deadline (µs since the epoch; 0: none),
--         ARGV[5] how many changes the log keeps.
-- Reply   the new version, 0 when there was nothing to do (create: the ID
--         is taken; update, delete: no such ID), or an error when the
--         write arrives after its deadline (its caller was told it failed).
-- (The same deadline rule as limiter/redisctl's put.lua.)
local deadline = tonumber(ARGV[4])
if deadline > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) > deadline then
    return redis.error_reply('LATE fairgate: the write arrived after its deadline and was not applied')
  end
end
local op, id = ARGV[1], ARGV[2]
local had = redis.call('HEXISTS', KEYS[1], id) == 1
if (op == 'create') == had then
  return 0
end
if op == 'delete' then
  redis.call('HDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[5], id)
else
  redis.call('HSET', KEYS[1], id, ARGV[3])
end
local v = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[2], v, id)
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  local gone = redis.call('ZRANGE', KEYS[2], over - 1, over - 1, 'WITHSCORES')
  redis.call('SET', KEYS[4], gone[2])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
return v
