-- calendar.lua: the fixed UTC calendar periods of the calendar dimensions
-- (requestsPerDay, tokensPerDay, costMicroUsdPerDay, costMicroUsdPerMonth),
-- prepended to the scripts that count them (acquire, reconcile, usage; see
-- src/scripts.rs). The same arithmetic as pressure_core::Calendar
-- (H. Hinnant's days-from-civil), on wall time in us: Lua numbers hold it
-- exactly until the year 2255.
--
-- cal_period(kind, wall_us) -> period index, wall time (us) of its end
--   kind 1: a UTC day (index: days since 1970-01-01)
--   kind 2: a UTC month (index: months since January 1970)
local function cal_days_from_civil(y, m)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((m + 9) % 12) + 2) / 5)
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end
local function cal_period(kind, wall)
  local DAY = 86400000000
  local day = math.floor(wall / DAY)
  if kind == 1 then return day, (day + 1) * DAY end
  local z = day + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  local p = (y - 1970) * 12 + m - 1
  if m == 12 then y, m = y + 1, 1 else m = m + 1 end
  return p, cal_days_from_civil(y, m) * DAY
end
