//! Acquire scripts specialised to a limit shape, generated at registration.
//!
//! `lua/acquire.lua` is generic: every call it walks its dimensions in a
//! loop, builds field names and parses per-dimension arguments (algorithm,
//! field names, steps) from `ARGV`. In Redis most of an acquisition's server
//! time is that interpretation, not the three Redis commands (`TIME`,
//! `HMGET`, `HSET`). A [`Shape`] is what is fixed for a registered limit —
//! which dimensions, their algorithm, a window's sub-window length, whether
//! there is a concurrency limit and its lease TTL — and [`generate`] turns it
//! into one straight-line script: the dimension logic unrolled, field names
//! and lengths baked in as constants, one `HMGET`, and on the common path
//! one `HSET` with a literal argument list and integers written with
//! `string.format('%d')` (cheaper than the `%.17g` Redis applies to a Lua
//! number). What varies per call — units, the limits scaled by the ceiling,
//! a `gcra` emission interval (it follows the limit), the lease id — stays
//! in `ARGV`, so `set_limits` needs a new script only when the shape itself
//! changes, and every resource with the same shape shares one script (one
//! SHA) in Redis.
//!
//! Calendar dimensions (`requestsPerDay`, ...) are part of the shape too:
//! which ones and their period (day or month); their units, limits and the
//! wall-time offset come per call, and the period arithmetic is the
//! prelude `lua/calendar.lua`, as in the generic script.
//!
//! The generated script reads and writes exactly the fields of
//! `lua/acquire.lua`, with the same values: both can run against the same
//! hash (a fleet with mixed versions counts together), and a unit test
//! checks that they decide alike and leave the same state.

use pressure_core::{Algorithm, Calendar, LimitSpec};

mod generate;

pub(crate) use generate::generate;

/// Sub-windows a window dimension keeps beyond the current one (the `S` of
/// `lua/acquire.lua`; `pressure_core::SUB_WINDOWS`).
const S: u64 = 30;

/// Largest integer a Lua number (a double) holds exactly: no constant baked
/// into a script may exceed it.
const LUA_EXACT: u64 = 1 << 53;

/// One rate dimension of a [`Shape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RateShape {
    /// `gcra` on dimension `id` (its emission interval comes per call: it
    /// follows the limit).
    Gcra {
        /// `Dimension::index` of the dimension.
        id: usize,
    },
    /// `window` on dimension `id` of `window_us` with sub-windows of
    /// `step_us`.
    Window {
        /// `Dimension::index` of the dimension.
        id: usize,
        /// Sub-window length in microseconds (window length / 30).
        step_us: u64,
        /// Window length W in microseconds: everything leaves W after the
        /// dimension's last grant (`w<d>:t`).
        window_us: u64,
    },
}

/// One calendar dimension of a [`Shape`]: `Dimension::index` and its
/// period's code in `lua/calendar.lua` (1 day, 2 month).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CalendarShape {
    /// `Dimension::index` of the dimension.
    pub(crate) id: usize,
    /// 1: a UTC day; 2: a UTC month.
    pub(crate) kind: u8,
}

/// What is fixed for a registered limit, and so may be baked into its
/// acquire script: the rate dimensions in order, the calendar dimensions,
/// and whether there is a concurrency limit with which lease TTL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    /// Rate dimensions, in the order of `LimitSpec::rates`.
    pub(crate) rates: Vec<RateShape>,
    /// Calendar dimensions, in the order of `LimitSpec::calendars`.
    pub(crate) calendars: Vec<CalendarShape>,
    /// Lease TTL in microseconds when the limit has a concurrency dimension.
    pub(crate) lease_ttl_us: Option<u64>,
}

impl Shape {
    /// The shape of `spec`, given the step the backend computed for each
    /// rate (gcra: emission interval; window: sub-window length, µs).
    /// `None` when the generic script must serve it: a dimension twice, or
    /// a constant a Lua number cannot hold exactly.
    pub(crate) fn of(spec: &LimitSpec, steps_us: &[u64]) -> Option<Self> {
        let mut rates = Vec::with_capacity(spec.rates.len());
        let mut seen = 0u64;
        for (r, &step_us) in spec.rates.iter().zip(steps_us) {
            let id = r.dimension.index();
            if id >= 64 || seen & (1 << id) != 0 {
                return None;
            }
            seen |= 1 << id;
            rates.push(match r.algorithm {
                Algorithm::Gcra => RateShape::Gcra { id },
                _ => {
                    // Sub-window indices must stay below 10^14 for the
                    // generic script's `%.14g` field names to be plain
                    // integers like ours (true for steps ≥ 100 µs until
                    // the year 2286).
                    if step_us < 100 || step_us.checked_mul(S + 2)? >= LUA_EXACT {
                        return None;
                    }
                    RateShape::Window {
                        id,
                        step_us,
                        window_us: r.window_ns / 1_000,
                    }
                }
            });
        }
        if rates.len() != spec.rates.len() {
            return None;
        }
        let mut calendars = Vec::with_capacity(spec.calendars.len());
        for c in &spec.calendars {
            let id = c.dimension.index();
            if id >= 64 || seen & (1 << id) != 0 {
                return None;
            }
            seen |= 1 << id;
            calendars.push(CalendarShape {
                id,
                kind: calendar_kind(c.calendar),
            });
        }
        let lease_ttl_us = match spec.concurrency {
            Some(_) => {
                let ttl = spec.lease_ttl_ns / 1_000;
                if ttl >= LUA_EXACT {
                    return None;
                }
                Some(ttl)
            }
            None => None,
        };
        Some(Self {
            rates,
            calendars,
            lease_ttl_us,
        })
    }

    /// Whether a denial may book a future slot instead: only when every rate
    /// is `gcra`, there is no calendar dimension (and, per call, no lease
    /// is taken), as in `lua/acquire.lua`.
    pub(crate) fn bookable(&self) -> bool {
        !self.rates.is_empty()
            && self.calendars.is_empty()
            && self.rates.iter().all(|r| matches!(r, RateShape::Gcra { .. }))
    }
}

/// The scripts' code of a calendar period (`lua/calendar.lua`).
pub(crate) fn calendar_kind(c: Calendar) -> u8 {
    match c {
        Calendar::Day => 1,
        Calendar::Month => 2,
    }
}

/// The per-call arguments of a generated script, in `ARGV` order (see
/// [`generate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateArgs {
    /// Units this call takes from the dimension.
    pub(crate) units: u64,
    /// gcra: tolerance C·T in µs; window: the limit N (both scaled by the
    /// demand's ceiling).
    pub(crate) limit: u64,
    /// gcra: emission interval T in µs (ignored for window).
    pub(crate) step_us: u64,
}

/// The calendar part of a call (see [`args`]): the wall-time offset (µs)
/// and per calendar dimension its units and limit (scaled by the ceiling).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct CalendarArgs {
    /// Added to the server's time for the calendar periods.
    pub(crate) offset_us: i64,
    /// `(units, limit)` per calendar dimension, in the shape's order.
    pub(crate) dims: Vec<(u64, u64)>,
}

/// Appends the `ARGV` of one call of the script of `shape` to `out`:
/// per rate `units, limit` (+ `T` for gcra); with a concurrency limit the
/// concurrency limit of this call (0: take no lease) and the lease id; when
/// [`Shape::bookable`], the booking horizon in µs; with calendar
/// dimensions, the wall-time offset and per calendar dimension `units,
/// limit`.
pub(crate) fn args(
    shape: &Shape,
    rates: &[RateArgs],
    conc: u64,
    member: &str,
    book_within_us: u64,
    calendars: &CalendarArgs,
) -> Vec<String> {
    let mut out = Vec::with_capacity(rates.len() * 3 + 3);
    for (r, a) in shape.rates.iter().zip(rates) {
        out.push(a.units.to_string());
        out.push(a.limit.to_string());
        if matches!(r, RateShape::Gcra { .. }) {
            out.push(a.step_us.to_string());
        }
    }
    if shape.lease_ttl_us.is_some() {
        out.push(conc.to_string());
        out.push(member.to_owned());
    }
    if shape.bookable() {
        out.push(book_within_us.to_string());
    }
    if !shape.calendars.is_empty() {
        out.push(calendars.offset_us.to_string());
        for (units, limit) in calendars.dims.iter().take(shape.calendars.len()) {
            out.push(units.to_string());
            out.push(limit.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pressure_core::{Limits, MAX_LIMIT};

    /// The shape of `limits` with the steps the backend computes.
    fn shape_of(limits: &Limits) -> Shape {
        let spec = limits.compile().expect("valid limits");
        let steps: Vec<u64> = spec
            .rates
            .iter()
            .map(|r| {
                let w = r.window_ns / 1_000;
                match r.algorithm {
                    Algorithm::Gcra => w.div_ceil(r.limit),
                    _ => w.div_ceil(pressure_core::SUB_WINDOWS),
                }
            })
            .collect();
        Shape::of(&spec, &steps).expect("a shape")
    }

    fn dim3() -> Limits {
        Limits::default()
            .requests_per_minute(MAX_LIMIT)
            .tokens_per_minute(MAX_LIMIT)
            .max_concurrent_requests(MAX_LIMIT)
    }

    #[test]
    fn same_shape_same_script_whatever_the_limits() {
        let a = shape_of(
            &Limits::default()
                .requests_per_minute(10)
                .max_concurrent_requests(3),
        );
        let b = shape_of(
            &Limits::default()
                .requests_per_minute(5_000)
                .max_concurrent_requests(70),
        );
        assert_eq!(a, b, "limits are per-call arguments, not part of the shape");
        let sha = |s: &Shape| redis::Script::new(&generate(s)).get_hash().to_owned();
        assert_eq!(sha(&a), sha(&b));
        // gcra: the emission interval follows the limit, and is an argument.
        assert_eq!(
            shape_of(&Limits::default().requests_per_second(5).gcra(None)),
            shape_of(&Limits::default().requests_per_second(900).gcra(Some(3)))
        );
        // What is baked in makes another script: a window length, a
        // dimension, the lease TTL, the algorithm.
        let others = [
            shape_of(
                &Limits::default()
                    .requests_per_second(10)
                    .max_concurrent_requests(3),
            ),
            shape_of(&Limits::default().requests_per_minute(10)),
            shape_of(
                &Limits::default()
                    .requests_per_minute(10)
                    .max_concurrent_requests(3)
                    .lease_ttl(std::time::Duration::from_secs(5)),
            ),
            shape_of(
                &Limits::default()
                    .requests_per_minute(10)
                    .max_concurrent_requests(3)
                    .gcra(None),
            ),
        ];
        for o in &others {
            assert_ne!(sha(o), sha(&a), "{o:?}");
        }
    }

    #[test]
    fn the_script_has_no_loop_over_dimensions_and_no_field_names_from_argv() {
        for limits in [
            dim3(),
            Limits::default().requests_per_second(100).gcra(None),
            Limits::default()
                .requests_per_minute(60)
                .tokens_per_minute(1_000)
                .max_concurrent_requests(4)
                .gcra(None),
        ] {
            let shape = shape_of(&limits);
            let src = generate(&shape);
            // Every loop is inside a rare branch (eviction, exact wait,
            // lease sweep); the top level is straight-line.
            for line in src.lines() {
                assert!(!line.starts_with("for "), "top-level loop: {line}\n{src}");
                if line.trim_start().starts_with("for ") {
                    assert!(line.trim_start().starts_with("for j = "), "{line}");
                }
            }
            assert!(!src.contains("unpack(fields)") && !src.contains("tonumber(ARGV"));
            // One HMGET at top level, with the field names as literals.
            let hmget: Vec<&str> = src
                .lines()
                .filter(|l| l.starts_with("local v = redis.call('HMGET'"))
                .collect();
            assert_eq!(hmget.len(), 1, "{src}");
            for r in &shape.rates {
                match r {
                    RateShape::Gcra { id } => assert!(hmget[0].contains(&format!("'g{id}', 'g{id}t'"))),
                    RateShape::Window { id, .. } => {
                        assert!(
                            hmget[0].contains(&format!("'w{id}:s', 'w{id}:lo', f")),
                            "{}",
                            hmget[0]
                        );
                    }
                }
            }
            // The fast path's HSET is a literal argument list.
            assert!(src.contains("  redis.call('HSET', key, '"), "{src}");
            // ARGV holds exactly what args() sends.
            assert_eq!(highest_argv(&src), sample_args(&shape).len(), "{src}");
        }
    }

    #[test]
    fn calendar_dimensions_are_part_of_the_shape_and_read_in_the_one_hmget() {
        let limits = Limits::default()
            .requests_per_minute(60)
            .tokens_per_day(1_000)
            .cost_micro_usd_per_month(5_000)
            .max_concurrent_requests(4);
        let shape = shape_of(&limits);
        assert_eq!(
            shape.calendars,
            [
                CalendarShape { id: 9, kind: 1 },
                CalendarShape { id: 11, kind: 2 }
            ]
        );
        assert!(!shape.bookable());
        assert_ne!(
            shape,
            shape_of(
                &Limits::default()
                    .requests_per_minute(60)
                    .max_concurrent_requests(4)
            )
        );
        // Limits are arguments: another budget, the same script.
        assert_eq!(
            shape,
            shape_of(&limits.clone().tokens_per_day(7).cost_micro_usd_per_month(9))
        );
        let src = generate(&shape);
        assert!(
            src.starts_with(crate::scripts::CALENDAR_LUA),
            "the period prelude"
        );
        let hmget: Vec<&str> = src
            .lines()
            .filter(|l| l.starts_with("local v = redis.call('HMGET'"))
            .collect();
        assert_eq!(hmget.len(), 1, "{src}");
        assert!(hmget[0].ends_with("'k9', 'k9p', 'k11', 'k11p')"), "{}", hmget[0]);
        assert_eq!(highest_argv(&src), sample_args(&shape).len(), "{src}");
    }

    /// The highest `ARGV[n]` a script reads.
    fn highest_argv(src: &str) -> usize {
        src.match_indices("ARGV[")
            .filter_map(|(i, _)| src[i + 5..].split(']').next()?.parse::<usize>().ok())
            .max()
            .unwrap_or(0)
    }

    /// The `ARGV` that `args()` sends for `shape` with sample values.
    fn sample_args(shape: &Shape) -> Vec<String> {
        let rates = vec![
            RateArgs {
                units: 1,
                limit: 2,
                step_us: 3
            };
            shape.rates.len()
        ];
        let cals = CalendarArgs {
            offset_us: -5,
            dims: vec![(1, 2); shape.calendars.len()],
        };
        args(shape, &rates, 1, "m", 0, &cals)
    }

    #[test]
    fn two_windows_of_one_length_share_one_sub_window_index() {
        let src = generate(&shape_of(&dim3()));
        assert_eq!(src.matches("math.floor(now / ").count(), 1, "{src}");
        assert_eq!(src.matches("fmt('%d', k1)").count(), 1, "{src}");
    }

    #[test]
    fn constants_a_lua_number_cannot_hold_fall_back_to_the_generic_script() {
        let spec = dim3().compile().expect("valid");
        assert!(Shape::of(&spec, &[2_000_000, 2_000_000]).is_some());
        assert!(
            Shape::of(&spec, &[50, 2_000_000]).is_none(),
            "sub-windows under 100 µs"
        );
        assert!(Shape::of(&spec, &[LUA_EXACT, 2_000_000]).is_none());
    }
}
