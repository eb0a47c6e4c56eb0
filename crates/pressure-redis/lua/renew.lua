-- renew.lua: extend a live lease; a lease that has expired is gone for good.
--
-- KEYS[1]  state hash of the resource (see acquire.lua)
-- ARGV[1]  lease id
-- ARGV[2]  lease TTL in us
-- Returns 1 when renewed, 0 when the lease was already lost.

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local ttl = tonumber(ARGV[2])
local f = 'l:' .. ARGV[1]
local v = redis.call('HMGET', KEYS[1], f, 'x')
local exp = tonumber(v[1])
if exp == nil then return 0 end
if exp <= now then
  redis.call('HDEL', KEYS[1], f)
  redis.call('HINCRBY', KEYS[1], 'c', -1)
  return 0
end
local upd = {f, now + ttl}
local x = tonumber(v[2]) or 0
if now + ttl > x then
  x = now + ttl + 10000000
  upd[#upd + 1] = 'x'; upd[#upd + 1] = x
  redis.call('PEXPIREAT', KEYS[1], math.ceil(x / 1000))
end
redis.call('HSET', KEYS[1], unpack(upd))
return 1
