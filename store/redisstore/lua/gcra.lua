-- gcra.lua: GCRA. Mirror of algo/gcra.go: change both or neither.
-- Key: a string, the theoretical arrival time (TAT) in µs.
-- p1 = emission interval (µs per unit), p2 = burst.
local gcra = {}
ALG[0] = gcra

function gcra.eval(key, now, em, burst, cost)
  local tat = tonumber(redis.call('GET', key)) or 0
  if tat < now then tat = now end
  local tolerance = em * burst
  local left = math.min(idiv(clamp0(now + tolerance - tat), em), burst)
  if cost == 0 then
    return true, left, 0, tat - now
  end
  local new_tat = tat + em * cost
  local allow_at = new_tat - tolerance
  if now < allow_at then
    return false, left, allow_at - now, tat - now
  end
  return true, idiv(now - allow_at, em), 0, new_tat - now, new_tat
end

function gcra.write(key, now, em, burst, cost, new_tat, reset)
  redis.call('SET', key, fmt(new_tat), 'PX', math.max(1, idiv(reset + 999, 1000)))
  return 0, 0
end

function gcra.refund(key, now, em, burst, cost)
  local tat = tonumber(redis.call('GET', key))
  if not tat then return end
  tat = tat - em * cost
  if tat <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, fmt(tat), 'PX', math.max(1, idiv(tat - now + 999, 1000)))
  end
end
