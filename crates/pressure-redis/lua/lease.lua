-- lease.lua: quota leasing (src/lease/). In one call, give back the unused
-- units of an instance's previous lease and take a batch of units for it
-- to decide from in memory. src/scripts.rs prepends calendar.lua and
-- acquire.lua and reconcile.lua wrapped as the functions acquire_(ARGV)
-- and reconcile_(ARGV): the batch is checked and counted by the acquire
-- logic itself, exactly as if that many requests had been admitted now,
-- and the units given back are corrected by the reconcile logic.
--
-- A leased unit may be used until the lease's end, not only now, so the
-- batch is then dated at the end: a window dimension moves it to the
-- sub-window after the one holding now + ttl (it counts until that
-- sub-window's end + W, past every use + W), a gcra TAT becomes at least
-- now + ttl + units * T (as if every unit were emitted at the lease's
-- end). Both only make later checks stricter; the price is under-use.
--
-- KEYS[1]  state hash of the resource (acquire.lua), with the lease fields
--          q        units held by the outstanding leases of all instances
--          qm       lower bound of the earliest outstanding lease expiry
--          q:<id>   "<expiry us> <units>" of outstanding lease <id>
-- ARGV[1]  a: number of acquire arguments that follow
-- ARGV[2 .. 1 + a]  acquire.lua's ARGV for ONE request: per rate dimension
--          its units per request; no concurrency lease, no calendar
-- then at b = 2 + a:
-- ARGV[b]      want: units to take, the current decision's included
--              (0: only give back)
-- ARGV[b + 1]  cap: units all outstanding leases may hold (maxShare x N)
-- ARGV[b + 2]  ttl in us
-- ARGV[b + 3]  id of the new lease
-- ARGV[b + 4]  id of the lease to end ('-': none)
-- ARGV[b + 5]  its unused units
-- ARGV[b + 6]  its dating time (us), as returned when it was taken
-- Returns {1, now, units, dated} when granted (units - 1 held by the new
-- lease, none when units = 1), {0, wait, dim} when denied (nothing taken),
-- {3, 0, 0} when it only gave back.

local key = KEYS[1]
local a = tonumber(ARGV[1])
local A = {}
for i = 1, a do A[i] = ARGV[i + 1] end
local b = 2 + a
local want, cap, ttl = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
local id, old = ARGV[b + 3], ARGV[b + 4]
local n = tonumber(A[1])
local SLACK = 10000000

-- Per rate dimension i: its fields start at A[9i - 7] (acquire.lua).
local function per(i) return tonumber(A[9 * i - 5]) end

local now
do
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

local q = tonumber(redis.call('HGET', key, 'q')) or 0

-- End the previous lease: its record leaves the budget, its unused units
-- leave the counts they were dated in.
if old ~= '-' then
  local unused, dated = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  local rec = redis.call('HGET', key, 'q:' .. old)
  if rec then
    q = math.max(q - (tonumber(string.match(rec, ' (%d+)$')) or 0), 0)
    redis.call('HDEL', key, 'q:' .. old)
    redis.call('HSET', key, 'q', q)
  end
  if unused > 0 then
    for i = 1, n do
      local o = 9 * i - 7
      if per(i) > 0 then
        local step = tonumber(A[o + 4])
        local at = dated
        if A[o] ~= '1' then at = (math.floor(dated / step) + 1) * step end
        reconcile_({'1', at, A[o], A[o + 1], -unused * per(i), A[o + 4], A[o + 5], '0'})
      end
    end
  end
end
if want == 0 then return {3, 0, 0} end

-- Sweep the leases of dead instances (expired records) out of the budget.
local qm = tonumber(redis.call('HGET', key, 'qm'))
if qm ~= nil and now >= qm then
  local h = redis.call('HGETALL', key)
  local dead, live, first = {}, 0, nil
  for j = 1, #h, 2 do
    if string.sub(h[j], 1, 2) == 'q:' then
      local e, u = string.match(h[j + 1], '^(%d+) (%d+)$')
      e, u = tonumber(e) or 0, tonumber(u) or 0
      if e <= now then
        dead[#dead + 1] = h[j]
      else
        live = live + u
        if first == nil or e < first then first = e end
      end
    end
  end
  if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end
  q, qm = live, first
  redis.call('HSET', key, 'q', q)
  if qm == nil then redis.call('HDEL', key, 'qm') else redis.call('HSET', key, 'qm', qm) end
end

-- The batch: the current decision's unit plus what the budget has left.
local function acquire_n(units)
  local args = {}
  for i = 1, a do args[i] = A[i] end
  for i = 1, n do args[9 * i - 5] = tostring(units * per(i)) end
  return acquire_(args)
end
local units = 1 + math.max(math.min(want - 1, cap - q), 0)
local r
if units > 1 then
  r = acquire_n(units)
  if r[1] ~= 1 then units = 1 end
end
if units == 1 then
  r = acquire_n(1)
  return {r[1], r[2], r[1] == 1 and 1 or r[3], 0}
end

-- Date the batch at the lease's end (see the header).
local at = r[2]
local dated = at + ttl
local keep = ttl
for i = 1, n do
  local o = 9 * i - 7
  local u = units * per(i)
  if u > 0 then
    local did, step = A[o + 1], tonumber(A[o + 4])
    if A[o] == '1' then
      local f = 'g' .. did
      local tat = tonumber(redis.call('HGET', key, f)) or at
      local nt = dated + u * step
      if nt > tat then
        redis.call('HSET', key, f, nt)
        tat = nt
      end
      if tat - at > keep then keep = tat - at end
    else
      local pre = 'w' .. did .. ':'
      local k = math.floor(at / step)
      local kd = math.floor(dated / step) + 1
      local v = redis.call('HMGET', key, pre .. k, pre .. kd, pre .. 'tc')
      redis.call('HSET', key, pre .. k, math.max((tonumber(v[1]) or 0) - u, 0),
        pre .. kd, (tonumber(v[2]) or 0) + u, pre .. 'tc', math.max((tonumber(v[3]) or 0) - u, 0))
      local kw = (kd + 1) * step + tonumber(A[o + 5]) - at
      if kw > keep then keep = kw end
    end
  end
end

-- The lease's record, for the budget and for a dead holder's expiry.
local exp = at + ttl
q = q + units - 1
redis.call('HSET', key, 'q:' .. id, string.format('%.0f %.0f', exp, units - 1), 'q', q)
if qm == nil or exp < qm then redis.call('HSET', key, 'qm', exp) end

-- The key outlives the dated units and the record (acquire.lua's `e`).
local x = tonumber(redis.call('HGET', key, 'e')) or 0
if at + keep > x then
  x = at + keep + math.min(SLACK, keep)
  redis.call('HSET', key, 'e', x)
  redis.call('PEXPIREAT', key, math.ceil(x / 1000))
end
return {1, at, units, dated}
