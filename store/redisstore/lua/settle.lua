-- settle.lua: apply one failure domain's part of a settlement (the
-- adjustments of store.Store.Settle whose keys share this slot), exactly
-- once per settlement id.
-- KEYS[1]  the id record: a string whose presence says this part of the
--          settlement was applied. Set with SET NX PX in this same step,
--          so that a retry of the same id applies nothing.
-- KEYS[i]  for i >= 2, the state key of adjustment i-1.
-- ARGV     [1] = the id record's lifetime (ms); then 6 values per
--          adjustment j, at 6j-4..6j+1: algorithm code, p1, p2, p3, delta
--          (units, signed), taken_at (µs: when the take being settled was
--          decided).
-- Reply    {now_us, repeated (1: the id was applied before, nothing is
--          now), then 3 integers per adjustment: applied (units, signed),
--          remaining (signed), reset_after_us}
-- Each algorithm's --@settle fragment mirrors algo.Limit.Settle.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fresh = redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1])
local out = {now, fresh and 0 or 1}
for i = 2, #KEYS do
  local a = 6 * i - 10
  local key, code = KEYS[i], tonumber(ARGV[a])
  local p1, p2, p3, delta, at = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  if not fresh then delta = 0 end
  local applied, rem, reset = 0, 0, 0
  --{{settle}}
  out[#out + 1] = applied
  out[#out + 1] = rem
  out[#out + 1] = reset
end
return out
