-- lib.lua: helpers for the algorithm files; the scripts are lib.lua, the
-- five algorithm files, then take.lua or refund.lua, joined in that order.
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

local function clamp0(x)
  if x < 0 then return 0 end
  return x
end

-- fmt writes an integer with no exponent.
local function fmt(x)
  return string.format('%d', x)
end

-- expire_us sets key to expire after us microseconds, rounded up to a
-- whole millisecond (never earlier than the state stops mattering).
local function expire_us(key, us)
  redis.call('PEXPIRE', key, math.max(1, idiv(us + 999, 1000)))
end

-- ALG maps an algorithm code (algo.Algorithm) to its functions:
--   eval(key, now, p1, p2, cost) -> allowed, remaining, retry_us, reset_us, new_state
--     reads only; new_state is whatever write needs.
--   write(key, now, p1, p2, cost, new_state, reset_us) -> info1, info2
--     stores the state after an admitted take; info is what refund needs.
--   refund(key, now, p1, p2, cost, info1, info2)
--     gives back a take made by write (cross-slot batches only).
local ALG = {}
