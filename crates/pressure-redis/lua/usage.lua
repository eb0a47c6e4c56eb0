-- usage.lua: units counted now per dimension, and live leases.
--
-- KEYS[1]  state hash (see acquire.lua)
-- ARGV[1]  number of rate dimensions n
-- ARGV[2 + 4i .. 5 + 4i], for i = 0..n-1: algo (1 = gcra, 0 = window), dim id,
--          step (gcra: T in us; window: g in us), window W in us (gcra: unused)
-- ARGV[2 + 4n]  number of calendar dimensions m (absent: 0)
-- ARGV[3 + 4n]  offset (us) added to server time for the calendar's wall time
-- ARGV[4 + 4n + 2j .. 5 + 4n + 2j], for j = 0..m-1: kind (1 = day, 2 = month), dim id
-- Returns {used_0, ..., used_{n-1}, cal_used_0, cal_reset_ms_0, ...,
-- cal_used_{m-1}, cal_reset_ms_{m-1}, live_leases}: a calendar count of
-- the current period and the wall time (Unix ms) at which it resets.

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local n = tonumber(ARGV[1])
local out = {}
for i = 0, n - 1 do
  local b = 2 + 4 * i
  local gcra, id, step, W = ARGV[b] == '1', ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  if gcra then
    local v = redis.call('HMGET', KEYS[1], 'g' .. id, 'g' .. id .. 't')
    local tat = tonumber(v[1]) or 0
    -- A TAT counted with another T (the limit changed) holds its units in that T.
    local tstep = tonumber(v[2]) or step
    out[#out + 1] = math.max(0, math.ceil((tat - now) / tstep))
  else
    -- As acquire.lua counts: the sub-windows whose end + W is ahead, but
    -- not the last grant's (w<d>:t) once it is W old and holds no more
    -- than it did then (w<d>:tc); and up to a window ahead, the batches of
    -- quota leases dated at their lease's end (lease.lua; a lease longer
    -- than that is counted by acquire.lua but not shown here).
    local k, lo = math.floor(now / step), math.floor((now - W) / step)
    local ahead = k + math.ceil(W / step) + 2
    local f = {'w' .. id .. ':t', 'w' .. id .. ':tc'}
    for j = lo, ahead do f[#f + 1] = 'w' .. id .. ':' .. j end
    local v = redis.call('HMGET', KEYS[1], unpack(f))
    local last, tc, sum = tonumber(v[1]), tonumber(v[2]) or 0, 0
    local kt = last ~= nil and now >= last + W and math.floor(last / step)
    for j = lo, ahead do
      local c = tonumber(v[j - lo + 3]) or 0
      if j ~= kt or c > tc then sum = sum + c end
    end
    out[#out + 1] = sum
  end
end
local m = tonumber(ARGV[2 + 4 * n]) or 0
if m > 0 then
  local wall = now + tonumber(ARGV[3 + 4 * n])
  for j = 0, m - 1 do
    local b = 4 + 4 * n + 2 * j
    local id = ARGV[b + 1]
    local p, pend = cal_period(tonumber(ARGV[b]), wall)
    local v = redis.call('HMGET', KEYS[1], 'k' .. id, 'k' .. id .. 'p')
    local used = 0
    if tonumber(v[2]) == p then used = tonumber(v[1]) or 0 end
    out[#out + 1] = used
    out[#out + 1] = math.floor(pend / 1000)
  end
end
local live = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'l:' and tonumber(all[i + 1]) > now then live = live + 1 end
end
out[#out + 1] = live
return out
