-- renew.lua: extend a live lease; a lease that has expired is gone for good.
--
-- KEYS[1]  lease sorted set of the resource
-- ARGV[1]  lease member
-- ARGV[2]  lease TTL in us
-- Returns 1 when renewed, 0 when the lease was already lost.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if exp == nil then return 0 end
if exp <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1000)
return 1
