-- settle_node.lua: settle_multi.lua for a Redis Cluster node, merging the
-- settlement parts of every slot the node serves into one call (as
-- take_node.lua merges takes). The keys travel in ARGV, undeclared, which
-- Redis allows for the slots the node serves and refuses, key by key, for
-- the others. Each part is applied inside pcall: its first touch of a key
-- is the SET NX of its id record, in the part's slot like all its keys, so
-- a part the node refuses there (its slot moved, is migrating and the
-- record is not here, or the cluster is down) wrote nothing, and is
-- answered -1, "not applied here": the caller sends it again on its own,
-- with declared keys, which the client routes and redirects. Once the
-- record is written here, every key of the part is served here. Any other
-- error ends the call, as in settle_multi.lua.
-- KEYS     none.
-- ARGV     settle_multi.lua's, then every part's keys (its id record, then
--          one state key per adjustment), part after part, then their
--          number.
-- Reply    settle_multi.lua's, with repeated -1 (and zeros for its
--          adjustments) for a part not applied here.
local nk = tonumber(ARGV[#ARGV])
local k0 = #ARGV - 1 - nk -- ARGV offset of the current part's keys
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nl, LC, L1, L2, L3, last = limits()
local life = ARGV[last + 1]
local out = {now}
local o = 1        -- last index written in out
local ai = last + 2 -- ARGV index of the current part's n
local n             -- the current part's number of adjustments

-- part applies the current part as settle_multi.lua's loop body does,
-- writing its answers in out after o.
local function part()
  local fresh = redis.call('SET', ARGV[k0 + 1], '1', 'NX', 'PX', life)
  out[o + 1] = fresh and 0 or 1
  local q = o + 1
  for i = 1, n do
    local v = tonumber(ARGV[ai + 2 * i - 1])
    local li = v % nl
    local delta, at = (v - li) / nl, tonumber(ARGV[ai + 2 * i])
    local key, code, p1, p2, p3 = ARGV[k0 + 1 + i], LC[li], L1[li], L2[li], L3[li]
    if not fresh then delta = 0 end
    local applied, rem, reset = 0, 0, 0
    --{{settle}}
    out[q + 1], out[q + 2], out[q + 3] = applied, rem, reset
    q = q + 3
  end
end

for _ = 1, tonumber(ARGV[1]) do
  n = tonumber(ARGV[ai])
  local done, err = pcall(part)
  if not done then
    local msg = type(err) == 'table' and err.err or tostring(err)
    if not (string.find(msg, 'non local key', 1, true) or string.find(msg, 'cluster is down', 1, true)) then
      error(err)
    end
    out[o + 1] = -1
    for j = o + 2, o + 1 + 3 * n do out[j] = 0 end
  end
  o = o + 1 + 3 * n
  ai = ai + 1 + 2 * n
  k0 = k0 + 1 + n
end
return out
