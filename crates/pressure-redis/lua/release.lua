-- release.lua: give leases back, once each; optionally leave a tombstone for
-- a lease whose acquisition may still be on its way.
--
-- KEYS[1]  state hash of the resource (see acquire.lua)
-- ARGV[1]  tombstone TTL in us: 0 for a plain release (the lease was
--          granted); > 0 for a lost acquisition (its reply never came): a
--          lease that is not there yet gets a tombstone d:<id>, and
--          acquire.lua then refuses that lease id when it arrives
-- ARGV[2..] lease ids
-- Returns the number of leases that were live. Runs after outlive.lua.

local key = KEYS[1]
local tomb_ttl = tonumber(ARGV[1])
local freed = 0
local tombs = nil
for i = 2, #ARGV do
  if redis.call('HDEL', key, 'l:' .. ARGV[i]) == 1 then
    freed = freed + 1
  elseif tomb_ttl > 0 then
    tombs = tombs or {}
    tombs[#tombs + 1] = 'd:' .. ARGV[i]
  end
end
if freed > 0 then redis.call('HINCRBY', key, 'c', -freed) end
if tombs then
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  local upd = {}
  for j = 1, #tombs do upd[#upd + 1] = tombs[j]; upd[#upd + 1] = now + tomb_ttl end
  -- The key outlives its tombstones (outlive.lua).
  local x = tonumber(redis.call('HGET', key, 'e')) or 0
  hset_outliving(key, upd, x, now + tomb_ttl, tomb_ttl)
end
return freed
