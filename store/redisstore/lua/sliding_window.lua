-- sliding_window.lua: sliding window counter. Mirror of
-- algo/sliding_window.go: change both or neither.
-- Key: a hash; w = current window start (µs), c = its count, p = the
-- previous window's count.
-- p1 = period (µs), p2 = limit.
local sw = {}
ALG[3] = sw

-- Windows up to 2^21 µs are weighted to the µs, longer ones on a grid of
-- period/2^21 steps (algo.slidingWindowGrid).
local SW_GRID = 2097152

local function sw_state(key, now, period)
  local w = idiv(now, period) * period
  local v = redis.call('HMGET', key, 'w', 'c', 'p')
  local ws, cur, prev = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
  if ws == w then
  elseif ws == w - period then
    cur, prev = 0, cur
  else
    cur, prev = 0, 0
  end
  return w, cur, prev
end

local function sw_reset(w, period, g, pg, cur, prev, now)
  if cur > 0 then return w + period + pg * g - now end
  if prev > 0 then return clamp0(w + pg * g - now) end
  return 0
end

local function sw_retry(w, period, limit, g, pg, cur, prev, cost, now)
  local x = limit - cost - cur
  if x >= 0 and prev > 0 then
    local at = (pg - idiv(x * pg, prev)) * g
    if at < period then return w + at - now end
  end
  local need = 0
  if cur > 0 then need = clamp0(pg - idiv((limit - cost) * pg, cur)) end
  return w + period + need * g - now
end

function sw.eval(key, now, period, limit, cost)
  local w, cur, prev = sw_state(key, now, period)
  local g = idiv(period, SW_GRID) + 1
  local pg = idiv(period, g)
  local eg = idiv(now - w, g)
  local weighted = idiv(prev * (pg - eg) + pg - 1, pg)
  if cost == 0 then
    return true, clamp0(limit - cur - weighted), 0, sw_reset(w, period, g, pg, cur, prev, now)
  end
  if cur + weighted + cost > limit then
    return false, clamp0(limit - cur - weighted),
      sw_retry(w, period, limit, g, pg, cur, prev, cost, now),
      sw_reset(w, period, g, pg, cur, prev, now)
  end
  cur = cur + cost
  return true, clamp0(limit - cur - weighted), 0, sw_reset(w, period, g, pg, cur, prev, now), {w, cur, prev}
end

function sw.write(key, now, period, limit, cost, st, reset)
  redis.call('HSET', key, 'w', fmt(st[1]), 'c', fmt(st[2]), 'p', fmt(st[3]))
  expire_us(key, reset)
  return st[1], 0
end

function sw.refund(key, now, period, limit, cost, w)
  local v = redis.call('HMGET', key, 'w', 'c', 'p')
  local ws = tonumber(v[1])
  if ws == w then
    redis.call('HSET', key, 'c', fmt(clamp0((tonumber(v[2]) or 0) - cost)))
  elseif ws == w + period then
    redis.call('HSET', key, 'p', fmt(clamp0((tonumber(v[3]) or 0) - cost)))
  end
end
