-- take1_multi.lua: take_multi.lua for merged batches of one check each,
-- without the bookkeeping a batch of several needs.
-- KEYS     one key per batch.
-- ARGV     [1] = number of batches; then per batch: 1, then its 5 values
--          (the layout of take_multi.lua).
-- Reply    as take_multi.lua's.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {now}
local o = 1
for i = 1, tonumber(ARGV[1]) do
  local a = 6 * i - 3 -- ARGV index of this batch's algorithm code
  local key, code = KEYS[i], tonumber(ARGV[a])
  local p1, p2, p3, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local ok, rem, retry, reset, s1, s2, s3 = false, 0, 0, 0, 0, 0, 0
  --{{eval}}
  local info1, info2 = 0, 0
  if ok and cost > 0 then
    --{{write}}
  end
  local x = ok and 1 or 0
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] = x, x, rem, retry, reset, info1, info2
  o = o + 7
end
return out
