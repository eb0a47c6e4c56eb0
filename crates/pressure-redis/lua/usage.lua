-- usage.lua: units counted now per dimension, and live leases.
--
-- KEYS[1]  state hash (see acquire.lua)
-- ARGV[1]  number of rate dimensions n
-- ARGV[2 + 4i .. 5 + 4i], for i = 0..n-1: algo (1 = gcra, 0 = window), dim id,
--          step (gcra: T in us; window: g in us), window W in us (gcra: unused)
-- Returns {used_0, ..., used_{n-1}, live_leases}.

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
    -- than it did then (w<d>:tc).
    local k, lo = math.floor(now / step), math.floor((now - W) / step)
    local f = {'w' .. id .. ':t', 'w' .. id .. ':tc'}
    for j = lo, k do f[#f + 1] = 'w' .. id .. ':' .. j end
    local v = redis.call('HMGET', KEYS[1], unpack(f))
    local last, tc, sum = tonumber(v[1]), tonumber(v[2]) or 0, 0
    local kt = last ~= nil and now >= last + W and math.floor(last / step)
    for j = lo, k do
      local c = tonumber(v[j - lo + 3]) or 0
      if j ~= kt or c > tc then sum = sum + c end
    end
    out[#out + 1] = sum
  end
end
local live = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'l:' and tonumber(all[i + 1]) > now then live = live + 1 end
end
out[#out + 1] = live
return out
