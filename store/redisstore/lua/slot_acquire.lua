-- slot_acquire.lua: take a concurrency slot (store.Slots.AcquireSlot).
-- Runs after lib.lua.
-- KEYS[1]  the slot key: a sorted set of lease ids scored by expiry (µs).
-- ARGV     lease id, limit, lease length (µs, > 0).
-- Reply    {now_us, acquired (0/1), leases held, µs until the first expires (0: none)}.
-- Expired leases are reclaimed first, so a crashed holder's slots come back
-- within the lease. The key lives as long as its last lease.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key, id = KEYS[1], ARGV[1]
local limit, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
local held = redis.call('ZSCORE', key, id)
local n = redis.call('ZCARD', key)
local acquired = 0
if held or n < limit then
  redis.call('ZADD', key, string.format('%d', now + ttl), id)
  if not held then n = n + 1 end
  acquired = 1
end
local next_us = 0
if n > 0 then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  next_us = tonumber(first[2]) - now
  redis.call('PEXPIRE', key, math.max(1, idiv(tonumber(last[2]) - now + 999, 1000)))
end
return {now, acquired, n, next_us}
