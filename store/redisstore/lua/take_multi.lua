-- take_multi.lua: decide several independent batches in one call, each as
-- one atomic, all-or-nothing step of its own, in order (a later batch sees
-- an earlier one's writes). Concurrent callers' batches for one slot are
-- merged into it to save Redis the cost of a call apiece.
-- KEYS     every batch's keys, batch after batch (all in one cluster slot).
-- ARGV     [1] = number of batches; [2] = number of distinct limits L;
--          then the L limits, 4 values each: algorithm code, p1, p2, p3
--          (algo.Limit.Params: integers, µs and counts); then per batch:
--          its number of checks n, then one value per check: cost × L +
--          the index (from 0) of its limit. Limits are sent once per call,
--          not once per check: Redis turns every argument into a string
--          object, then a Lua string, which costs more than the check.
-- Reply    {now_us, then per batch: batch_allowed (1|0), then 6 integers
--           per check: allowed (1|0), remaining, retry_after_us,
--           reset_after_us, refund_info1, refund_info2}
-- Time is Redis TIME, never the caller's; the reply carries it. A batch of
-- several checks that is not merged runs this script as one batch.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nl, LC, L1, L2, L3, last = limits()
local out = {now}
local o = 1         -- last index written in out
local ai = last + 1 -- next ARGV index
local k0 = 0 -- KEYS offset of the current batch
for _ = 1, tonumber(ARGV[1]) do
  local nkeys = tonumber(ARGV[ai])
  local a0 = ai + 1
  local R = {}
  local all = true
  for i = 1, nkeys do
    local v = tonumber(ARGV[a0 + i - 1])
    local li = v % nl
    local cost = (v - li) / nl
    local key, code, p1, p2, p3 = KEYS[k0 + i], LC[li], L1[li], L2[li], L3[li]
    local ok, rem, retry, reset, s1, s2, s3 = false, 0, 0, 0, 0, 0, 0
    --{{eval}}
    local b = 7 * i - 7
    R[b + 1], R[b + 2], R[b + 3], R[b + 4], R[b + 5], R[b + 6], R[b + 7] = ok, rem, retry, reset, s1, s2, s3
    all = all and ok
  end
  o = o + 1
  out[o] = all and 1 or 0
  for i = 1, nkeys do
    local v = tonumber(ARGV[a0 + i - 1])
    local li = v % nl
    local cost = (v - li) / nl
    local key, code, p1, p2, p3 = KEYS[k0 + i], LC[li], L1[li], L2[li], L3[li]
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
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = ok and 1 or 0, rem, retry, reset, info1, info2
    o = o + 6
  end
  ai = a0 + nkeys
  k0 = k0 + nkeys
end
return out
