-- release.lua: give a lease back, once.
--
-- KEYS[1]  state hash of the resource (see acquire.lua)
-- ARGV[1]  lease id
-- Returns 1 when the lease was live, 0 when it was already gone.

if redis.call('HDEL', KEYS[1], 'l:' .. ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'c', -1)
  return 1
end
return 0
