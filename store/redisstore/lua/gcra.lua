-- gcra.lua: GCRA. Mirror of algo/gcra.go: change both or neither.
-- Key: a string, the theoretical arrival time (TAT) in µs; with a trailing
-- 'h' when set by hold.lua (kept as it is, never clamped), or 'd' when a
-- settlement put the key in debt (clamped to now + 2 × tolerance, not
-- now + tolerance). An admitted take writes it bare.
-- p1 = emission interval (µs per unit), p2 = burst.
--@eval
local v = redis.call('GET', key)
local tat = tonumber(v)
local flag = ''
if v and not tat then tat, flag = tonumber(string.sub(v, 1, -2)), string.sub(v, -1) end
tat = tat or 0
if tat < now then tat = now end
local tolerance = p1 * p2
-- A TAT written under a slower limit waits at most the whole burst's refill
-- (an owed one, in debt after a settlement, at most twice that); the
-- clamped TAT is written back whatever the outcome (it means the same under
-- this limit), so that a client that waits its Retry-After passes.
if flag ~= 'h' then
  local bound = tolerance
  if flag == 'd' then bound = 2 * tolerance end
  if tat - now > bound then
    tat = now + bound
    redis.call('SET', key, string.format('%d', tat) .. flag, 'PX', math.max(1, idiv(bound + 999, 1000)))
  end
end
if cost == 0 then
  ok, rem, reset = true, math.min(idiv(math.max(0, now + tolerance - tat), p1), p2), tat - now
else
  local wait = tat - now - tolerance + p1 * cost
  if wait > 0 then
    rem, retry, reset = math.min(idiv(math.max(0, now + tolerance - tat), p1), p2), wait, tat - now
  else
    ok, rem, reset, s1 = true, idiv(-wait, p1), tat + p1 * cost - now, tat + p1 * cost
  end
end
--@write
redis.call('SET', key, string.format('%d', s1), 'PX', math.max(1, idiv(reset + 999, 1000)))
--@refund
local tat = tonumber(redis.call('GET', key))
if tat then
  tat = tat - p1 * cost
  if tat <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%d', tat), 'PX', math.max(1, idiv(tat - now + 999, 1000)))
  end
end
--@settle
local v = redis.call('GET', key)
local tat = tonumber(v)
local flag = ''
if v and not tat then tat, flag = tonumber(string.sub(v, 1, -2)), string.sub(v, -1) end
tat = tat or 0
if tat < now then tat = now end
local tolerance = p1 * p2
if flag == 'd' then
  tat = math.min(tat, now + 2 * tolerance)
elseif flag ~= 'h' then
  tat = math.min(tat, now + tolerance)
end
if delta > 0 then
  applied = math.min(delta, idiv(math.max(0, now + 2 * tolerance - tat), p1))
elseif delta < 0 and flag ~= 'h' then
  applied = -math.min(-delta, idiv(tat - now + p1 - 1, p1))
end
tat = math.max(now, tat + p1 * applied)
local x = now + tolerance - tat
if x < 0 then rem = -idiv(-x + p1 - 1, p1) else rem = math.min(idiv(x, p1), p2) end
reset = tat - now
if applied ~= 0 then
  if tat == now then
    redis.call('DEL', key)
  else
    if flag ~= 'h' then
      flag = ''
      if tat - now > tolerance then flag = 'd' end
    end
    redis.call('SET', key, string.format('%d', tat) .. flag, 'PX', math.max(1, idiv(reset + 999, 1000)))
  end
end
