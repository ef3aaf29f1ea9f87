-- token_bucket.lua: token bucket. Mirror of algo/token_bucket.go: change
-- both or neither.
-- Key: a hash; t = whole tokens, l = time refill is credited up to (µs).
-- p1 = emission interval (µs per token), p2 = burst.
local tb = {}
ALG[1] = tb

local function tb_refill(key, now, em, burst)
  local v = redis.call('HMGET', key, 't', 'l')
  local tokens, last = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  if now > last then
    local n = idiv(now - last, em)
    tokens = tokens + n
    last = last + n * em
    if tokens >= burst then
      tokens, last = burst, now
    end
  end
  return tokens, last
end

local function tb_reset(em, burst, tokens, last, now)
  if tokens >= burst then return 0 end
  return clamp0((burst - tokens) * em - (now - last))
end

function tb.eval(key, now, em, burst, cost)
  local tokens, last = tb_refill(key, now, em, burst)
  if cost == 0 then
    return true, tokens, 0, tb_reset(em, burst, tokens, last, now)
  end
  if tokens < cost then
    return false, tokens, (cost - tokens) * em - (now - last), tb_reset(em, burst, tokens, last, now)
  end
  tokens = tokens - cost
  return true, tokens, 0, tb_reset(em, burst, tokens, last, now), {tokens, last}
end

function tb.write(key, now, em, burst, cost, st, reset)
  redis.call('HSET', key, 't', fmt(st[1]), 'l', fmt(st[2]))
  expire_us(key, reset)
  return 0, 0
end

function tb.refund(key, now, em, burst, cost)
  local tokens, last = tb_refill(key, now, em, burst)
  tokens = math.min(burst, tokens + cost)
  if tokens >= burst then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 't', fmt(tokens), 'l', fmt(last))
  expire_us(key, tb_reset(em, burst, tokens, last, now))
end
