-- lib.lua: the start of every script. A script is lib.lua, the helpers of
-- the algorithms its batch uses, then a driver (take1.lua, take_multi.lua,
-- take1_multi.lua or refund.lua) with the
-- algorithms' fragments spliced in where the driver says --{{eval}},
-- --{{write}} or --{{refund}}. Redis runs the whole chunk on every call, so
-- the fragments are inline code, not functions: nothing is defined per call
-- but a few helpers.
--
-- Fragment contract (locals the driver declares):
--   eval   reads key, now, p1, p2, p3, cost; sets ok, rem, retry, reset (µs) and
--          s1, s2, s3 (the state to write). Reads only.
--   write  reads key, now, p1, p2, cost, s1..s3, reset; stores the state of
--          an admitted take; sets info1, info2 (what refund needs).
--   refund reads key, now, p1, p2, cost, info1, info2; gives back a take
--          made by write (cross-slot batches only).
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
