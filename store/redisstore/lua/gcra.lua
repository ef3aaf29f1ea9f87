-- gcra.lua: GCRA. Mirror of algo/gcra.go: change both or neither.
-- Key: a string, the theoretical arrival time (TAT) in µs; with a trailing
-- 'h' when set by hold.lua (kept as it is, never clamped).
-- p1 = emission interval (µs per unit), p2 = burst.
--@eval
local v = redis.call('GET', key)
local tat = tonumber(v)
local held = false
if v and not tat then tat, held = tonumber(string.sub(v, 1, -2)), true end
tat = tat or 0
if tat < now then tat = now end
local tolerance = p1 * p2
-- A TAT written under a slower limit waits at most the whole burst's refill;
-- the clamped TAT is written back whatever the outcome (it means the same
-- under this limit), so that a client that waits its Retry-After passes.
if not held and tat - now > tolerance then
  tat = now + tolerance
  redis.call('SET', key, string.format('%d', tat), 'PX', math.max(1, idiv(tolerance + 999, 1000)))
end
if cost == 0 then
  ok, rem, reset = true, math.min(idiv(math.max(0, now + tolerance - tat), p1), p2), tat - now
else
  local new_tat = tat + p1 * cost
  local allow_at = new_tat - tolerance
  if now < allow_at then
    rem, retry, reset = math.min(idiv(math.max(0, now + tolerance - tat), p1), p2), allow_at - now, tat - now
  else
    ok, rem, reset, s1 = true, idiv(now - allow_at, p1), new_tat - now, new_tat
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
