-- breaker.lua: the shared state of one circuit breaker (pressure_core
-- shared_breaker, docs/architecture.md#what-openai-and-anthropic-clients-expect), one atomic call per operation. Time is the
-- server's (TIME), in milliseconds, so instances need no synchronised clocks.
--
-- KEYS[1]  state hash:
--          st  0 closed, 1 open (open past `un` = half-open)
--          ep  epoch, bumped on every transition
--          un  open till (ms); once half-open, when the epoch's probing began
--          pg  probes granted in this epoch, ps  probe successes reported
-- KEYS[2]  window hash (closed only): <bucket>:c calls, <bucket>:f failures,
--          <bucket>:s slow calls, bucket = floor(now / bucket_ms)
-- ARGV[1]  op: read | record | open | probe | report
-- ARGV[2..8]  rules: window_ms, bucket_ms, minimum_calls,
--             failure_rate_threshold, slow_call_rate_threshold (1 = off),
--             open_wait_ms, half_open_probes
-- ARGV[9]  pub/sub channel for transitions ("<name> <state> <epoch>")
-- ARGV[10] breaker name
-- record: ARGV[11..13] calls, failures, slow calls
-- open:   ARGV[11] epoch seen by the caller, ARGV[12] open for (ms)
-- report: ARGV[11] epoch of the probe, ARGV[12] s (success) | f (failure) | r (released)
-- Returns {state (0 closed, 1 open, 2 half-open), epoch, retry_in_ms,
--          probes_granted, granted (1 when a probe slot was granted)}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]
local window_ms = tonumber(ARGV[2])
local bucket_ms = tonumber(ARGV[3])
local minimum_calls = tonumber(ARGV[4])
local failure_threshold = tonumber(ARGV[5])
local slow_threshold = tonumber(ARGV[6])
local open_wait = tonumber(ARGV[7])
local probes = tonumber(ARGV[8])

local h = redis.call('HMGET', KEYS[1], 'st', 'ep', 'un', 'pg', 'ps')
local st = tonumber(h[1]) or 0
local ep = tonumber(h[2]) or 0
local un = tonumber(h[3]) or 0
local pg = tonumber(h[4]) or 0
local ps = tonumber(h[5]) or 0

local function effective()
  if st == 1 then
    if now < un then return 1 end
    return 2
  end
  return 0
end

local function reply(granted)
  local e = effective()
  local retry = 0
  if e == 1 then retry = un - now end
  return {e, ep, retry, pg, granted}
end

-- Long enough to outlive any open period and window; an expired state is a
-- fresh closed breaker.
local ttl = 3 * math.max(window_ms, open_wait) + 60000

local function save(event)
  redis.call('HSET', KEYS[1], 'st', st, 'ep', ep, 'un', un, 'pg', pg, 'ps', ps)
  redis.call('PEXPIRE', KEYS[1], ttl)
  if event then
    redis.call('PUBLISH', ARGV[9], ARGV[10] .. ' ' .. event .. ' ' .. ep)
  end
end

local function open_until(till)
  st = 1; ep = ep + 1; un = till; pg = 0; ps = 0
  redis.call('DEL', KEYS[2])
  save('open')
end

local function close()
  st = 0; ep = ep + 1; un = 0; pg = 0; ps = 0
  redis.call('DEL', KEYS[2])
  save('closed')
end

if op == 'read' then
  return reply(0)
end

if op == 'record' then
  if effective() ~= 0 then return reply(0) end
  local b = math.floor(now / bucket_ms)
  local n = math.ceil(window_ms / bucket_ms)
  redis.call('HINCRBY', KEYS[2], b .. ':c', ARGV[11])
  redis.call('HINCRBY', KEYS[2], b .. ':f', ARGV[12])
  redis.call('HINCRBY', KEYS[2], b .. ':s', ARGV[13])
  redis.call('PEXPIRE', KEYS[2], window_ms + bucket_ms)
  local all = redis.call('HGETALL', KEYS[2])
  local calls, failures, slow = 0, 0, 0
  local old = {}
  for i = 1, #all, 2 do
    local field = all[i]
    local sep = string.find(field, ':', 1, true)
    local fb = tonumber(string.sub(field, 1, sep - 1))
    if fb <= b - n then
      old[#old + 1] = field
    else
      local kind = string.sub(field, sep + 1)
      local v = tonumber(all[i + 1])
      if kind == 'c' then calls = calls + v
      elseif kind == 'f' then failures = failures + v
      else slow = slow + v end
    end
  end
  if #old > 0 then redis.call('HDEL', KEYS[2], unpack(old)) end
  if calls > 0 and calls >= minimum_calls then
    if failures / calls >= failure_threshold
      or (slow_threshold < 1 and slow / calls >= slow_threshold) then
      open_until(now + open_wait)
    end
  end
  return reply(0)
end

if op == 'open' then
  local seen = tonumber(ARGV[11])
  local till = now + tonumber(ARGV[12])
  local e = effective()
  if e == 0 then
    open_until(till)
  elseif ep == seen then
    if e == 1 then
      if till > un then un = till; save(nil) end
    else
      open_until(till)
    end
  end
  return reply(0)
end

if op == 'probe' then
  if effective() ~= 2 then return reply(0) end
  if pg < probes then
    pg = pg + 1
    save(nil)
    return reply(1)
  end
  -- The quota was handed out a whole open wait ago and never reported
  -- (its instances died): start a new probing epoch.
  if now >= un + open_wait then
    ep = ep + 1; un = now; pg = 1; ps = 0
    save('half_open')
    return reply(1)
  end
  return reply(0)
end

if op == 'report' then
  local epoch = tonumber(ARGV[11])
  local outcome = ARGV[12]
  if effective() ~= 2 or ep ~= epoch then return reply(0) end
  if outcome == 'f' then
    open_until(now + open_wait)
  elseif outcome == 's' then
    ps = ps + 1
    if ps >= probes then close() else save(nil) end
  elseif pg > ps then
    pg = pg - 1
    save(nil)
  end
  return reply(0)
end

return redis.error_reply('breaker.lua: unknown op ' .. tostring(op))
