-- put.lua: set one field of an overlay hash (delete it when the value is
-- empty) and move the overlay's version, in one atomic step.
-- KEYS[1] the hash (plans or tenants), KEYS[2] the version counter.
-- ARGV[1] the field (plan name or tenant ID), ARGV[2] its JSON or '',
--         ARGV[3] the writer's deadline (µs since the epoch; 0: none).
-- Reply   the new version, or an error when the write arrives after its
--         deadline: the writer has told its caller it failed, so it must
--         not happen (a Redis paused, then resumed, runs queued calls late).
local deadline = tonumber(ARGV[3])
if deadline > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) > deadline then
    return redis.error_reply('LATE fairgate: the write arrived after its deadline and was not applied')
  end
end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return redis.call('INCR', KEYS[2])
