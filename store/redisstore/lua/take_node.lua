-- take_node.lua: take_multi.lua for a Redis Cluster node, merging the
-- batches of every slot the node serves into one call (take_multi.lua
-- merges one slot's). Redis refuses declared keys of several slots
-- (CROSSSLOT), so the keys travel in ARGV, undeclared; a script without a
-- shebang may touch undeclared keys of any slot its node serves (Redis 6.2
-- and 7), and Redis refuses, key by key, one the node does not serve. Each
-- batch is decided inside pcall: a batch whose first touch of a key is
-- refused that way (its slot moved, is migrating and the key is gone, or
-- the cluster is down) wrote nothing, since every check is read before any
-- is written, and is answered -1, "not decided here": the caller sends it
-- again on its own, with declared keys, which the client routes and
-- redirects. Any other error ends the call, as in take_multi.lua.
-- KEYS     none.
-- ARGV     take_multi.lua's, then every batch's keys, batch after batch,
--          then their number.
-- Reply    take_multi.lua's, with batch_allowed -1 (and zeros for its
--          checks) for a batch not decided here.
local nk = tonumber(ARGV[#ARGV])
local k0 = #ARGV - 1 - nk -- ARGV offset of the current batch's keys
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nl, LC, L1, L2, L3, last = limits()
local out = {now}
local o = 1         -- last index written in out
local ai = last + 1 -- next ARGV index
local nkeys, a0     -- the current batch's number of checks and first value
local R = {}

-- batch decides the current batch as take_multi.lua's loop body does,
-- writing its answers in out after o.
local function batch()
  local all = true
  for i = 1, nkeys do
    local v = tonumber(ARGV[a0 + i - 1])
    local li = v % nl
    local cost = (v - li) / nl
    local key, code, p1, p2, p3 = ARGV[k0 + i], LC[li], L1[li], L2[li], L3[li]
    local ok, rem, retry, reset, s1, s2, s3 = false, 0, 0, 0, 0, 0, 0
    --{{eval}}
    local b = 7 * i - 7
    R[b + 1], R[b + 2], R[b + 3], R[b + 4], R[b + 5], R[b + 6], R[b + 7] = ok, rem, retry, reset, s1, s2, s3
    all = all and ok
  end
  out[o + 1] = all and 1 or 0
  local q = o + 1
  for i = 1, nkeys do
    local v = tonumber(ARGV[a0 + i - 1])
    local li = v % nl
    local cost = (v - li) / nl
    local key, code, p1, p2, p3 = ARGV[k0 + i], LC[li], L1[li], L2[li], L3[li]
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
    out[q + 1], out[q + 2], out[q + 3], out[q + 4], out[q + 5], out[q + 6] = ok and 1 or 0, rem, retry, reset, info1, info2
    q = q + 6
  end
end

for _ = 1, tonumber(ARGV[1]) do
  nkeys = tonumber(ARGV[ai])
  a0 = ai + 1
  local done, err = pcall(batch)
  if not done then
    local msg = type(err) == 'table' and err.err or tostring(err)
    if not (string.find(msg, 'non local key', 1, true) or string.find(msg, 'cluster is down', 1, true)) then
      error(err)
    end
    out[o + 1] = -1
    for j = o + 2, o + 1 + 6 * nkeys do out[j] = 0 end
  end
  o = o + 1 + 6 * nkeys
  ai = a0 + nkeys
  k0 = k0 + nkeys
end
return out
