-- shared_hash.lua: one operation on a shared hash of configuration that a
-- fleet watches (src/shared_hash.rs; the gateway's tenant limit overrides).
--
-- Every write bumps the hash's version and announces itself on the channel
-- in the same atomic call, so the order of the announcements is the order
-- of the writes, and a snapshot names the version it shows.
--
-- KEYS[1]  the hash (field -> value); persistent on purpose (configuration)
-- KEYS[2]  its version counter (an integer string, same hash tag)
-- ARGV[1]  "set", "upd", "del" or "all"
-- ARGV[2]  the channel (set, upd, del)
-- ARGV[3]  the field (set, upd, del)
-- ARGV[4]  the value (set, upd)
-- Returns
--   upd       as set when the field exists; 0 (nothing written, nothing
--             announced) when it does not
--   set, del  the new version; the channel gets
--             "<version> s <field bytes>:<field><value>" or
--             "<version> d <field bytes>:<field>"
--   all       { version, field1, value1, field2, value2, ... }

local op = ARGV[1]
if op == 'all' then
  local out = { tonumber(redis.call('GET', KEYS[2]) or '0') }
  local flat = redis.call('HGETALL', KEYS[1])
  for i = 1, #flat do out[#out + 1] = flat[i] end
  return out
end

if op ~= 'set' and op ~= 'del' and op ~= 'upd' then
  return redis.error_reply('shared_hash.lua: unknown op ' .. tostring(op))
end
local field = ARGV[3]
if op == 'upd' then
  if redis.call('HEXISTS', KEYS[1], field) == 0 then return 0 end
  op = 'set'
end
local v = redis.call('INCR', KEYS[2])
if op == 'set' then
  redis.call('HSET', KEYS[1], field, ARGV[4])
  redis.call('PUBLISH', ARGV[2], v .. ' s ' .. string.len(field) .. ':' .. field .. ARGV[4])
else
  redis.call('HDEL', KEYS[1], field)
  redis.call('PUBLISH', ARGV[2], v .. ' d ' .. string.len(field) .. ':' .. field)
end
return v
