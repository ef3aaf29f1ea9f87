-- settle_multi.lua: apply several settlements' parts for one slot in one
-- call, each as settle.lua would alone and as its own atomic step, in
-- order: a later part sees an earlier one's writes and id record (the same
-- id twice in one call applies once). Concurrent callers' settlement parts
-- for one slot are merged into it, as takes are into take_multi.lua.
-- KEYS     per part: its id record, then one state key per adjustment;
--          part after part (all in one cluster slot).
-- ARGV     [1] = number of parts; [2] = number of distinct limits L; then
--          the L limits, 4 values each: algorithm code, p1, p2, p3 (as in
--          take_multi.lua); then the id records' lifetime (ms); then per
--          part: its number of adjustments n, then 2 values per
--          adjustment: delta × L + the index (from 0) of its limit (delta
--          signed: the index is the value modulo L, floored, as Lua's %),
--          and taken_at (µs).
-- Reply    {now_us, then per part: repeated (1|0), then 3 integers per
--           adjustment: applied (units, signed), remaining (signed),
--           reset_after_us}: per part, settle.lua's reply without now.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nl, LC, L1, L2, L3, last = limits()
local life = ARGV[last + 1]
local out = {now}
local o = 1        -- last index written in out
local ai = last + 2 -- ARGV index of the current part's n
local k0 = 0       -- KEYS offset of the current part
for _ = 1, tonumber(ARGV[1]) do
  local n = tonumber(ARGV[ai])
  local fresh = redis.call('SET', KEYS[k0 + 1], '1', 'NX', 'PX', life)
  out[o + 1] = fresh and 0 or 1
  o = o + 1
  for i = 1, n do
    local v = tonumber(ARGV[ai + 2 * i - 1])
    local li = v % nl
    local delta, at = (v - li) / nl, tonumber(ARGV[ai + 2 * i])
    local key, code, p1, p2, p3 = KEYS[k0 + 1 + i], LC[li], L1[li], L2[li], L3[li]
    if not fresh then delta = 0 end
    local applied, rem, reset = 0, 0, 0
    --{{settle}}
    out[o + 1], out[o + 2], out[o + 3] = applied, rem, reset
    o = o + 3
  end
  ai = ai + 1 + 2 * n
  k0 = k0 + 1 + n
end
return out
