-- outlive.lua: writes to a resource's state hash that keep the key alive
-- as long as what they write, prepended to the lease scripts (release,
-- renew; see src/scripts.rs). The key's expiry (field e, wall time in us;
-- see acquire.lua's `e`) moves only when the written fields outlast it, and
-- after the HSET (PEXPIREAT on a key that does not exist yet is a no-op).
--
-- hset_outliving(key, upd, x, keep_until, ttl): HSET of the field/value
--   list upd on key, where x is the key's current e (0 when none) and the
--   written fields live until keep_until (us) for ttl (us); a moved expiry
--   gets a slack of min(10 s, ttl).
local function hset_outliving(key, upd, x, keep_until, ttl)
  local expire = keep_until > x
  if expire then
    x = keep_until + math.min(10000000, ttl)
    upd[#upd + 1] = 'e'; upd[#upd + 1] = x
  end
  redis.call('HSET', key, unpack(upd))
  if expire then redis.call('PEXPIREAT', key, math.ceil(x / 1000)) end
end
