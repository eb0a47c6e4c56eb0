//! The generator of a [`Shape`]'s acquire script ([`generate`]): the
//! dimension logic unrolled into straight-line Lua, with the shape's
//! constants baked in (see the parent module).

use super::{RateShape, Shape, S};
use std::fmt::Write as _;

/// Appends one line of Lua to a [`Gen`], formatted like `format!` (a line
/// without arguments and with braces goes through [`Gen::line`]).
macro_rules! lua {
    ($gen:expr, $($fmt:tt)+) => {{
        let _ = writeln!($gen.out, $($fmt)+);
    }};
}

/// Lua source of the acquire script of `shape`: same keys, fields, values,
/// replies and semantics as `lua/acquire.lua` (see there), straight-line.
///
/// `ARGV`, per rate dimension i in order: `units_i, limit_i` (gcra also
/// `T_i`); then, with a concurrency limit, `conc` (0: no lease this call)
/// and the lease id; then, when every rate is gcra, `book_within` (µs).
pub(crate) fn generate(shape: &Shape) -> String {
    let mut g = Gen::default();
    g.emit(shape);
    if shape.calendars.is_empty() {
        g.out
    } else {
        format!("{}{}", crate::scripts::CALENDAR_LUA, g.out)
    }
}

/// Text of one generated script.
#[derive(Default)]
struct Gen {
    out: String,
}

/// One rate dimension as the generator sees it: its number (for local
/// names), its constants and its `HMGET` slots.
struct GenDim {
    n: usize,
    id: usize,
    /// `Some(step)` for window, `None` for gcra.
    window: Option<u64>,
    /// For window: the window length W (µs).
    window_us: u64,
    /// Index (1-based) of its first field in the `HMGET` reply.
    slot: usize,
    /// For window: the local holding `floor(now / step)`.
    k: String,
}

impl Gen {
    /// Appends one line of Lua.
    fn line(&mut self, s: &str) {
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// The whole script of `shape`: clock, arguments, one `HMGET`, the
    /// checks of every dimension, the denial, the grant.
    fn emit(&mut self, shape: &Shape) {
        let conc = shape.lease_ttl_us;
        lua!(
            self,
            "-- acquire, generated for the shape {}: see lua/acquire.lua (same fields and replies).",
            describe(shape)
        );
        // The clock lines match lua/acquire.lua's (the tests swap them).
        self.line("local t = redis.call('TIME')");
        self.line("local now = t[1] * 1000000 + t[2]");
        self.line("local key = KEYS[1]");
        self.line("local fmt = string.format");

        let (dims, book_arg, cal_slot) = self.emit_args(shape);
        self.emit_read(shape, &dims);
        for d in &dims {
            self.emit_check(d);
        }
        if conc.is_some() {
            self.emit_concurrency();
        }
        self.emit_calendar_checks(shape, cal_slot);

        self.emit_denial(shape, &dims, book_arg);
        self.emit_grant(shape, &dims);
    }

    /// The per-call arguments (`ARGV`) of every dimension, the lease, the
    /// booking and the calendar dimensions, and the sub-window indices: the
    /// dimensions as the rest of the script names them, the `ARGV` index of
    /// the booking bound, and the `HMGET` slot of the first calendar field.
    fn emit_args(&mut self, shape: &Shape) -> (Vec<GenDim>, usize, usize) {
        let conc = shape.lease_ttl_us;
        let mut a = 1;
        let mut dims = Vec::new();
        // HMGET slots: e (the expiry mark), [c, cm, d:<id>], then the dimensions.
        let mut slot = if conc.is_some() { 5 } else { 2 };
        let mut ks: Vec<(u64, String)> = Vec::new();
        for (i, r) in shape.rates.iter().enumerate() {
            let n = i + 1;
            match *r {
                RateShape::Gcra { id } => {
                    lua!(
                        self,
                        "local u{n}, m{n}, T{n} = ARGV[{a}] + 0, ARGV[{}] + 0, ARGV[{}] + 0",
                        a + 1,
                        a + 2
                    );
                    a += 3;
                    dims.push(GenDim {
                        n,
                        id,
                        window: None,
                        window_us: 0,
                        slot,
                        k: String::new(),
                    });
                    slot += 2;
                }
                RateShape::Window {
                    id,
                    step_us,
                    window_us,
                } => {
                    lua!(self, "local u{n}, m{n} = ARGV[{a}] + 0, ARGV[{}] + 0", a + 1);
                    a += 2;
                    // One sub-window index (and its text) per distinct length.
                    let k = match ks.iter().find(|(s, _)| *s == step_us) {
                        Some((_, k)) => k.clone(),
                        None => {
                            let k = format!("k{}", ks.len() + 1);
                            ks.push((step_us, k.clone()));
                            k
                        }
                    };
                    dims.push(GenDim {
                        n,
                        id,
                        window: Some(step_us),
                        window_us,
                        slot,
                        k,
                    });
                    slot += 5;
                }
            }
        }
        if conc.is_some() {
            lua!(self, "local conc, lid = ARGV[{a}] + 0, ARGV[{}]", a + 1);
            a += 2;
        }
        let book_arg = a;
        if shape.bookable() {
            a += 1;
        }
        if !shape.calendars.is_empty() {
            lua!(self, "local off = ARGV[{a}] + 0");
            a += 1;
            for j in 1..=shape.calendars.len() {
                lua!(self, "local ku{j}, km{j} = ARGV[{a}] + 0, ARGV[{}] + 0", a + 1);
                a += 2;
            }
        }
        for (step, k) in &ks {
            lua!(self, "local {k} = math.floor(now / {step})");
            lua!(self, "local {k}s = fmt('%d', {k})");
        }
        for d in &dims {
            if d.window.is_some() {
                lua!(self, "local f{} = 'w{}:' .. {}s", d.n, d.id, d.k);
            }
        }
        (dims, book_arg, slot)
    }

    /// The one `HMGET` of the state and its locals (the expiry mark, the
    /// lease count), and a lease given up before it arrived.
    fn emit_read(&mut self, shape: &Shape, dims: &[GenDim]) {
        let conc = shape.lease_ttl_us;
        let mut fields = vec!["'e'".to_owned()];
        if conc.is_some() {
            self.line("local dl = '-'");
            self.line("if conc > 0 then dl = 'd:' .. lid end");
            fields.extend(["'c'".to_owned(), "'cm'".to_owned(), "dl".to_owned()]);
        }
        for d in dims {
            match d.window {
                None => fields.extend([format!("'g{}'", d.id), format!("'g{}t'", d.id)]),
                Some(_) => fields.extend([
                    format!("'w{}:s'", d.id),
                    format!("'w{}:lo'", d.id),
                    format!("f{}", d.n),
                    format!("'w{}:t'", d.id),
                    format!("'w{}:tc'", d.id),
                ]),
            }
        }
        for c in &shape.calendars {
            fields.extend([format!("'k{}'", c.id), format!("'k{}p'", c.id)]);
        }
        lua!(self, "local v = redis.call('HMGET', key, {})", fields.join(", "));
        self.line("local x = v[1]");
        self.line("x = x and x + 0 or 0");
        if conc.is_some() {
            self.line("if conc > 0 and v[4] then");
            self.line("  -- Given up by its client before it got here: reserve nothing.");
            self.line("  redis.call('HDEL', key, dl)");
            self.line("  return {2, 0, 0}");
            self.line("end");
            self.line("local count, cmin = v[2], v[3]");
            self.line("count = count and count + 0 or 0");
            self.line("if cmin then cmin = cmin + 0 else cmin = nil end");
        }
        self.line("local worst, wd = -1, 5");
        if dims.iter().any(|d| d.window.is_some()) {
            self.line("local dels, nd = nil, 0");
        }
    }

    /// The denial (or, when the shape can book, the booked start): only
    /// the housekeeping is written back.
    fn emit_denial(&mut self, shape: &Shape, dims: &[GenDim], book_arg: usize) {
        let conc = shape.lease_ttl_us;
        self.line("local start = now");
        self.line("if worst >= 0 then");
        if shape.bookable() {
            lua!(self, "  local book = ARGV[{book_arg}] + 0");
            if conc.is_some() {
                self.line("  local bookable = book > 0 and conc == 0");
            } else {
                self.line("  local bookable = book > 0");
            }
            self.line("  if bookable then");
            for d in dims {
                let n = d.n;
                lua!(self, "    if u{n} > 0 then start = math.max(start, (tat{n} > now and tat{n} or now) + u{n} * T{n} - m{n}) end");
            }
            self.line("  end");
            self.line("  if not bookable or start - now > book then");
        } else {
            self.line("  do");
        }
        self.line("    -- Denied: keep only the housekeeping (evictions, sweep).");
        self.line("    local upd, nu = {}, 0");
        for d in dims {
            if d.window.is_some() {
                let (n, id) = (d.n, d.id);
                lua!(self, "    if e{n} then upd[nu + 1] = 'w{id}:s'; upd[nu + 2] = s{n}; upd[nu + 3] = 'w{id}:lo'; upd[nu + 4] = l{n}; nu = nu + 4 end");
            }
        }
        if conc.is_some() {
            self.line("    if swept then");
            self.line("      upd[nu + 1] = 'c'; upd[nu + 2] = count; nu = nu + 2");
            self.line("      if cmin ~= nil then upd[nu + 1] = 'cm'; upd[nu + 2] = cmin; nu = nu + 2 end");
            self.line("    end");
        }
        if dims.iter().any(|d| d.window.is_some()) {
            self.line("    if nd > 0 then redis.call('HDEL', key, unpack(dels)) end");
        }
        self.line("    if nu > 0 then redis.call('HSET', key, unpack(upd)) end");
        self.line("    return {0, worst, wd}");
        self.line("  end");
        self.line("end");
    }

    /// The check of one rate dimension (`worst`, `wd` updated).
    fn emit_check(&mut self, d: &GenDim) {
        let (n, id, p) = (d.n, d.id, d.slot);
        match d.window {
            None => {
                lua!(self, "local tat{n}, ts{n} = v[{p}], v[{}]", p + 1);
                lua!(self, "tat{n} = tat{n} and tat{n} + 0 or 0");
                lua!(self, "if ts{n} then ts{n} = ts{n} + 0 else ts{n} = nil end");
                lua!(self, "if ts{n} ~= nil and ts{n} ~= T{n} and tat{n} > now then");
                self.line("  -- Counted with another T (the limit changed): keep the units held.");
                lua!(self, "  tat{n} = now + math.ceil((tat{n} - now) / ts{n}) * T{n}");
                self.line("end");
                lua!(self, "local tw{n} = ts{n} ~= T{n}");
                lua!(self, "if u{n} > 0 then");
                lua!(
                    self,
                    "  local w = (tat{n} > now and tat{n} or now) + u{n} * T{n} - m{n} - now"
                );
                lua!(self, "  if w > 0 and w > worst then worst, wd = w, {id} end");
                self.line("end");
            }
            Some(step) => {
                let (k, w) = (&d.k, d.window_us);
                lua!(
                    self,
                    "local s{n}, l{n}, c{n}, lt{n}, tc{n} = v[{p}], v[{}], v[{}], v[{}], v[{}]",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4
                );
                lua!(self, "s{n} = s{n} and s{n} + 0 or 0");
                lua!(self, "local lw{n} = not l{n}");
                lua!(self, "l{n} = l{n} and l{n} + 0 or {k}");
                lua!(self, "c{n} = c{n} and c{n} + 0 or 0");
                lua!(self, "if lt{n} then lt{n} = lt{n} + 0 else lt{n} = nil end");
                lua!(self, "tc{n} = tc{n} and tc{n} + 0 or 0");
                lua!(self, "local e{n} = false");
                self.line("-- Evict the sub-windows whose end + W has passed (live ones span at");
                self.line("-- most S + 1), and the last grant's own once it is W old.");
                lua!(self, "local lo{n} = math.floor((now - {w}) / {step})");
                lua!(self, "if lt{n} ~= nil and now >= lt{n} + {w} then");
                lua!(self, "  local kt = math.floor(lt{n} / {step})");
                lua!(self, "  if kt == lo{n} and kt >= l{n} and (tonumber(redis.call('HGET', key, 'w{id}:' .. kt)) or 0) <= tc{n} then lo{n} = kt + 1 end");
                self.line("end");
                lua!(self, "if l{n} < lo{n} then");
                self.line("  local old = {}");
                lua!(
                    self,
                    "  for j = l{n}, math.min(lo{n} - 1, l{n} + {S}) do old[#old + 1] = 'w{id}:' .. j end"
                );
                self.line("  local ov = redis.call('HMGET', key, unpack(old))");
                self.line("  dels = dels or {}");
                lua!(self, "  for j = 1, #old do s{n} = s{n} - (tonumber(ov[j]) or 0); nd = nd + 1; dels[nd] = old[j] end"
                );
                lua!(self, "  l{n} = lo{n}");
                lua!(self, "  e{n} = true");
                self.line("end");
                lua!(self, "if u{n} > 0 and s{n} + u{n} > m{n} then");
                lua!(self, "  local w = {w}");
                lua!(self, "  if u{n} <= m{n} then");
                lua!(self, "    local need, live = s{n} + u{n} - m{n}, {{}}");
                lua!(
                    self,
                    "    for j = l{n}, {k} do live[#live + 1] = 'w{id}:' .. j end"
                );
                self.line("    local lv = redis.call('HMGET', key, unpack(live))");
                self.line("    local freed = 0");
                self.line("    for j = 1, #live do");
                self.line("      freed = freed + (tonumber(lv[j]) or 0)");
                self.line("      if freed >= need then");
                self.line("        -- Sub-window l + j - 1 leaves at its end + W, the last grant's");
                self.line("        -- own at w<d>:t + W (see the eviction).");
                lua!(self, "        local gone = (l{n} + j) * {step}");
                lua!(self, "        if lt{n} ~= nil and l{n} + j - 1 == math.floor(lt{n} / {step}) and (tonumber(lv[j]) or 0) <= tc{n} then gone = lt{n} end");
                lua!(self, "        w = math.min(math.max(gone + {w} - now, 1), {w})");
                self.line("        break");
                self.line("      end");
                self.line("    end");
                self.line("  end");
                lua!(self, "  if w > worst then worst, wd = w, {id} end");
                self.line("end");
            }
        }
    }

    /// The checks of the calendar dimensions (`worst`, `wd` updated), after
    /// every other, as in `lua/acquire.lua`: the count of the current
    /// period (another period's reads as zero) and, on a refusal, the wait
    /// until the period ends.
    fn emit_calendar_checks(&mut self, shape: &Shape, slot: usize) {
        if shape.calendars.is_empty() {
            return;
        }
        self.line("local wall = now + off");
        for (i, c) in shape.calendars.iter().enumerate() {
            let (j, p) = (i + 1, slot + 2 * i);
            lua!(self, "local kp{j}, ke{j} = cal_period({}, wall)", c.kind);
            lua!(self, "ke{j} = ke{j} - wall");
            lua!(self, "local kc{j}, kq{j} = v[{p}], v[{}]", p + 1);
            lua!(
                self,
                "if kq{j} and kq{j} + 0 == kp{j} then kc{j} = kc{j} and kc{j} + 0 or 0 else kc{j} = 0 end"
            );
            lua!(self, "if ku{j} > 0 and kc{j} + ku{j} > km{j} then");
            lua!(self, "  local w = math.max(ke{j}, 1)");
            lua!(self, "  if w > worst then worst, wd = w, {} end", c.id);
            self.line("end");
        }
    }

    /// The concurrency check, with the sweep of expired leases.
    fn emit_concurrency(&mut self) {
        self.line("local swept = false");
        self.line("if conc > 0 and count >= conc then");
        self.line("  if cmin ~= nil and now >= cmin then");
        self.line("    -- Sweep expired leases; recount and find the exact earliest expiry.");
        self.line("    local h = redis.call('HGETALL', key)");
        self.line("    local dead, live, first = {}, 0, nil");
        self.line("    for j = 1, #h, 2 do");
        self.line("      local f = h[j]");
        self.line("      local p = string.sub(f, 1, 2)");
        self.line("      if p == 'l:' then");
        self.line("        local e = tonumber(h[j + 1])");
        self.line("        if e <= now then");
        self.line("          dead[#dead + 1] = f");
        self.line("        else");
        self.line("          live = live + 1");
        self.line("          if first == nil or e < first then first = e end");
        self.line("        end");
        self.line("      elseif p == 'd:' and tonumber(h[j + 1]) <= now then");
        self.line("        dead[#dead + 1] = f");
        self.line("      end");
        self.line("    end");
        self.line("    if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end");
        self.line("    count, cmin, swept = live, first, true");
        self.line("  end");
        self.line("  if count >= conc then");
        self.line("    local w = 100000");
        self.line("    if cmin ~= nil then w = math.max(1, math.min(cmin - now, 100000)) end");
        self.line("    if w > worst then worst, wd = w, 5 end");
        self.line("  end");
        self.line("end");
    }

    /// The grant: a fast path with one literal `HSET` when nothing but the
    /// counters moves, else the general write set of `lua/acquire.lua`.
    fn emit_grant(&mut self, shape: &Shape, dims: &[GenDim]) {
        self.emit_fast_grant(shape, dims);
        self.emit_general_grant(shape, dims);
    }

    /// The grant's fast path: every rate takes units, nothing evicted or
    /// rescaled, no `lo`/`cm`/`e` to write, a lease when the shape has one
    /// — one `HSET`.
    fn emit_fast_grant(&mut self, shape: &Shape, dims: &[GenDim]) {
        let conc = shape.lease_ttl_us;
        // The key's expiry must cover: window sub-windows (constant), the
        // lease TTL (constant), a gcra TAT (per call).
        let kw = dims
            .iter()
            .filter_map(|d| d.window.map(|s| s * (S + 2)))
            .max()
            .unwrap_or(0);
        for d in dims {
            if d.window.is_none() {
                let n = d.n;
                lua!(
                    self,
                    "local nt{n} = (tat{n} > start and tat{n} or start) + u{n} * T{n}"
                );
            }
        }
        let mut cond = Vec::new();
        let mut sets = Vec::new();
        let fast_keep = kw.max(conc.unwrap_or(0));
        for d in dims {
            let (n, id) = (d.n, d.id);
            cond.push(format!("u{n} > 0"));
            match d.window {
                None => {
                    cond.push(format!("not tw{n}"));
                    sets.push(format!("'g{id}', fmt('%d', nt{n})"));
                }
                Some(_) => {
                    cond.push(format!("not e{n}"));
                    cond.push(format!("not lw{n}"));
                    sets.push(format!(
                        "'w{id}:s', fmt('%d', s{n} + u{n}), f{n}, fmt('%d', c{n} + u{n}), 'w{id}:t', fmt('%d', now), 'w{id}:tc', fmt('%d', c{n} + u{n})"
                    ));
                }
            }
        }
        if let Some(ttl) = conc {
            lua!(self, "local exp = now + {ttl}");
            cond.push("conc > 0".into());
            cond.push("not swept".into());
            cond.push("cmin ~= nil".into());
            cond.push("exp >= cmin".into());
            sets.push("'c', fmt('%d', count + 1), 'l:' .. lid, fmt('%d', exp)".into());
        }
        lua!(self, "local keep = {fast_keep}");
        for d in dims {
            if d.window.is_none() {
                let n = d.n;
                lua!(self, "if nt{n} - now > keep then keep = nt{n} - now end");
            }
        }
        cond.push("now + keep <= x".into());
        // With calendar dimensions every grant takes the general path.
        if !sets.is_empty() && shape.calendars.is_empty() {
            lua!(self, "if {} then", cond.join(" and "));
            lua!(self, "  redis.call('HSET', key, {})", sets.join(", "));
            self.line("  return {1, now, start - now}");
            self.line("end");
        }
    }

    /// The grant's general path, as `lua/acquire.lua` writes it.
    fn emit_general_grant(&mut self, shape: &Shape, dims: &[GenDim]) {
        let conc = shape.lease_ttl_us;
        self.line("local upd, nu = {}, 0");
        self.line("keep = 0");
        for d in dims {
            let (n, id) = (d.n, d.id);
            match d.window {
                None => {
                    lua!(self, "if u{n} > 0 then");
                    lua!(self, "  upd[nu + 1] = 'g{id}'; upd[nu + 2] = nt{n}; nu = nu + 2");
                    lua!(
                        self,
                        "  if tw{n} then upd[nu + 1] = 'g{id}t'; upd[nu + 2] = T{n}; nu = nu + 2 end"
                    );
                    lua!(self, "  if nt{n} - now > keep then keep = nt{n} - now end");
                    self.line("end");
                }
                Some(step) => {
                    lua!(self, "if u{n} > 0 or e{n} then");
                    lua!(self, "  upd[nu + 1] = 'w{id}:s'; upd[nu + 2] = s{n} + u{n}; upd[nu + 3] = 'w{id}:lo'; upd[nu + 4] = l{n}; nu = nu + 4");
                    lua!(
                        self,
                        "  if u{n} > 0 then upd[nu + 1] = f{n}; upd[nu + 2] = c{n} + u{n}; upd[nu + 3] = 'w{id}:t'; upd[nu + 4] = now; upd[nu + 5] = 'w{id}:tc'; upd[nu + 6] = c{n} + u{n}; nu = nu + 6 end"
                    );
                    lua!(
                        self,
                        "  if {} > keep then keep = {} end",
                        step * (S + 2),
                        step * (S + 2)
                    );
                    self.line("end");
                }
            }
        }
        for (i, c) in shape.calendars.iter().enumerate() {
            let (j, id) = (i + 1, c.id);
            lua!(self, "if ku{j} > 0 then");
            lua!(self, "  upd[nu + 1] = 'k{id}'; upd[nu + 2] = kc{j} + ku{j}; upd[nu + 3] = 'k{id}p'; upd[nu + 4] = kp{j}; nu = nu + 4");
            self.line("  -- The count matters until its period ends, and not after.");
            lua!(self, "  if ke{j} > keep then keep = ke{j} end");
            self.line("end");
        }
        if let Some(ttl) = conc {
            self.line("if conc > 0 then");
            self.line("  upd[nu + 1] = 'c'; upd[nu + 2] = count + 1; upd[nu + 3] = 'l:' .. lid; upd[nu + 4] = exp; nu = nu + 4");
            self.line("  if cmin == nil or exp < cmin then");
            self.line("    upd[nu + 1] = 'cm'; upd[nu + 2] = exp; nu = nu + 2");
            self.line("  elseif swept then");
            self.line("    upd[nu + 1] = 'cm'; upd[nu + 2] = cmin; nu = nu + 2");
            self.line("  end");
            lua!(self, "  if {ttl} > keep then keep = {ttl} end");
            self.line("elseif swept then");
            self.line("  upd[nu + 1] = 'c'; upd[nu + 2] = count; nu = nu + 2");
            self.line("  if cmin ~= nil then upd[nu + 1] = 'cm'; upd[nu + 2] = cmin; nu = nu + 2 end");
            self.line("end");
        }
        self.line("-- The key outlives everything it holds; move its expiry only when needed,");
        self.line("-- after the HSET that may create the key.");
        self.line("local expire = keep > 0 and now + keep > x");
        self.line("if expire then");
        self.line("  x = now + keep + math.min(10000000, keep)");
        self.line("  upd[nu + 1] = 'e'; upd[nu + 2] = x; nu = nu + 2");
        self.line("end");
        if dims.iter().any(|d| d.window.is_some()) {
            self.line("if nd > 0 then redis.call('HDEL', key, unpack(dels)) end");
        }
        self.line("if nu > 0 then redis.call('HSET', key, unpack(upd)) end");
        self.line("if expire then redis.call('PEXPIREAT', key, math.ceil(x / 1000)) end");
        self.line("return {1, now, start - now}");
    }
}

/// `gcra:1 window:2/2000000 conc/30000000`-style summary for the script's
/// first line (what the script was generated for, readable in `SCRIPT`
/// dumps and slow logs).
fn describe(shape: &Shape) -> String {
    let mut parts: Vec<String> = shape
        .rates
        .iter()
        .map(|r| match r {
            RateShape::Gcra { id } => format!("gcra:{id}"),
            RateShape::Window { id, step_us, .. } => format!("window:{id}/{step_us}us"),
        })
        .collect();
    for c in &shape.calendars {
        parts.push(format!("{}:{}", if c.kind == 1 { "day" } else { "month" }, c.id));
    }
    if let Some(ttl) = shape.lease_ttl_us {
        parts.push(format!("leases/{ttl}us"));
    }
    if parts.is_empty() {
        "empty".into()
    } else {
        parts.join(" ")
    }
}
