-- sliding_window.lua: sliding window counter. Mirror of
-- algo/sliding_window.go: change both or neither.
-- Key: a hash; w = current window start (µs), c = its count, p = the
-- previous window's count.
-- p1 = period (µs), p2 = limit. Windows up to 2^21 µs are weighted to the
-- µs, longer ones on a grid of period/2^21 steps (algo.slidingWindowGrid).
--@helpers
local function sw_reset(w, period, g, pg, cur, prev, now)
  if cur > 0 then return w + period + pg * g - now end
  if prev > 0 then return math.max(0, w + pg * g - now) end
  return 0
end

local function sw_retry(w, period, limit, g, pg, cur, prev, cost, now)
  local x = limit - cost - cur
  if x >= 0 and prev > 0 then
    local at = (pg - idiv(x * pg, prev)) * g
    if at < period then return w + at - now end
  end
  local need = 0
  if cur > 0 then need = math.max(0, pg - idiv((limit - cost) * pg, cur)) end
  return w + period + need * g - now
end
-- sw_read reads key at now: the current window's start, its count and
-- the previous window's (a window gone by moves to previous, or to
-- nothing), and the granule g and granules per window pg of period p1.
local function sw_read(key, now, p1)
  local w = idiv(now, p1) * p1
  local v = redis.call('HMGET', key, 'w', 'c', 'p')
  local ws, cur, prev = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
  if ws == w then
  elseif ws == w - p1 then
    cur, prev = 0, cur
  else
    cur, prev = 0, 0
  end
  local g = idiv(p1, 2097152) + 1
  return w, cur, prev, g, idiv(p1, g)
end

--@eval
local w, cur, prev, g, pg = sw_read(key, now, p1)
local weighted = idiv(prev * (pg - idiv(now - w, g)) + pg - 1, pg)
if cost == 0 then
  ok, rem = true, math.max(0, p2 - cur - weighted)
elseif cur + weighted + cost > p2 then
  rem, retry = math.max(0, p2 - cur - weighted), sw_retry(w, p1, p2, g, pg, cur, prev, cost, now)
else
  cur = cur + cost
  ok, rem, s1, s2, s3 = true, math.max(0, p2 - cur - weighted), w, cur, prev
end
reset = sw_reset(w, p1, g, pg, cur, prev, now)
--@write
redis.call('HSET', key, 'w', string.format('%d', s1), 'c', string.format('%d', s2), 'p', string.format('%d', s3))
redis.call('PEXPIRE', key, math.max(1, idiv(reset + 999, 1000)))
info1 = s1
--@refund
local v = redis.call('HMGET', key, 'w', 'c', 'p')
local ws = tonumber(v[1])
if ws == info1 then
  redis.call('HSET', key, 'c', string.format('%d', math.max(0, (tonumber(v[2]) or 0) - cost)))
elseif ws == info1 + p1 then
  redis.call('HSET', key, 'p', string.format('%d', math.max(0, (tonumber(v[3]) or 0) - cost)))
end
--@settle
local w, cur, prev, g, pg = sw_read(key, now, p1)
local eg = idiv(now - w, g)
local tw = idiv(at, p1) * p1
if delta > 0 then
  applied = math.min(delta, math.max(0, 2 * p2 - cur - idiv(prev * (pg - eg) + pg - 1, pg)))
  cur = cur + applied
elseif delta < 0 and tw == w then
  applied = -math.min(-delta, cur)
  cur = cur + applied
elseif delta < 0 and tw == w - p1 then
  applied = -math.min(-delta, prev)
  prev = prev + applied
end
rem, reset = p2 - cur - idiv(prev * (pg - eg) + pg - 1, pg), sw_reset(w, p1, g, pg, cur, prev, now)
if applied ~= 0 then
  if cur == 0 and prev == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'w', string.format('%d', w), 'c', string.format('%d', cur), 'p', string.format('%d', prev))
    redis.call('PEXPIRE', key, math.max(1, idiv(reset + 999, 1000)))
  end
end
