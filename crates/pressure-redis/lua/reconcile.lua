-- reconcile.lua: correct the units a grant reserved by a delta per dimension.
--
-- KEYS[1]  state hash of the resource (see acquire.lua)
-- ARGV[1]  number of dimensions n
-- ARGV[2]  the grant's server time in us
-- ARGV[3 + 5i .. 7 + 5i], for i = 0..n-1: algo (1 = gcra, 0 = window,
--          2 = calendar day, 3 = calendar month), dim id,
--          delta units (may be negative), step (gcra: T in us; window: g in us),
--          window W in us (gcra, calendar: unused)
-- ARGV[3 + 5n]  offset (us) added to server time for the calendar's wall time
--          (see acquire.lua; absent: 0)
-- A calendar count is corrected only while it still counts the grant's
-- period: a grant of an ended period never touches the next one's count.
-- Returns 1.

local S = 30
local SLACK = 10000000
local keep = 0
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local n = tonumber(ARGV[1])
local at = tonumber(ARGV[2])
local key = KEYS[1]
local off = tonumber(ARGV[3 + 5 * n]) or 0

for i = 0, n - 1 do
  local b = 3 + 5 * i
  local gcra, id, delta, step = ARGV[b] == '1', ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local W = tonumber(ARGV[b + 4])
  local kind = tonumber(ARGV[b])
  if delta ~= 0 then
    if kind >= 2 then
      local p = cal_period(kind - 1, at + off)
      local v = redis.call('HMGET', key, 'k' .. id, 'k' .. id .. 'p')
      -- The key holds the count until its period ends (acquire.lua).
      if tonumber(v[2]) == p then
        redis.call('HSET', key, 'k' .. id, math.max((tonumber(v[1]) or 0) + delta, 0))
      end
    elseif gcra then
      local v = redis.call('HMGET', key, 'g' .. id, 'g' .. id .. 't')
      local tat, tstep = tonumber(v[1]), tonumber(v[2])
      if tat and tstep ~= nil and tstep ~= step and tat > now then
        -- Counted with another T (the limit changed): keep the units held.
        tat = now + math.ceil((tat - now) / tstep) * step
      end
      local nt = nil
      if tat then
        nt = math.max(tat + delta * step, 0)
      elseif delta > 0 then
        nt = now + delta * step
      end
      if nt then
        redis.call('HSET', key, 'g' .. id, nt, 'g' .. id .. 't', step)
        -- The key must outlive the corrected bucket.
        if nt - now > keep then keep = nt - now end
      end
    else
      local pre = 'w' .. id .. ':'
      local k_at = math.floor(at / step)
      local v = redis.call('HMGET', key, pre .. 's', pre .. 'lo', pre .. k_at, pre .. 't', pre .. 'tc')
      local sum, lo, cur = tonumber(v[1]) or 0, tonumber(v[2]), tonumber(v[3])
      local last, tc = tonumber(v[4]), tonumber(v[5]) or 0
      -- Units admitted at `at` count until at + W (acquire.lua: the last
      -- grant's time w<d>:t is at or after `at`, so it keeps them as long).
      if now < at + W and (lo == nil or k_at >= lo) then
        local next_cur = math.max((cur or 0) + delta, 0)
        local applied = next_cur - (cur or 0)
        if cur ~= nil or applied > 0 then
          redis.call('HSET', key, pre .. k_at, next_cur, pre .. 's', math.max(sum + applied, 0), pre .. 'lo', lo or k_at)
          -- The last grant's sub-window: w<d>:tc follows what this version
          -- changes in it (acquire.lua).
          if last ~= nil and math.floor(last / step) == k_at then
            redis.call('HSET', key, pre .. 'tc', math.max(tc + applied, 0))
          end
          local kw = (k_at + S + 2) * step - now
          if kw > keep then keep = kw end
        end
      end
    end
  end
end
-- The key outlives what was written (see acquire.lua's `e`): usually the
-- acquisition already moved the expiry past it, but a correction may outlast
-- it (a gcra TAT pushed forward) or write a key that is gone.
if keep > 0 then
  local x = tonumber(redis.call('HGET', key, 'e')) or 0
  if now + keep > x then
    x = now + keep + math.min(SLACK, keep)
    redis.call('HSET', key, 'e', x)
    redis.call('PEXPIREAT', key, math.ceil(x / 1000))
  end
end
return 1
