-- gc.lua: give one key without an expiry the expiry it was meant to have
-- (`pressure redis gc`, src/gc.rs). Versions of the scripts before the `e`
-- mark could create a resource's state hash with no TTL (PEXPIREAT ran
-- before the HSET that created the key); such keys live forever.
--
-- One key per call, atomic: safe while the gateway writes the same key, and
-- cluster-safe (the key is KEYS[1], so the call runs on its slot's master).
--
-- KEYS[1]  a key under the prefix, as SCAN returned it
-- ARGV[1]  "1": dry run (answer what would be done, write nothing); "0": do it
-- ARGV[2]  TTL in ms for a hash without a mark
-- Returns
--   0  untouched: the key has a TTL already, or is gone
--   1  expiry set: PEXPIREAT at its mark (the later of the fields `e` and `x`,
--      server time in us) when that is still ahead, else PEXPIRE ARGV[2] when
--      it has no mark (the shared breaker hashes, anything else of ours)
--   2  deleted: its mark is past, so nothing in it matters any more
--   3  skipped: not a hash (the manual queue's stream persists by design;
--      other types are not ours to judge)

local key = KEYS[1]
local dry = ARGV[1] == '1'
if redis.call('PTTL', key) ~= -1 then return 0 end
if redis.call('TYPE', key).ok ~= 'hash' then return 3 end

local v = redis.call('HMGET', key, 'e', 'x')
local e, x = tonumber(v[1]), tonumber(v[2])
local mark = e
if x ~= nil and (mark == nil or x > mark) then mark = x end

if mark == nil then
  if not dry then redis.call('PEXPIRE', key, ARGV[2]) end
  return 1
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if mark <= now then
  if not dry then redis.call('UNLINK', key) end
  return 2
end
if not dry then redis.call('PEXPIREAT', key, math.ceil(mark / 1000)) end
return 1
