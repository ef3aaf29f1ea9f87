-- take1.lua: decide a batch of one check, without the bookkeeping a batch
-- of several needs (Redis runs every line of a script on every call).
-- KEYS[1]  the state key.
-- ARGV     algorithm code, p1, p2, p3, cost (as in take_multi.lua).
-- Reply    as take_multi.lua's for one batch of one check: {now_us,
--           allowed, allowed, remaining, retry_after_us, reset_after_us,
--           info1, info2}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key, code = KEYS[1], tonumber(ARGV[1])
local p1, p2, p3, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ok, rem, retry, reset, s1, s2, s3 = false, 0, 0, 0, 0, 0, 0
--{{eval}}
local info1, info2 = 0, 0
if ok and cost > 0 then
  --{{write}}
end
local a = ok and 1 or 0
return {now, a, a, rem, retry, reset, info1, info2}
