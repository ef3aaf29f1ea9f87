-- sliding_log.lua: sliding window log. Mirror of algo/sliding_log.go:
-- change both or neither.
-- Key: a sorted set, one member per admitted unit, scored by its time (µs);
-- members are "<time>:<seq as 8 hex digits>", unique.
-- p1 = period (µs), p2 = limit.
-- Expired members are ignored on every call and removed on every admitted
-- take; rejected takes and peeks write nothing.
local sl = {}
ALG[2] = sl

local function sl_newest(key)
  local r = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #r == 0 then return nil end
  return tonumber(r[2])
end

function sl.eval(key, now, period, limit, cost)
  local cutoff = now - period
  local n = redis.call('ZCOUNT', key, '(' .. fmt(cutoff), '+inf')
  local reset = 0
  local newest = nil
  if n > 0 then
    newest = sl_newest(key)
    reset = clamp0(newest + period - now)
  end
  if cost == 0 then
    return true, clamp0(limit - n), 0, reset
  end
  if n + cost > limit then
    -- The (n+cost-limit)th oldest live member must expire first.
    local rank = redis.call('ZCARD', key) - n + (n + cost - limit) - 1
    local r = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
    return false, clamp0(limit - n), tonumber(r[2]) + period - now, reset
  end
  local ts = now
  if newest and newest > ts then ts = newest end
  return true, limit - n - cost, 0, ts + period - now, ts
end

function sl.write(key, now, period, limit, cost, ts, reset)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - period))
  local seq = 0
  local last = redis.call('ZREVRANGEBYSCORE', key, fmt(ts), fmt(ts), 'LIMIT', 0, 1)
  if #last > 0 then
    seq = tonumber(string.sub(last[1], -8), 16) + 1
  end
  local prefix = fmt(ts) .. ':'
  local i = 0
  while i < cost do
    local args = {}
    local j = 0
    while j < 500 and i < cost do
      args[#args + 1] = fmt(ts)
      args[#args + 1] = prefix .. string.format('%08x', seq + i)
      i, j = i + 1, j + 1
    end
    redis.call('ZADD', key, unpack(args))
  end
  expire_us(key, reset)
  return ts, seq
end

function sl.refund(key, now, period, limit, cost, ts, seq)
  local prefix = fmt(ts) .. ':'
  for i = 0, cost - 1 do
    redis.call('ZREM', key, prefix .. string.format('%08x', seq + i))
  end
end
