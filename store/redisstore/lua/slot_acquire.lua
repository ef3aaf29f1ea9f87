-- slot_acquire.lua: take a request's concurrency slots as one step
-- (store.Slots.AcquireSlots). Runs after lib.lua.
-- KEYS     the slot keys: sorted sets of lease ids scored by expiry (µs),
--          all in one hash slot.
-- ARGV     lease id, lease length (µs, > 0), then per key its limit and
--          1 when it is optional (0 when not).
-- Reply    {now_us, then per key: acquired (0/1), leases held, µs until
--          the first expires (0: none)}.
-- Expired leases are reclaimed first, so a crashed holder's slots come
-- back within the lease. When a key that is not optional is full, no slot
-- is taken. Each key lives as long as its last lease.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local id, ttl = ARGV[1], tonumber(ARGV[2])
local held, n, ok = {}, {}, {}
local refused = false
for i, key in ipairs(KEYS) do
  local limit, optional = tonumber(ARGV[1 + 2 * i]), ARGV[2 + 2 * i] == '1'
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
  held[i] = redis.call('ZSCORE', key, id)
  n[i] = redis.call('ZCARD', key)
  ok[i] = held[i] or n[i] < limit
  if not ok[i] and not optional then refused = true end
end
local out = {now}
for i, key in ipairs(KEYS) do
  local acquired = 0
  if ok[i] and not refused then
    redis.call('ZADD', key, string.format('%d', now + ttl), id)
    if not held[i] then n[i] = n[i] + 1 end
    acquired = 1
  end
  local next_us = 0
  if n[i] > 0 then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    next_us = tonumber(first[2]) - now
    redis.call('PEXPIRE', key, math.max(1, idiv(tonumber(last[2]) - now + 999, 1000)))
  end
  out[#out + 1] = acquired
  out[#out + 1] = n[i]
  out[#out + 1] = next_us
end
return out
