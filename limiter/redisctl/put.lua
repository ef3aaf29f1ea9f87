-- put.lua: set one field of an overlay hash (delete it when the value is
-- empty) and move the overlay's version, in one atomic step.
-- KEYS[1] the hash (plans or tenants), KEYS[2] the version counter.
-- ARGV[1] the field (plan name or tenant ID), ARGV[2] its JSON or ''.
-- Reply   the new version.
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return redis.call('INCR', KEYS[2])
