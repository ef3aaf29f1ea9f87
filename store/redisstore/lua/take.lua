-- take.lua: decide a batch of checks as one atomic, all-or-nothing step.
-- KEYS[i]  the state key of check i (all in one cluster slot).
-- ARGV     4 values per check i, at 4i-3..4i: algorithm code, p1, p2, cost.
--          p1 and p2 are algo.Limit.Params: integers, µs and counts.
-- Reply    {now_us, batch_allowed (1|0), then 6 integers per check:
--           allowed (1|0), remaining, retry_after_us, reset_after_us,
--           refund_info1, refund_info2}
-- Time is Redis TIME, never the caller's; the reply carries it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nkeys = #KEYS
local R = {}
local all = true
for i = 1, nkeys do
  local key, code = KEYS[i], tonumber(ARGV[4 * i - 3])
  local p1, p2, cost = tonumber(ARGV[4 * i - 2]), tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i])
  local ok, rem, retry, reset, s1, s2, s3 = false, 0, 0, 0, 0, 0, 0
  --{{eval}}
  local b = 7 * i - 7
  R[b + 1], R[b + 2], R[b + 3], R[b + 4], R[b + 5], R[b + 6], R[b + 7] = ok, rem, retry, reset, s1, s2, s3
  all = all and ok
end
local out = {now, all and 1 or 0}
for i = 1, nkeys do
  local key, code = KEYS[i], tonumber(ARGV[4 * i - 3])
  local p1, p2, cost = tonumber(ARGV[4 * i - 2]), tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i])
  local b = 7 * i - 7
  local ok, rem, retry, reset, s1, s2, s3 = R[b + 1], R[b + 2], R[b + 3], R[b + 4], R[b + 5], R[b + 6], R[b + 7]
  local info1, info2 = 0, 0
  if cost > 0 then
    if all then
      --{{write}}
    elseif ok then
      -- Uncharged because another check rejected: report a peek.
      cost = 0
      ok, rem, retry, reset = false, 0, 0, 0
      --{{eval}}
    end
  end
  local k = 6 * i - 3
  out[k], out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] = ok and 1 or 0, rem, retry, reset, info1, info2
end
return out
