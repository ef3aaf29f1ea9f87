-- token_bucket.lua: token bucket. Mirror of algo/token_bucket.go: change
-- both or neither.
-- Key: a hash; t = whole tokens (below zero: a debt), l = time refill is
-- credited up to (µs).
-- p1 = emission interval (µs per token), p2 = burst.
--@helpers
local function tb_refill(key, now, em, burst)
  local v = redis.call('HMGET', key, 't', 'l')
  local tokens, last = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  -- Tokens written under a larger burst are read as at most this burst; a
  -- debt (tokens below zero) as at most one burst.
  tokens = math.max(-burst, math.min(tokens, burst))
  if now > last then
    local n = idiv(now - last, em)
    tokens, last = tokens + n, last + n * em
    if tokens >= burst then
      tokens, last = burst, now
    end
  end
  return tokens, last
end

local function tb_reset(em, burst, tokens, last, now)
  if tokens >= burst then return 0 end
  return math.max(0, (burst - tokens) * em - (now - last))
end
--@eval
local tokens, last = tb_refill(key, now, p1, p2)
if cost == 0 then
  ok, rem = true, math.max(0, tokens)
elseif tokens < cost then
  rem, retry = math.max(0, tokens), (cost - tokens) * p1 - (now - last)
else
  tokens = tokens - cost
  ok, rem, s1, s2 = true, tokens, tokens, last
end
reset = tb_reset(p1, p2, tokens, last, now)
--@write
redis.call('HSET', key, 't', string.format('%d', s1), 'l', string.format('%d', s2))
redis.call('PEXPIRE', key, math.max(1, idiv(reset + 999, 1000)))
--@refund
local tokens, last = tb_refill(key, now, p1, p2)
tokens = math.min(p2, tokens + cost)
if tokens >= p2 then
  redis.call('DEL', key)
else
  redis.call('HSET', key, 't', string.format('%d', tokens), 'l', string.format('%d', last))
  redis.call('PEXPIRE', key, math.max(1, idiv(tb_reset(p1, p2, tokens, last, now) + 999, 1000)))
end
--@settle
local tokens, last = tb_refill(key, now, p1, p2)
if delta > 0 then
  applied = math.min(delta, tokens + p2)
elseif delta < 0 then
  applied = -math.min(-delta, p2 - tokens)
end
tokens = tokens - applied
rem, reset = tokens, tb_reset(p1, p2, tokens, last, now)
if applied ~= 0 then
  if tokens >= p2 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 't', string.format('%d', tokens), 'l', string.format('%d', last))
    redis.call('PEXPIRE', key, math.max(1, idiv(reset + 999, 1000)))
  end
end
