-- hold.lua: hold a GCRA key, so that it admits nothing for a while and a
-- unit cost once that has passed (an upstream's Retry-After). Mirror of
-- algo/hold.go: change both or neither. Runs after lib.lua.
-- KEYS[1]  the state key (a GCRA TAT in µs, as gcra.lua keeps it).
-- ARGV     emission interval (µs), burst, the hold's length (µs, > 0).
-- Reply    {now_us, tat_us}: the server's clock and the TAT in force.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local em, burst, d = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('GET', key)
local tat = tonumber(v)
if v and not tat then tat = tonumber(string.sub(v, 1, -2)) end
tat = tat or 0
local want = now + d + em * (burst - 1)
if want > tat then
  tat = want
  -- The trailing 'h' marks a hold: gcra.lua keeps it unclamped.
  redis.call('SET', key, string.format('%dh', tat), 'PX', math.max(1, idiv(tat - now + 999, 1000)))
end
return {now, tat}
