//! Corrections of what a grant counted (`lua/reconcile.lua`): per
//! dimension, rate and calendar, the signed change of units from what was
//! reserved to what was used ([`Change`]), bounded so the scripts' doubles
//! stay exact.

use super::dims::Dim;
use crate::scripts;
use crate::shape::calendar_kind;
use pressure_core::{CalendarSpec, Demand, LimitSpec, UnitsDelta};

/// One dimension's correction for `lua/reconcile.lua`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Change {
    /// 0 window, 1 gcra, 2 calendar day, 3 calendar month.
    pub(super) kind: u8,
    pub(super) dimension: usize,
    /// Units to add (negative: to give back).
    pub(super) delta: i64,
    pub(super) step_us: u64,
    pub(super) window_us: u64,
}

impl Change {
    pub(super) fn of(d: &Dim, (before, after): (u64, u64)) -> Self {
        // A gcra TAT moves by delta × T (µs): bounded so the product stays
        // exact in the script's doubles.
        let bound = if d.gcra {
            MAX_SCRIPT_UNITS / d.step_us.max(1)
        } else {
            MAX_SCRIPT_UNITS
        };
        Self {
            kind: u8::from(d.gcra),
            dimension: d.rate.dimension.index(),
            delta: bounded_delta(before, after, bound),
            step_us: d.step_us,
            window_us: d.window_us,
        }
    }

    fn calendar(c: &CalendarSpec, (before, after): (u64, u64)) -> Self {
        Self {
            kind: 1 + calendar_kind(c.calendar),
            dimension: c.dimension.index(),
            delta: bounded_delta(before, after, MAX_SCRIPT_UNITS),
            step_us: 0,
            window_us: 0,
        }
    }
}

/// The most units a script counts for one grant (2^52: exact in the
/// scripts' doubles, and far past any limit): a count above it is counted
/// as this many, so it fills the limit, and a correction between two such
/// counts moves nothing (a count pinned full is not refunded).
const MAX_SCRIPT_UNITS: u64 = 1 << 52;

/// The correction from `before` to `after` units, each counted as at most
/// `bound`, as the script's signed argument: never a wrapped number, never
/// a change of sign.
fn bounded_delta(before: u64, after: u64, bound: u64) -> i64 {
    let bound = bound.max(1);
    UnitsDelta::between(before.min(bound), after.min(bound)).saturating_i64()
}

/// The non-zero corrections of every dimension, rate and calendar, where
/// `counts` gives a dimension's units (before, after) from its units
/// function.
pub(super) fn changes(
    dims: &[Dim],
    spec: &LimitSpec,
    counts: impl Fn(&dyn Fn(&Demand) -> u64) -> (u64, u64),
) -> Vec<Change> {
    let rates = dims.iter().map(|d| Change::of(d, counts(&|x| d.rate.units(x))));
    let calendars = spec
        .calendars
        .iter()
        .map(|c| Change::calendar(c, counts(&|x| c.units(x))));
    rates.chain(calendars).filter(|c| c.delta != 0).collect()
}

/// One call of `lua/reconcile.lua`: correct the units counted at `at_us`.
/// The calendar counts are those of the grant's period, dated with
/// `offset_us` like the acquisition.
pub(super) fn reconcile_invocation(
    key: &str,
    at_us: u64,
    changes: &[Change],
    offset_us: i64,
) -> redis::ScriptInvocation<'static> {
    let mut inv = scripts::RECONCILE.prepare_invoke();
    inv.key(key).arg(changes.len()).arg(at_us);
    for c in changes {
        inv.arg(c.kind)
            .arg(c.dimension)
            .arg(c.delta)
            .arg(c.step_us)
            .arg(c.window_us);
    }
    inv.arg(offset_us);
    inv
}

/// Whether the correction from `before` to `after` gives units back in
/// some dimension (a denial the deny cache holds may no longer stand).
pub(super) fn delta_frees(before: &Demand, after: &Demand) -> bool {
    after.requests < before.requests
        || after.input_tokens < before.input_tokens
        || after.output_tokens < before.output_tokens
        || after.cost_micro_usd < before.cost_micro_usd
}
