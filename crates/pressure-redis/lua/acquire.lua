-- acquire.lua: check and reserve every dimension of one demand, or nothing.
-- One call per acquisition; time is the server's (TIME), in microseconds.
--
-- KEYS[1]  state hash of the resource  (gcra: g<d> = TAT;
--          window: w<d>:s = sum, w<d>:lo = oldest live sub-window, w<d>:<k> = units)
-- KEYS[2]  lease sorted set            (member = lease id, score = expiry)
-- ARGV[1]  number of rate dimensions n
-- ARGV[2 + 5i .. 6 + 5i], for i = 0..n-1:
--          algo (1 = gcra, 0 = window), dim id, units,
--          limit (gcra: tolerance C*T in us; window: N), step (gcra: T in us; window: g in us)
-- ARGV[2 + 5n]  concurrency limit (0 = take no lease)
-- ARGV[3 + 5n]  lease TTL in us
-- ARGV[4 + 5n]  lease member
-- ARGV[5 + 5n]  book within (us; 0 = never book a future slot)
-- Returns {1, now_us, delay_us} when granted, {0, wait_us, dim id} when denied.

local S = 30
local HINT = 100000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local c = 2 + 5 * n
local conc = tonumber(ARGV[c])
local ttl = tonumber(ARGV[c + 1])
local member = ARGV[c + 2]
local book_within = tonumber(ARGV[c + 3])

local function fmt(x) return string.format('%.0f', x) end

local dims = {}
local fields = {}
for i = 0, n - 1 do
  local b = 2 + 5 * i
  local d = {
    gcra = ARGV[b] == '1', id = ARGV[b + 1], units = tonumber(ARGV[b + 2]),
    limit = tonumber(ARGV[b + 3]), step = tonumber(ARGV[b + 4]),
  }
  if d.gcra then
    d.f = 'g' .. d.id
    fields[#fields + 1] = d.f
  else
    d.k = math.floor(now / d.step)
    d.pre = 'w' .. d.id .. ':'
    fields[#fields + 1] = d.pre .. 's'
    fields[#fields + 1] = d.pre .. 'lo'
    fields[#fields + 1] = d.pre .. fmt(d.k)
  end
  dims[#dims + 1] = d
end

local vals = {}
if #fields > 0 then vals = redis.call('HMGET', KEYS[1], unpack(fields)) end

local worst, worst_dim = -1, nil
local dels = {}
local pos = 1
for _, d in ipairs(dims) do
  if d.gcra then
    d.tat = tonumber(vals[pos]) or 0
    pos = pos + 1
    if d.units > 0 then
      local nt = math.max(d.tat, now) + d.units * d.step
      if nt - now > d.limit then
        local w = nt - d.limit - now
        if w > worst then worst, worst_dim = w, d.id end
      end
    end
  else
    d.sum = tonumber(vals[pos]) or 0
    d.lo = tonumber(vals[pos + 1]) or d.k
    d.cur = tonumber(vals[pos + 2]) or 0
    pos = pos + 3
    -- Evict sub-windows older than k - S (live ones span at most S + 1).
    if d.lo < d.k - S then
      local hi = math.min(d.k - S - 1, d.lo + S)
      local old = {}
      for j = d.lo, hi do old[#old + 1] = d.pre .. fmt(j) end
      local ov = redis.call('HMGET', KEYS[1], unpack(old))
      for j = 1, #old do
        local v = tonumber(ov[j])
        if v then d.sum = d.sum - v end
        dels[#dels + 1] = old[j]
      end
      d.lo = d.k - S
      d.dirty = true
    end
    if d.units > 0 and d.sum + d.units > d.limit then
      local w = d.step * (S + 1)
      if d.units <= d.limit then
        local need = d.sum + d.units - d.limit
        local live = {}
        for j = d.lo, d.k do live[#live + 1] = d.pre .. fmt(j) end
        local lv = redis.call('HMGET', KEYS[1], unpack(live))
        local freed = 0
        for j = 1, #live do
          freed = freed + (tonumber(lv[j]) or 0)
          if freed >= need then
            w = math.max((d.lo + j - 1 + S + 1) * d.step - now, 1)
            break
          end
        end
      end
      if w > worst then worst, worst_dim = w, d.id end
    end
  end
end

if conc > 0 then
  local live = redis.call('ZCARD', KEYS[2])
  if live >= conc then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
    live = redis.call('ZCARD', KEYS[2])
  end
  if live >= conc then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    local w = HINT
    if first[2] then w = math.max(1, math.min(tonumber(first[2]) - now, HINT)) end
    if w > worst then worst, worst_dim = w, '5' end
  end
end

local start = now
if worst >= 0 then
  -- Book a future slot: only when every rate dimension is gcra and no lease.
  local bookable = book_within > 0 and conc == 0 and #dims > 0
  for _, d in ipairs(dims) do
    if not d.gcra then bookable = false end
  end
  if bookable then
    for _, d in ipairs(dims) do
      if d.units > 0 then
        start = math.max(start, math.max(d.tat, now) + d.units * d.step - d.limit)
      end
    end
  end
  if not bookable or start - now > book_within then
    if #dels > 0 then
      redis.call('HDEL', KEYS[1], unpack(dels))
      local upd = {}
      for _, d in ipairs(dims) do
        if d.dirty then
          upd[#upd + 1] = d.pre .. 's'; upd[#upd + 1] = fmt(d.sum)
          upd[#upd + 1] = d.pre .. 'lo'; upd[#upd + 1] = fmt(d.lo)
        end
      end
      redis.call('HSET', KEYS[1], unpack(upd))
    end
    return {0, worst, tonumber(worst_dim)}
  end
end

local upd = {}
local keep = 0
for _, d in ipairs(dims) do
  if d.gcra then
    if d.units > 0 then
      local nt = math.max(d.tat, start) + d.units * d.step
      upd[#upd + 1] = d.f; upd[#upd + 1] = fmt(nt)
      keep = math.max(keep, nt - now)
    end
  elseif d.units > 0 or d.dirty then
    upd[#upd + 1] = d.pre .. 's'; upd[#upd + 1] = fmt(d.sum + d.units)
    upd[#upd + 1] = d.pre .. 'lo'; upd[#upd + 1] = fmt(d.lo)
    if d.units > 0 then
      upd[#upd + 1] = d.pre .. fmt(d.k); upd[#upd + 1] = fmt(d.cur + d.units)
    end
    keep = math.max(keep, d.step * (S + 2))
  end
end
if #dels > 0 then redis.call('HDEL', KEYS[1], unpack(dels)) end
if #upd > 0 then
  redis.call('HSET', KEYS[1], unpack(upd))
  redis.call('PEXPIRE', KEYS[1], math.ceil(keep / 1000) + 1000)
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], now + ttl, member)
  redis.call('PEXPIRE', KEYS[2], math.ceil(ttl / 1000) + 1000)
end
return {1, now, start - now}
