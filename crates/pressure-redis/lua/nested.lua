-- nested.lua: one reservation on every level of a nest, all or nothing
-- (src/backend/nested.rs). src/scripts.rs prepends calendar.lua and
-- acquire.lua wrapped as the function acquire_(KEYS, ARGV): each level is
-- checked and counted by the acquire logic itself, exactly as a single
-- acquisition of that level would be. Before a level is charged its hash
-- is read whole (HGETALL) with its time to live (PTTL); when a later level
-- refuses, every level charged so far is put back exactly as it was, the
-- last first (a script runs atomically: nobody sees the partial charge).
-- The refusing level keeps only its own housekeeping (evictions, swept
-- leases), as a single refusal does. All keys must be in one hash slot on
-- Redis Cluster (register the levels in one group).
--
-- KEYS[i]  state hash of level i, innermost first (acquire.lua)
-- ARGV[1]  number of levels L (= #KEYS)
-- then per level i: a_i, the number of its acquire.lua arguments, and
--          those arguments (its book-within is 0: a nest books no future
--          slot)
-- Returns {1, now_1, delay_1, ..., now_L, delay_L} when every level
-- granted; {0, i, wait_us, dim id} when level i (1-based) refused;
-- {2, i, 0, 0} when level i's lease id has a tombstone (its client gave
-- the acquisition up). Nothing is held on any level unless the first.

local L = tonumber(ARGV[1])
local saved = {}
local out = {1}
local pos = 2

-- Puts `key` back as `snap` ({HGETALL reply, PTTL reply}) held: fields
-- and values byte for byte, and its expiry.
local function restore(key, snap)
  redis.call('DEL', key)
  local h = snap[1]
  -- In chunks, so a hash with many leases stays within unpack's bound.
  for j = 1, #h, 1000 do
    redis.call('HSET', key, unpack(h, j, math.min(j + 999, #h)))
  end
  if #h > 0 and snap[2] > 0 then redis.call('PEXPIRE', key, snap[2]) end
end

for i = 1, L do
  local a = tonumber(ARGV[pos])
  local args = {}
  for j = 1, a do args[j] = ARGV[pos + j] end
  pos = pos + a + 1
  local key = KEYS[i]
  local snap = {redis.call('HGETALL', key), redis.call('PTTL', key)}
  local r = acquire_({key}, args)
  if r[1] ~= 1 then
    for k = i - 1, 1, -1 do restore(KEYS[k], saved[k]) end
    if r[1] == 2 then return {2, i, 0, 0} end
    return {0, i, r[2], r[3]}
  end
  saved[i] = snap
  out[2 * i] = r[2]
  out[2 * i + 1] = r[3]
end
return out
