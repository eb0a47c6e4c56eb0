-- reconcile.lua: correct the units a grant reserved by a delta per dimension.
--
-- KEYS[1]  state hash of the resource (see acquire.lua)
-- ARGV[1]  number of dimensions n
-- ARGV[2]  the grant's server time in us
-- ARGV[3 + 4i .. 6 + 4i], for i = 0..n-1: algo (1 = gcra, 0 = window), dim id,
--          delta units (may be negative), step (gcra: T in us; window: g in us)
-- Returns 1.

local S = 30
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local at = tonumber(ARGV[2])
local function fmt(x) return string.format('%.0f', x) end

for i = 0, n - 1 do
  local b = 3 + 4 * i
  local gcra, id, delta, step = ARGV[b] == '1', ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  if delta ~= 0 then
    if gcra then
      local tat = tonumber(redis.call('HGET', KEYS[1], 'g' .. id))
      if tat then
        redis.call('HSET', KEYS[1], 'g' .. id, fmt(math.max(tat + delta * step, 0)))
      elseif delta > 0 then
        redis.call('HSET', KEYS[1], 'g' .. id, fmt(now + delta * step))
      end
    else
      local pre = 'w' .. id .. ':'
      local k_at = math.floor(at / step)
      local k = math.floor(now / step)
      local v = redis.call('HMGET', KEYS[1], pre .. 's', pre .. 'lo', pre .. fmt(k_at))
      local sum, lo, cur = tonumber(v[1]) or 0, tonumber(v[2]), tonumber(v[3])
      if k_at + S >= k and (lo == nil or k_at >= lo) then
        local next_cur = (cur or 0) + delta
        if next_cur < 0 then next_cur = 0 end
        local applied = next_cur - (cur or 0)
        if cur ~= nil or applied > 0 then
          redis.call('HSET', KEYS[1], pre .. fmt(k_at), fmt(next_cur), pre .. 's', fmt(math.max(sum + applied, 0)),
            pre .. 'lo', fmt(lo or k_at))
          if redis.call('PTTL', KEYS[1]) < 0 then
            redis.call('PEXPIRE', KEYS[1], math.ceil(step * (S + 2) / 1000) + 1000)
          end
        end
      end
    end
  end
end
return 1
