-- load.lua: read the overlay consistently with its version.
-- KEYS[1] plans hash, KEYS[2] tenants hash, KEYS[3] version counter.
-- Reply   {version, HGETALL plans, HGETALL tenants}
return {redis.call('GET', KEYS[3]) or '0', redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
