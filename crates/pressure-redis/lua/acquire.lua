-- acquire.lua: check and reserve every dimension of one demand, or nothing.
-- The generic form: the backend sends a script generated for the limit's
-- shape (src/shape.rs: the same logic unrolled, same fields and replies) and
-- this one only for shapes past its bound; a unit test checks they agree.
-- One call per acquisition; time is the server's (TIME), in microseconds.
-- All state of a resource is one hash, so a steady acquisition is three
-- server calls: TIME, HMGET, HSET. Written for speed: no table per
-- dimension, field names precomputed by the client.
--
-- KEYS[1]  state hash of the resource:
--          g<d>      gcra TAT of dimension d
--          g<d>t     the emission interval T (us) that TAT was counted with;
--                    when the limit changes, the TAT is rescaled to the new T
--                    keeping the units it holds (absent: the current T)
--          w<d>:s    window sum, w<d>:lo oldest live sub-window, w<d>:<k> units of sub-window k
--          w<d>:t    time (us) of the dimension's last grant that took units, and
--          w<d>:tc   the units of its sub-window kt then (kept by reconcile): every
--                    unit counted was admitted by then, so a sub-window counts
--                    until its end + W but kt until w<d>:t + W, and a denial's
--                    wait is never longer than W. Sub-window kt holding more
--                    than w<d>:tc (or units past kt) means versions before
--                    w<d>:t granted since: kt then counts until its end + W too.
--          c         leases counted (live, or expired and not yet swept)
--          cm        lower bound of the earliest lease expiry
--          l:<id>    expiry of lease <id>
--          d:<id>    tombstone of lease <id>: its client gave the acquisition
--                    up (no reply in time) and released it before it arrived;
--                    an acquisition with that lease id reserves nothing
--          k<d>      units of calendar dimension d counted in period k<d>p
--          k<d>p     that period's index (calendar.lua): a count of another
--                    period is zero (the period ended) and is replaced
--          e         the key's expiry as last set, in us (PEXPIREAT only when it
--                    must move; it is set after the HSET that may create the
--                    key, so a new key always gets one). Versions before it
--                    kept the mark in `x` and could leave a new key without
--                    a TTL; a key without `e` gets its expiry on first touch.
-- ARGV[1]  number of rate dimensions n
-- ARGV[2 + 9i .. 10 + 9i], for i = 0..n-1:
--          algo (1 = gcra, 0 = window), dim id, units,
--          limit (gcra: tolerance C*T in us; window: N),
--          step (gcra: T in us; window: g in us),
--          window W in us (gcra: unused),
--          fields (gcra: "g<d>", "g<d>t", "-"; window: "w<d>:", "w<d>:s", "w<d>:lo")
-- ARGV[2 + 9n]  concurrency limit (0 = take no lease)
-- ARGV[3 + 9n]  lease TTL in us
-- ARGV[4 + 9n]  lease id
-- ARGV[5 + 9n]  book within (us; 0 = never book a future slot)
-- ARGV[6 + 9n]  number of calendar dimensions m (absent: 0)
-- ARGV[7 + 9n]  offset (us) added to TIME for the calendar's wall time (0 in
--               production: the server's clock; tests move it)
-- ARGV[8 + 9n + 4j .. 11 + 9n + 4j], for j = 0..m-1: kind (1 = UTC day,
--               2 = UTC month), dim id, units, limit (scaled by the ceiling)
-- Returns {1, now_us, delay_us} when granted, {0, wait_us, dim id} when denied,
-- {2, 0, 0} when the lease id has a tombstone (nothing reserved).

local S = 30
local HINT = 100000
local SLACK = 10000000
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local key = KEYS[1]
local n = tonumber(ARGV[1])
local c0 = 2 + 9 * n
local conc = tonumber(ARGV[c0])

-- Per dimension i, slots of D at o = 14 * (i - 1):
-- o+1 gcra?, o+2 units, o+3 limit, o+4 step, o+5 field/prefix, o+6 k
-- (gcra: the T field), o+7 tat (gcra) or sum (window), o+8 lo (gcra: T
-- must be written), o+9 units of sub-window k, o+10 dirty, o+11 sum field,
-- o+12 lo field, o+13 W, o+14 last grant time (nil: unknown), o+15 units
-- of its sub-window then; the field of sub-window k is at F[i].
local D, F = {}, {}
local fields = {'e', 'c', 'cm', '-'}
if conc > 0 then fields[4] = 'd:' .. ARGV[c0 + 2] end
local nf = 4
local all_gcra = n > 0
for i = 1, n do
  local b, o = 9 * i - 7, 15 * i - 15
  local g = ARGV[b] == '1'
  local f, step = ARGV[b + 6], tonumber(ARGV[b + 4])
  D[o + 1], D[o + 2], D[o + 3], D[o + 4], D[o + 5] = g, tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), step, f
  if g then
    local ft = ARGV[b + 7]
    D[o + 6] = ft
    fields[nf + 1] = f; fields[nf + 2] = ft
    nf = nf + 2
  else
    all_gcra = false
    local k = math.floor(now / step)
    local fs, fl, fk = ARGV[b + 7], ARGV[b + 8], f .. k
    D[o + 6], D[o + 11], D[o + 12], D[o + 13], F[i] = k, fs, fl, tonumber(ARGV[b + 5]), fk
    fields[nf + 1] = fs; fields[nf + 2] = fl; fields[nf + 3] = fk
    fields[nf + 4] = f .. 't'; fields[nf + 5] = f .. 'tc'
    nf = nf + 5
  end
end

local v = redis.call('HMGET', key, unpack(fields))
local x = tonumber(v[1]) or 0
local count = tonumber(v[2]) or 0
local cmin = tonumber(v[3])
if conc > 0 and v[4] then
  -- Given up by its client before it got here: reserve nothing.
  redis.call('HDEL', key, fields[4])
  return {2, 0, 0}
end

local worst, worst_dim = -1, 0
local dels, nd = nil, 0
local pos = 5
for i = 1, n do
  local o = 15 * i - 15
  local u, limit, step = D[o + 2], D[o + 3], D[o + 4]
  if D[o + 1] then
    local tat, tstep = tonumber(v[pos]) or 0, tonumber(v[pos + 1])
    pos = pos + 2
    if tstep ~= nil and tstep ~= step and tat > now then
      -- Counted with another T (the limit changed): keep the units held.
      tat = now + math.ceil((tat - now) / tstep) * step
    end
    D[o + 7], D[o + 8] = tat, tstep ~= step
    if u > 0 then
      local base = tat > now and tat or now
      local w = base + u * step - limit - now
      if w > 0 and w > worst then worst, worst_dim = w, i end
    end
  else
    local k, W, pre = D[o + 6], D[o + 13], D[o + 5]
    local s, l = tonumber(v[pos]) or 0, tonumber(v[pos + 1]) or k
    local tl, tc = tonumber(v[pos + 3]), tonumber(v[pos + 4]) or 0
    D[o + 9], D[o + 14], D[o + 15] = tonumber(v[pos + 2]) or 0, tl, tc
    pos = pos + 5
    -- Evict the sub-windows whose end + W has passed (live ones span at
    -- most S + 1), and the last grant's own once it is W old.
    local lo = math.floor((now - W) / step)
    if tl ~= nil and now >= tl + W then
      local kt = math.floor(tl / step)
      if kt == lo and kt >= l and (tonumber(redis.call('HGET', key, pre .. kt)) or 0) <= tc then lo = kt + 1 end
    end
    if l < lo then
      local old = {}
      for j = l, math.min(lo - 1, l + S) do old[#old + 1] = pre .. j end
      local ov = redis.call('HMGET', key, unpack(old))
      dels = dels or {}
      for j = 1, #old do
        s = s - (tonumber(ov[j]) or 0)
        nd = nd + 1; dels[nd] = old[j]
      end
      l = lo
      D[o + 10] = true
    end
    D[o + 7], D[o + 8] = s, l
    if u > 0 and s + u > limit then
      local w = W
      if u <= limit then
        local need, live = s + u - limit, {}
        for j = l, k do live[#live + 1] = pre .. j end
        local lv = redis.call('HMGET', key, unpack(live))
        local freed = 0
        for j = 1, #live do
          freed = freed + (tonumber(lv[j]) or 0)
          if freed >= need then
            -- Sub-window l + j - 1 leaves at its end + W, the last grant's
            -- own at w<d>:t + W (see the eviction).
            local gone = (l + j) * step
            if tl ~= nil and l + j - 1 == math.floor(tl / step) and (tonumber(lv[j]) or 0) <= tc then gone = tl end
            w = math.min(math.max(gone + W - now, 1), W)
            break
          end
        end
      end
      if w > worst then worst, worst_dim = w, i end
    end
  end
end

local swept = false
if conc > 0 and count >= conc then
  if cmin ~= nil and now >= cmin then
    -- Sweep expired leases; recount and find the exact earliest expiry.
    local h = redis.call('HGETALL', key)
    local dead, live, first = {}, 0, nil
    for j = 1, #h, 2 do
      local f = h[j]
      local p = string.sub(f, 1, 2)
      if p == 'l:' then
        local e = tonumber(h[j + 1])
        if e <= now then
          dead[#dead + 1] = f
        else
          live = live + 1
          if first == nil or e < first then first = e end
        end
      elseif p == 'd:' and tonumber(h[j + 1]) <= now then
        dead[#dead + 1] = f
      end
    end
    if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end
    count, cmin, swept = live, first, true
  end
  if count >= conc then
    local w = HINT
    if cmin ~= nil then w = math.max(1, math.min(cmin - now, HINT)) end
    if w > worst then worst, worst_dim = w, -1 end
  end
end

-- Calendar dimensions: a count per fixed UTC period (calendar.lua); a
-- denial waits until the period ends.
local m = tonumber(ARGV[c0 + 4]) or 0
local KU, KC, KP, KE, wcal = {}, {}, {}, {}, nil
if m > 0 then
  local wall = now + tonumber(ARGV[c0 + 5])
  local kf = {}
  for j = 1, m do
    local id = ARGV[c0 + 3 + 4 * j]
    kf[2 * j - 1] = 'k' .. id; kf[2 * j] = 'k' .. id .. 'p'
  end
  local kv = redis.call('HMGET', key, unpack(kf))
  for j = 1, m do
    local b = c0 + 2 + 4 * j
    local u, lim = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
    local p, pend = cal_period(tonumber(ARGV[b]), wall)
    local used = 0
    if tonumber(kv[2 * j]) == p then used = tonumber(kv[2 * j - 1]) or 0 end
    KU[j], KC[j], KP[j], KE[j] = u, used, p, pend - wall
    if u > 0 and used + u > lim then
      local w = math.max(pend - wall, 1)
      if w > worst then worst, worst_dim, wcal = w, 0, tonumber(ARGV[b + 1]) end
    end
  end
end

local upd, nu = {}, 0
local start = now
if worst >= 0 then
  -- Book a future slot: only when every rate dimension is gcra, no lease
  -- and no calendar dimension.
  local book_within = tonumber(ARGV[c0 + 3])
  local bookable = all_gcra and book_within > 0 and conc == 0 and m == 0
  if bookable then
    for i = 1, n do
      local o = 15 * i - 15
      if D[o + 2] > 0 then
        local tat = D[o + 7]
        local base = tat > now and tat or now
        start = math.max(start, base + D[o + 2] * D[o + 4] - D[o + 3])
      end
    end
  end
  if not bookable or start - now > book_within then
    -- Denied: keep only the housekeeping (evictions, sweep).
    for i = 1, n do
      local o = 15 * i - 15
      if D[o + 10] then
        upd[nu + 1] = D[o + 11]; upd[nu + 2] = D[o + 7]
        upd[nu + 3] = D[o + 12]; upd[nu + 4] = D[o + 8]
        nu = nu + 4
      end
    end
    if swept then
      upd[nu + 1] = 'c'; upd[nu + 2] = count; nu = nu + 2
      if cmin ~= nil then upd[nu + 1] = 'cm'; upd[nu + 2] = cmin; nu = nu + 2 end
    end
    if nd > 0 then redis.call('HDEL', key, unpack(dels)) end
    if nu > 0 then redis.call('HSET', key, unpack(upd)) end
    local dim = 5
    if worst_dim > 0 then dim = tonumber(ARGV[9 * worst_dim - 6]) end
    if wcal ~= nil and worst_dim == 0 then dim = wcal end
    return {0, worst, dim}
  end
end

local keep = 0
for i = 1, n do
  local o = 15 * i - 15
  local u = D[o + 2]
  if D[o + 1] then
    if u > 0 then
      local tat = D[o + 7]
      local nt = (tat > start and tat or start) + u * D[o + 4]
      upd[nu + 1] = D[o + 5]; upd[nu + 2] = nt; nu = nu + 2
      if D[o + 8] then upd[nu + 1] = D[o + 6]; upd[nu + 2] = D[o + 4]; nu = nu + 2 end
      if nt - now > keep then keep = nt - now end
    end
  elseif u > 0 or D[o + 10] then
    upd[nu + 1] = D[o + 11]; upd[nu + 2] = D[o + 7] + u
    upd[nu + 3] = D[o + 12]; upd[nu + 4] = D[o + 8]
    nu = nu + 4
    if u > 0 then
      upd[nu + 1] = F[i]; upd[nu + 2] = D[o + 9] + u
      upd[nu + 3] = D[o + 5] .. 't'; upd[nu + 4] = now
      upd[nu + 5] = D[o + 5] .. 'tc'; upd[nu + 6] = D[o + 9] + u
      nu = nu + 6
    end
    local kw = D[o + 4] * (S + 2)
    if kw > keep then keep = kw end
  end
end
for j = 1, m do
  if KU[j] > 0 then
    local id = ARGV[c0 + 3 + 4 * j]
    upd[nu + 1] = 'k' .. id; upd[nu + 2] = KC[j] + KU[j]
    upd[nu + 3] = 'k' .. id .. 'p'; upd[nu + 4] = KP[j]
    nu = nu + 4
    -- The count matters until its period ends, and not after.
    if KE[j] > keep then keep = KE[j] end
  end
end
if conc > 0 then
  local ttl = tonumber(ARGV[c0 + 1])
  local exp = now + ttl
  upd[nu + 1] = 'c'; upd[nu + 2] = count + 1
  upd[nu + 3] = 'l:' .. ARGV[c0 + 2]; upd[nu + 4] = exp
  nu = nu + 4
  if cmin == nil or exp < cmin then
    upd[nu + 1] = 'cm'; upd[nu + 2] = exp; nu = nu + 2
  elseif swept then
    upd[nu + 1] = 'cm'; upd[nu + 2] = cmin; nu = nu + 2
  end
  if ttl > keep then keep = ttl end
elseif swept then
  upd[nu + 1] = 'c'; upd[nu + 2] = count; nu = nu + 2
  if cmin ~= nil then upd[nu + 1] = 'cm'; upd[nu + 2] = cmin; nu = nu + 2 end
end
-- The key outlives everything it holds; move its expiry only when needed,
-- and after the HSET (PEXPIREAT on a key that does not exist yet is a no-op).
local expire = keep > 0 and now + keep > x
if expire then
  x = now + keep + math.min(SLACK, keep)
  upd[nu + 1] = 'e'; upd[nu + 2] = x; nu = nu + 2
end
if nd > 0 then redis.call('HDEL', key, unpack(dels)) end
if nu > 0 then redis.call('HSET', key, unpack(upd)) end
if expire then redis.call('PEXPIREAT', key, math.ceil(x / 1000)) end
return {1, now, start - now}
