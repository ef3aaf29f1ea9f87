-- lib.lua: the start of every script. A script is lib.lua, the helpers of
-- the algorithms its batch uses, then a driver (take1.lua, take_multi.lua,
-- take1_multi.lua, take_node.lua, refund.lua, settle.lua, settle_multi.lua
-- or settle_node.lua) with the algorithms' fragments spliced in where the
-- driver says --{{eval}}, --{{write}}, --{{refund}} or --{{settle}}.
-- Redis runs the whole chunk on every call, so the fragments are inline
-- code, not functions: nothing is defined per call but a few helpers.
--
-- Fragment contract (locals the driver declares):
--   eval   reads key, now, p1, p2, p3, cost; sets ok, rem, retry, reset (µs) and
--          s1, s2, s3 (the state to write). Reads only, but for gcra's
--          write-back of a TAT it clamped to the limit in force, which
--          means the same state under that limit (idempotent).
--   write  reads key, now, p1, p2, cost, s1..s3, reset; stores the state of
--          an admitted take; sets info1, info2 (what refund needs).
--   refund reads key, now, p1, p2, cost, info1, info2; gives back a take
--          made by write (cross-slot batches only).
--   settle reads key, now, p1, p2, p3, delta (signed units), at (the
--          settled take's time, µs); sets applied, rem (signed), reset
--          and, when applied ~= 0, writes the state (algo.Limit.Settle).
--
-- Numbers are IEEE doubles. algo.Limit.Validate keeps every value below
-- 2^53, where they are exact integers; division is floored explicitly and
-- corrected, numbers are written with %d, never in exponent notation.

-- idiv is floor(a / b) for a >= 0 and b >= 1, exact: the double quotient
-- can round up to the next integer when b is large, so correct it.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- limits reads the table of distinct limits the merged drivers
-- (take_multi.lua, take1_multi.lua, take_node.lua, settle_multi.lua,
-- settle_node.lua) take in ARGV (from ARGV[2]: their number L, then 4 values
-- each) into four arrays indexed from 0: algorithm code, p1, p2, p3; and
-- returns them with L and the ARGV index of the last value read.
local function limits()
  local nl = tonumber(ARGV[2])
  local LC, L1, L2, L3 = {}, {}, {}, {}
  for j = 0, nl - 1 do
    local a = 3 + 4 * j
    LC[j], L1[j], L2[j], L3[j] = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  end
  return nl, LC, L1, L2, L3, 2 + 4 * nl
end
