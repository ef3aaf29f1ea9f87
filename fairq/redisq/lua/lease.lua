-- lease.lua: hand out the next job of a kind, fairly.
-- KEYS[1] ring (zset: tenant tag -> order)   KEYS[2] deficit (hash)
-- KEYS[3] weight (hash)                      KEYS[4] inflight (zset: id -> lease end ms)
-- KEYS[5] delayed (zset: id -> retry ms)     KEYS[6] depth (string)
-- KEYS[7] tdepth (hash)                      KEYS[8] dead (list)
-- KEYS[9] seq (string)
-- ARGV: key prefix of the kind (ending in ':'), visibility ms, max attempts,
-- lease token, retention s.
-- Reply: {id, tenant, payload, attempt, lease end ms}, or false when no job
-- is ready.
--
-- The tenants' streams (<prefix>s:<tag>) and the jobs' hashes
-- (<prefix>j:<id>) are named inside the script: which tenant is next is
-- decided here, atomically with its delivery, so that no crash between two
-- calls can lose a job. They share the kind's hash tag with KEYS, so on
-- Redis Cluster they are in the same slot.
local P, vis, maxa, token, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])

local function give(id)
  local jk = P .. 'j:' .. id
  local a = redis.call('HINCRBY', jk, 'attempts', 1)
  redis.call('HSET', jk, 'status', 'running', 'token', token, 'updated', fmt(now))
  redis.call('ZADD', KEYS[4], fmt(now + vis), id)
  local j = redis.call('HMGET', jk, 'tenant', 'payload')
  return {id, j[1], j[2], a, fmt(now + vis)}
end

-- finish ends a job that is out of the stream: done or failed.
local function finish(id, tag, status)
  local jk = P .. 'j:' .. id
  redis.call('HSET', jk, 'status', status, 'updated', fmt(now))
  redis.call('HDEL', jk, 'token', 'payload')
  redis.call('EXPIRE', jk, keep)
  redis.call('DECR', KEYS[6])
  if redis.call('HINCRBY', KEYS[7], tag, -1) <= 0 then redis.call('HDEL', KEYS[7], tag) end
end

-- 1. Leases that expired: claim the entry again (XCLAIM of that entry with
-- the visibility as the least idle time, so the stream's own record of the
-- delivery agrees) and hand it out, or dead-letter it.
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 16)) do
  local jk = P .. 'j:' .. id
  local h = redis.call('HMGET', jk, 'tag', 'entry', 'attempts', 'status')
  local s = P .. 's:' .. (h[1] or '')
  if h[4] ~= 'running' then
    redis.call('ZREM', KEYS[4], id)
  elseif tonumber(h[3]) >= maxa then
    redis.call('XACK', s, 'w', h[2])
    redis.call('XDEL', s, h[2])
    redis.call('ZREM', KEYS[4], id)
    finish(id, h[1], 'failed')
    redis.call('RPUSH', KEYS[8], id)
    redis.call('LTRIM', KEYS[8], -10000, -1)
  else
    local c = redis.call('XCLAIM', s, 'w', 'c', vis - 1, h[2])
    if c[1] and c[1][1] == h[2] then return give(id) end
    -- Not idle long enough by the stream's own clock: try later.
    redis.call('ZADD', KEYS[4], fmt(now + 1), id)
    break
  end
end

-- 2. Nacked jobs whose retry time has come go back to their tenant's line.
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 16)) do
  redis.call('ZREM', KEYS[5], id)
  local jk = P .. 'j:' .. id
  local tag = redis.call('HGET', jk, 'tag')
  if tag and redis.call('HGET', jk, 'status') == 'queued' then
    local eid = redis.call('XADD', P .. 's:' .. tag, '*', 'id', id)
    redis.call('HSET', jk, 'entry', eid)
    if not redis.call('ZSCORE', KEYS[1], tag) then
      redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[9]), tag)
    end
  end
end

-- 3. Deficit round robin over the tenants with jobs in their line.
for _ = 1, 64 do
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)
  local tag = head[1]
  if not tag then return false end
  local r = redis.call('XREADGROUP', 'GROUP', 'w', 'c', 'COUNT', 1, 'STREAMS', P .. 's:' .. tag, '>')
  if not r then
    redis.call('ZREM', KEYS[1], tag)
    redis.call('HDEL', KEYS[2], tag)
  else
    local d = tonumber(redis.call('HGET', KEYS[2], tag) or '0')
    if d < 1 then d = d + tonumber(redis.call('HGET', KEYS[3], tag) or '1') end
    d = d - 1
    if d < 1 then
      redis.call('HDEL', KEYS[2], tag)
      redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[9]), tag)
    else
      redis.call('HSET', KEYS[2], tag, fmt(d))
    end
    local entry = r[1][2][1]
    return give(entry[2][2])
  end
end
return false
