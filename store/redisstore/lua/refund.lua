-- refund.lua: give back the takes of one slot's part of a cross-slot batch
-- that another part rejected, then report a peek of each check.
-- KEYS[i]  the state key of check i.
-- ARGV     6 values per check i, at 6i-5..6i: algorithm code, p1, p2, cost,
--          refund_info1, refund_info2 (as the take scripts returned them).
-- Reply    {now_us, then 4 integers per check: 1, remaining, 0, reset_after_us}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {now}
for i = 1, #KEYS do
  local key, code = KEYS[i], tonumber(ARGV[6 * i - 5])
  local p1, p2, cost = tonumber(ARGV[6 * i - 4]), tonumber(ARGV[6 * i - 3]), tonumber(ARGV[6 * i - 2])
  local info1, info2 = tonumber(ARGV[6 * i - 1]), tonumber(ARGV[6 * i])
  if cost > 0 then
    --{{refund}}
  end
  cost = 0
  local ok, rem, retry, reset, s1, s2, s3 = false, 0, 0, 0, 0, 0, 0
  --{{eval}}
  local k = 4 * i - 2
  out[k], out[k + 1], out[k + 2], out[k + 3] = 1, rem, retry, reset
end
return out
