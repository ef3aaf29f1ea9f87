-- take.lua: decide a batch of checks as one atomic, all-or-nothing step.
-- KEYS[i]  the state key of check i (all in one cluster slot).
-- ARGV     5 values per check i, at 5i-4..5i: algorithm code, p1, p2, cost,
--          and 1 to return refund information (cross-slot parts) else 0.
--          p1 and p2 are algo.Limit.Params: integers, µs and counts.
-- Reply    {now_us, batch_allowed (1|0), then 6 integers per check:
--           allowed (1|0), remaining, retry_after_us, reset_after_us,
--           refund_info1, refund_info2}
-- Time is Redis TIME, never the caller's; the reply carries it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = #KEYS
local checks = {}
local all = true
for i = 1, n do
  local c = {
    alg = ALG[tonumber(ARGV[5 * i - 4])],
    p1 = tonumber(ARGV[5 * i - 3]),
    p2 = tonumber(ARGV[5 * i - 2]),
    cost = tonumber(ARGV[5 * i - 1]),
  }
  c.ok, c.rem, c.retry, c.reset, c.st = c.alg.eval(KEYS[i], now, c.p1, c.p2, c.cost)
  all = all and c.ok
  checks[i] = c
end
local out = {now, all and 1 or 0}
for i = 1, n do
  local c = checks[i]
  local info1, info2 = 0, 0
  if c.cost > 0 then
    if all then
      info1, info2 = c.alg.write(KEYS[i], now, c.p1, c.p2, c.cost, c.st, c.reset)
    elseif c.ok then
      -- Uncharged because another check rejected: report a peek.
      c.ok, c.rem, c.retry, c.reset = c.alg.eval(KEYS[i], now, c.p1, c.p2, 0)
    end
  end
  local k = 6 * i - 3
  out[k], out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5] =
    c.ok and 1 or 0, c.rem, c.retry, c.reset, info1, info2
end
return out
