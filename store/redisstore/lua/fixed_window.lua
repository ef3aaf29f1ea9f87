-- fixed_window.lua: fixed window. Mirror of algo/fixed_window.go: change
-- both or neither.
-- Key: a hash; w = window start (µs, a multiple of the period since the
-- epoch), n = its count. It expires at the window's end, set in the same
-- atomic step as the count.
-- p1 = period (µs), p2 = limit.
local fw = {}
ALG[4] = fw

function fw.eval(key, now, period, limit, cost)
  local w = idiv(now, period) * period
  local v = redis.call('HMGET', key, 'w', 'n')
  local n = tonumber(v[2]) or 0
  if tonumber(v[1]) ~= w then n = 0 end
  local finish = w + period - now
  local reset = 0
  if n > 0 then reset = finish end
  if cost == 0 then
    return true, clamp0(limit - n), 0, reset
  end
  if n + cost > limit then
    return false, clamp0(limit - n), finish, reset
  end
  n = n + cost
  return true, limit - n, 0, finish, {w, n}
end

function fw.write(key, now, period, limit, cost, st, reset)
  redis.call('HSET', key, 'w', fmt(st[1]), 'n', fmt(st[2]))
  expire_us(key, reset)
  return st[1], 0
end

function fw.refund(key, now, period, limit, cost, w)
  local v = redis.call('HMGET', key, 'w', 'n')
  if tonumber(v[1]) == w then
    redis.call('HSET', key, 'n', fmt(clamp0((tonumber(v[2]) or 0) - cost)))
  end
end
