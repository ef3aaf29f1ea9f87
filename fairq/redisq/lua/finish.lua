-- finish.lua: ack or nack a leased job.
-- KEYS[1] inflight (zset)  KEYS[2] delayed (zset)  KEYS[3] depth (string)
-- KEYS[4] tdepth (hash)    KEYS[5] dead (list)     KEYS[6] the job's hash
-- ARGV: key prefix of the kind, lease token, 'ack' or 'nack', retry delay ms,
-- max attempts, retention s.
-- Reply: 1 done, 2 to be retried, 3 failed (dead letter), 0 the lease is
-- not held, -1 no such job.
-- The job's stream (<prefix>s:<tag>) is named from the job's hash, in the
-- kind's hash tag (see lease.lua).
local P, token, op, delay, maxa, keep = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local h = redis.call('HMGET', KEYS[6], 'status', 'token', 'tag', 'entry', 'attempts')
if not h[1] then return -1 end
if h[1] ~= 'running' or h[2] ~= token then return 0 end
local id = string.sub(KEYS[6], string.len(P) + 3)
local s = P .. 's:' .. h[3]
redis.call('XACK', s, 'w', h[4])
redis.call('XDEL', s, h[4])
redis.call('ZREM', KEYS[1], id)
if op == 'nack' and tonumber(h[5]) < maxa then
  redis.call('HSET', KEYS[6], 'status', 'queued', 'updated', fmt(now))
  redis.call('HDEL', KEYS[6], 'token')
  redis.call('ZADD', KEYS[2], fmt(now + delay), id)
  return 2
end
local status, code = 'done', 1
if op == 'nack' then status, code = 'failed', 3 end
redis.call('HSET', KEYS[6], 'status', status, 'updated', fmt(now))
redis.call('HDEL', KEYS[6], 'token', 'payload')
redis.call('EXPIRE', KEYS[6], keep)
redis.call('DECR', KEYS[3])
if redis.call('HINCRBY', KEYS[4], h[3], -1) <= 0 then redis.call('HDEL', KEYS[4], h[3]) end
if code == 3 then
  redis.call('RPUSH', KEYS[5], id)
  redis.call('LTRIM', KEYS[5], -10000, -1)
end
return code
