-- sliding_log.lua: sliding window log. Mirror of algo/sliding_log.go:
-- change both or neither.
-- Key: a sorted set, one member per admitted unit, scored by its time (µs);
-- members are "<time>:<seq as 8 hex digits>", unique.
-- p1 = period (µs), p2 = limit.
-- Expired members are ignored on every call and removed on every admitted
-- take; rejected takes and peeks write nothing.
--@helpers
-- sl_append logs n units at time ts (a string of µs) and returns the
-- sequence number of the first: members at one time are numbered on from
-- the last one logged there.
local function sl_append(key, ts, n)
  local seq = 0
  local last = redis.call('ZREVRANGEBYSCORE', key, ts, ts, 'LIMIT', 0, 1)
  if #last > 0 then
    seq = tonumber(string.sub(last[1], -8), 16) + 1
  end
  local j = 0
  while j < n do
    local args = {}
    while #args < 1000 and j < n do
      args[#args + 1] = ts
      args[#args + 1] = ts .. ':' .. string.format('%08x', seq + j)
      j = j + 1
    end
    redis.call('ZADD', key, unpack(args))
  end
  return seq
end

--@eval
local live = redis.call('ZCOUNT', key, '(' .. string.format('%d', now - p1), '+inf')
local newest = nil
if live > 0 then
  newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  reset = math.max(0, newest + p1 - now)
end
if cost == 0 then
  ok, rem = true, math.max(0, p2 - live)
elseif live + cost > p2 then
  -- The (live+cost-limit)th oldest live member must expire first.
  local rank = redis.call('ZCARD', key) - live + (live + cost - p2) - 1
  rem, retry = math.max(0, p2 - live), tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]) + p1 - now
else
  local ts = now
  if newest and newest > ts then ts = newest end
  ok, rem, reset, s1 = true, p2 - live - cost, ts + p1 - now, ts
end
--@write
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - p1))
local seq = sl_append(key, string.format('%d', s1), cost)
redis.call('PEXPIRE', key, math.max(1, idiv(reset + 999, 1000)))
info1, info2 = s1, seq
--@refund
local ts = string.format('%d', info1)
for j = 0, cost - 1 do
  redis.call('ZREM', key, ts .. ':' .. string.format('%08x', info2 + j))
end
--@settle
local live = redis.call('ZCOUNT', key, '(' .. string.format('%d', now - p1), '+inf')
if delta > 0 then
  applied = math.min(delta, math.max(0, 2 * p2 - live))
  if applied > 0 then
    local ts = now
    if live > 0 then
      local newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      if newest > ts then ts = newest end
    end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - p1))
    sl_append(key, string.format('%d', ts), applied)
  end
elseif delta < 0 and at > now - p1 then
  -- The live members logged nearest the take: the nearer of the oldest at
  -- or after it and the newest before it goes first, the later on a tie.
  local ts = string.format('%d', at)
  local after = redis.call('ZRANGEBYSCORE', key, ts, '+inf', 'WITHSCORES', 'LIMIT', 0, -delta)
  local before = redis.call('ZREVRANGEBYSCORE', key, '(' .. ts, '(' .. string.format('%d', now - p1), 'WITHSCORES', 'LIMIT', 0, -delta)
  local gone, ai, bi = {}, 1, 1
  while #gone < -delta do
    if ai <= #after and (bi > #before or tonumber(after[ai + 1]) - at <= at - tonumber(before[bi + 1])) then
      gone[#gone + 1], ai = after[ai], ai + 2
    elseif bi <= #before then
      gone[#gone + 1], bi = before[bi], bi + 2
    else
      break
    end
  end
  if #gone > 0 then
    applied = -#gone
    for j = 1, #gone, 1000 do
      redis.call('ZREM', key, unpack(gone, j, math.min(j + 999, #gone)))
    end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - p1))
  end
end
live = live + applied
rem = p2 - live
if live > 0 then
  reset = math.max(0, tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) + p1 - now)
  if applied ~= 0 then
    redis.call('PEXPIRE', key, math.max(1, idiv(reset + 999, 1000)))
  end
end
