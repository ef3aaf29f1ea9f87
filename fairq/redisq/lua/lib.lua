-- lib.lua: helpers every fairq script starts with.
-- Time is Redis TIME in milliseconds; numbers are written with '%d'.
local function fmt(n) return string.format('%d', n) end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
