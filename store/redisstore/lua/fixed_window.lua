-- fixed_window.lua: fixed window. Mirror of algo/fixed_window.go: change
-- both or neither.
-- Key: a hash; w = window start (µs, the offset plus a multiple of the
-- period since the epoch), n = its count. It expires at the window's end,
-- set in the same atomic step as the window's first count; a later count
-- in the same window only increments n (s3 = 1: the key holds this window).
-- p1 = period (µs), p2 = limit, p3 = offset (µs, 0 <= p3 < p1).
--@eval
local w = p3 + idiv(now - p3, p1) * p1
local v = redis.call('HMGET', key, 'w', 'n')
local used = tonumber(v[2]) or 0
if tonumber(v[1]) ~= w then used = 0 elseif used > 0 then s3 = 1 end
local finish = w + p1 - now
if used > 0 then reset = finish end
if cost == 0 then
  ok, rem = true, math.max(0, p2 - used)
elseif used + cost > p2 then
  rem, retry = math.max(0, p2 - used), finish
else
  ok, rem, reset, s1, s2 = true, p2 - used - cost, finish, w, used + cost
end
--@write
if s3 == 1 then
  redis.call('HINCRBY', key, 'n', string.format('%d', cost))
else
  redis.call('HSET', key, 'w', string.format('%d', s1), 'n', string.format('%d', s2))
  redis.call('PEXPIRE', key, math.max(1, idiv(reset + 999, 1000)))
end
info1 = s1
--@refund
local v = redis.call('HMGET', key, 'w', 'n')
if tonumber(v[1]) == info1 then
  redis.call('HSET', key, 'n', string.format('%d', math.max(0, (tonumber(v[2]) or 0) - cost)))
end
--@settle
local w = p3 + idiv(now - p3, p1) * p1
local v = redis.call('HMGET', key, 'w', 'n')
local used = tonumber(v[2]) or 0
if tonumber(v[1]) ~= w then used = 0 end
if delta > 0 then
  applied = math.min(delta, math.max(0, 2 * p2 - used))
elseif delta < 0 and p3 + idiv(at - p3, p1) * p1 == w then
  applied = -math.min(-delta, used)
end
used = used + applied
rem, reset = p2 - used, 0
if used > 0 then reset = w + p1 - now end
if applied ~= 0 then
  if used == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'w', string.format('%d', w), 'n', string.format('%d', used))
    redis.call('PEXPIRE', key, math.max(1, idiv(reset + 999, 1000)))
  end
end
