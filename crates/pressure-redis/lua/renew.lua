-- renew.lua: extend live leases; a lease that has expired is gone for good.
-- The broker's renewal task sends every due lease of a resource in one call.
--
-- KEYS[1]  state hash of the resource (see acquire.lua)
-- ARGV[1]  lease TTL in us
-- ARGV[2..] lease ids
-- Returns one flag per lease id: 1 when renewed, 0 when already lost.
-- Runs after outlive.lua.

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local key = KEYS[1]
local ttl = tonumber(ARGV[1])
local f = {}
for i = 2, #ARGV do f[#f + 1] = 'l:' .. ARGV[i] end
local n = #f
f[n + 1] = 'e'
local v = redis.call('HMGET', key, unpack(f))
local out, upd, dead = {}, {}, {}
for i = 1, n do
  local exp = tonumber(v[i])
  if exp == nil then
    out[i] = 0
  elseif exp <= now then
    dead[#dead + 1] = f[i]
    out[i] = 0
  else
    upd[#upd + 1] = f[i]; upd[#upd + 1] = now + ttl
    out[i] = 1
  end
end
if #dead > 0 then
  redis.call('HDEL', key, unpack(dead))
  redis.call('HINCRBY', key, 'c', -#dead)
end
-- The key outlives the renewed leases (outlive.lua).
if #upd > 0 then hset_outliving(key, upd, tonumber(v[n + 1]) or 0, now + ttl, ttl) end
return out
