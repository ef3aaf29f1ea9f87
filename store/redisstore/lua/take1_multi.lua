-- take1_multi.lua: take_multi.lua for merged batches of one check each,
-- without the bookkeeping a batch of several needs.
-- KEYS     one key per batch.
-- ARGV     take_multi.lua's, without the per-batch count of checks:
--          [1] = number of batches, [2] = number of limits L, then the
--          limits (4 values each), then one value per batch.
-- Reply    {now_us, then per batch: allowed (1|0), remaining,
--           retry_after_us, reset_after_us, refund_info1, refund_info2}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nl, LC, L1, L2, L3, a0 = limits()
local out = {now}
local o = 1
for i = 1, tonumber(ARGV[1]) do
  local v = tonumber(ARGV[a0 + i])
  local li = v % nl
  local cost = (v - li) / nl
  local key, code, p1, p2, p3 = KEYS[i], LC[li], L1[li], L2[li], L3[li]
  local ok, rem, retry, reset, s1, s2, s3 = false, 0, 0, 0, 0, 0, 0
  --{{eval}}
  local info1, info2 = 0, 0
  if ok and cost > 0 then
    --{{write}}
  end
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = ok and 1 or 0, rem, retry, reset, info1, info2
  o = o + 6
end
return out
