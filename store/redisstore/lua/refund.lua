-- refund.lua: give back the takes of one slot's part of a cross-slot batch
-- that another part rejected, then report a peek of each check.
-- KEYS[i]  the state key of check i.
-- ARGV     7 values per check i, at 7i-6..7i: algorithm code, p1, p2, p3,
--          cost, refund_info1, refund_info2 (as the take scripts returned
--          them).
-- Reply    {now_us, then 4 integers per check: 1, remaining, 0, reset_after_us}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {now}
for i = 1, #KEYS do
  local a = 7 * i - 6
  local key, code = KEYS[i], tonumber(ARGV[a])
  local p1, p2, p3, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local info1, info2 = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
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
