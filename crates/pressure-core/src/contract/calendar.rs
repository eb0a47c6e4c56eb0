//! The contract checks of the calendar dimensions (`requestsPerDay`,
//! `tokensPerDay`, `costMicroUsdPerDay`, `costMicroUsdPerMonth`): exact
//! counts per fixed UTC period, waits until the reset, resets at day and
//! month boundaries (months of 28, 29, 30 and 31 days), reconcile within a
//! period and never across one, cost units, all-or-nothing with a sliding
//! dimension.
//!
//! They move the backend's wall time with the [`WallShift`] of
//! [`Harness::shifted_broker`] (the store's own clock, shifted), and cross
//! a boundary by jumping it, except where a grant must stay dated before
//! the boundary (a jump re-dates every instant): there real time crosses a
//! boundary a few seconds ahead.

use super::support::{admits, assert_never_fits, permit, take};
use super::Harness;
use crate::clock::WallShift;
use crate::{AcquireOptions, Backend, Calendar, Dimension, Limits, Permit, Reserved, ResourceBroker};
use std::time::Duration;

const DAY_MS: u64 = 86_400_000;
/// Room left before a boundary for a few calls to the store: they take
/// milliseconds; this is many times that (only a hang crosses it).
const AHEAD: Duration = Duration::from_secs(5);
/// Bound on the time between standing the clock and reading a wait.
const HANG: Duration = Duration::from_secs(4);

/// Unix ms of `y-m-d` 00:00 UTC.
fn utc(y: u64, m: u64, d: u64) -> u64 {
    Calendar::Month.period_start((y - 1970) * 12 + m - 1) + (d - 1) * DAY_MS
}

/// Stands the backend's wall time at `unix_ms`.
fn stand(shift: &WallShift, unix_ms: u64) {
    shift.stand_at(unix_ms * 1_000_000);
}

async fn usage<B: Backend>(b: &ResourceBroker<B>, id: &str, dim: Dimension) -> u64 {
    let s = b.resource_stats(id).await.expect("registered");
    s.usage.get(dim.as_str()).copied().unwrap_or(0)
}

async fn resets_at<B: Backend>(b: &ResourceBroker<B>, id: &str, dim: Dimension) -> Option<u64> {
    let s = b.resource_stats(id).await.expect("registered");
    s.resets_at.get(dim.as_str()).copied()
}

/// The dimension that refuses `opts` now, if any.
async fn refused_by<B: Backend>(b: &ResourceBroker<B>, id: &str, opts: AcquireOptions) -> Option<Dimension> {
    take(b, id, opts).await.denial().map(|d| d.dimension)
}

/// Corrects `p` to one request costing `cost_micro_usd` (no tokens).
async fn reconcile_cost<B: Backend>(p: &mut Permit<B>, cost_micro_usd: u64) {
    p.reconcile(Reserved {
        requests: 1,
        cost_micro_usd,
        ..Reserved::default()
    })
    .await
    .expect("reconciled");
}

/// Takes `n` grants of `opts`, then checks the next is refused on `dim`
/// with an exact wait of at most `until_reset` and more than
/// `until_reset - HANG`.
async fn exhaust<B: Backend>(
    b: &ResourceBroker<B>,
    id: &str,
    opts: AcquireOptions,
    n: u64,
    dim: Dimension,
    until_reset: Duration,
) {
    for i in 0..n {
        assert!(admits(b, id, opts).await, "grant {} of {n} on {id}", i + 1);
    }
    let refused = take(b, id, opts).await;
    let d = refused
        .denial()
        .unwrap_or_else(|| panic!("{id}: one more than {n} admitted"));
    assert_eq!(d.dimension, dim, "{id}");
    assert!(d.is_exact(), "{id}: a calendar wait is exact");
    assert!(
        d.wait <= until_reset && d.wait + HANG > until_reset,
        "{id}: wait {:?}, reset in {until_reset:?}",
        d.wait
    );
}

/// A calendar day admits exactly N and refuses N+1 until midnight UTC, with
/// the reset reported in the stats.
pub async fn calendar_day_admits_exactly_n_then_waits_for_midnight<H: Harness>(h: &H) {
    let (b, shift) = h.shifted_broker().await;
    let id = h.unique("calendar-day");
    b.register_limit(&id, Limits::default().requests_per_day(5))
        .expect("valid");
    let midnight = utc(2027, 6, 16);
    stand(&shift, midnight - 3_600_000);
    exhaust(
        &b,
        &id,
        AcquireOptions::default(),
        5,
        Dimension::RequestsPerDay,
        Duration::from_secs(3_600),
    )
    .await;
    assert_eq!(usage(&b, &id, Dimension::RequestsPerDay).await, 5);
    assert_eq!(
        resets_at(&b, &id, Dimension::RequestsPerDay).await,
        Some(midnight)
    );
}

/// Crossing midnight and the ends of months of 28, 29, 30 and 31 days
/// resets the count, and not one second earlier.
pub async fn calendar_boundaries_reset_day_and_month_ends<H: Harness>(h: &H) {
    let (b, shift) = h.shifted_broker().await;
    // (dimension, period start, next period start)
    let cases = [
        (Dimension::RequestsPerDay, utc(2027, 6, 15), utc(2027, 6, 16)),
        (Dimension::CostMicroUsdPerMonth, utc(2027, 2, 1), utc(2027, 3, 1)),
        (Dimension::CostMicroUsdPerMonth, utc(2028, 2, 1), utc(2028, 3, 1)),
        (Dimension::CostMicroUsdPerMonth, utc(2027, 4, 1), utc(2027, 5, 1)),
        (Dimension::CostMicroUsdPerMonth, utc(2027, 12, 1), utc(2028, 1, 1)),
    ];
    let after_next = [
        utc(2027, 6, 17),
        utc(2027, 4, 1),
        utc(2028, 4, 1),
        utc(2027, 6, 1),
        utc(2028, 2, 1),
    ];
    for ((dim, start, end), next_end) in cases.into_iter().zip(after_next) {
        let id = h.unique(&format!("calendar-{}-{end}", dim.as_str()));
        let limits = Limits::default().requests_per_day(1_000_000);
        let (limits, opts) = match dim {
            Dimension::RequestsPerDay => (limits.requests_per_day(3), AcquireOptions::default()),
            _ => (
                limits.cost_micro_usd_per_month(3_000),
                AcquireOptions::default().cost_micro_usd(1_000),
            ),
        };
        b.register_limit(&id, limits).expect("valid");
        // Exhausted at the period's first second: refused until its end.
        stand(&shift, start + 1_000);
        let len = Duration::from_millis(end - start - 1_000);
        exhaust(&b, &id, opts, 3, dim, len).await;
        // Its last seconds are the same period.
        stand(&shift, end - AHEAD.as_millis() as u64);
        assert_eq!(
            refused_by(&b, &id, opts).await,
            Some(dim),
            "{id}: still the same period"
        );
        assert_eq!(resets_at(&b, &id, dim).await, Some(end), "{id}");
        // One second after the boundary: a new period, counted from zero.
        stand(&shift, end + 1_000);
        assert_eq!(usage(&b, &id, dim).await, 0, "{id}: reset at the boundary");
        exhaust(
            &b,
            &id,
            opts,
            3,
            dim,
            Duration::from_millis(next_end - end - 1_000),
        )
        .await;
        assert_eq!(resets_at(&b, &id, dim).await, Some(next_end), "{id}");
    }
}

/// Reconcile corrects calendar counts up and down, tokens and cost alike,
/// and the cost counted is the demand's `cost_micro_usd`.
pub async fn calendar_reconcile_and_cost_units<H: Harness>(h: &H) {
    let (b, shift) = h.shifted_broker().await;
    let id = h.unique("calendar-reconcile");
    b.register_limit(
        &id,
        Limits::default()
            .tokens_per_day(1_000)
            .cost_micro_usd_per_day(100)
            .cost_micro_usd_per_month(10_000),
    )
    .expect("valid");
    stand(&shift, utc(2027, 6, 15) + 3_600_000);
    let mut p = permit(
        &b,
        &id,
        AcquireOptions::default().tokens(100, 200).cost_micro_usd(60),
    )
    .await;
    assert_eq!(usage(&b, &id, Dimension::TokensPerDay).await, 300);
    assert_eq!(usage(&b, &id, Dimension::CostMicroUsdPerDay).await, 60);
    assert_eq!(usage(&b, &id, Dimension::CostMicroUsdPerMonth).await, 60);
    assert_eq!(
        refused_by(&b, &id, AcquireOptions::default().cost_micro_usd(50)).await,
        Some(Dimension::CostMicroUsdPerDay)
    );
    // Down: tokens and cost freed.
    p.reconcile(Reserved {
        requests: 1,
        input_tokens: 100,
        output_tokens: 20,
        cost_micro_usd: 30,
    })
    .await
    .expect("reconciled");
    assert_eq!(usage(&b, &id, Dimension::TokensPerDay).await, 120);
    assert_eq!(usage(&b, &id, Dimension::CostMicroUsdPerDay).await, 30);
    assert!(admits(&b, &id, AcquireOptions::default().cost_micro_usd(50)).await);
    // Up: the billed cost may exceed the estimate (the budget overruns by
    // at most the estimate error; the next call is refused).
    let mut q = permit(&b, &id, AcquireOptions::default().cost_micro_usd(10)).await;
    reconcile_cost(&mut q, 40).await;
    assert_eq!(usage(&b, &id, Dimension::CostMicroUsdPerDay).await, 120);
    assert_eq!(usage(&b, &id, Dimension::CostMicroUsdPerMonth).await, 120);
    assert_eq!(
        refused_by(&b, &id, AcquireOptions::default().cost_micro_usd(1)).await,
        Some(Dimension::CostMicroUsdPerDay)
    );
    // No cost, no refusal by a cost dimension.
    assert!(admits(&b, &id, AcquireOptions::default().tokens(1, 0)).await);
    // More than the budget itself: the "never fits" error, at once.
    assert_never_fits(&b, &id, AcquireOptions::default().cost_micro_usd(101), 101, 100).await;
}

/// A grant made before midnight and reconciled after it does not touch the
/// new day's count (the old day's count is gone with its period).
pub async fn calendar_reconcile_after_the_boundary_leaves_the_new_period<H: Harness>(h: &H) {
    let (b, shift) = h.shifted_broker().await;
    let id = h.unique("calendar-late-reconcile");
    b.register_limit(&id, Limits::default().cost_micro_usd_per_day(1_000))
        .expect("valid");
    let midnight = utc(2027, 6, 16);
    // Real time crosses midnight: a jump would re-date the grant too.
    stand(&shift, midnight - AHEAD.as_millis() as u64);
    let mut old = permit(&b, &id, AcquireOptions::default().cost_micro_usd(100)).await;
    assert_eq!(
        resets_at(&b, &id, Dimension::CostMicroUsdPerDay).await,
        Some(midnight)
    );
    tokio::time::sleep(AHEAD + Duration::from_millis(500)).await;
    assert_eq!(
        usage(&b, &id, Dimension::CostMicroUsdPerDay).await,
        0,
        "a new day"
    );
    let mut new = permit(&b, &id, AcquireOptions::default().cost_micro_usd(10)).await;
    reconcile_cost(&mut old, 900).await;
    assert_eq!(
        usage(&b, &id, Dimension::CostMicroUsdPerDay).await,
        10,
        "up: untouched"
    );
    reconcile_cost(&mut old, 0).await;
    assert_eq!(
        usage(&b, &id, Dimension::CostMicroUsdPerDay).await,
        10,
        "down: untouched"
    );
    reconcile_cost(&mut new, 15).await;
    assert_eq!(
        usage(&b, &id, Dimension::CostMicroUsdPerDay).await,
        15,
        "its own period: corrected"
    );
}

/// A calendar dimension and a sliding one on one resource reserve all or
/// nothing: a refusal by either consumes nothing on the other.
pub async fn calendar_and_sliding_dimensions_are_all_or_nothing<H: Harness>(h: &H) {
    let (b, shift) = h.shifted_broker().await;
    let id = h.unique("calendar-atomic");
    b.register_limit(&id, Limits::default().requests_per_minute(3).tokens_per_day(100))
        .expect("valid");
    stand(&shift, utc(2027, 6, 15) + 3_600_000);
    assert!(admits(&b, &id, AcquireOptions::default().tokens(50, 0)).await);
    assert_eq!(
        refused_by(&b, &id, AcquireOptions::default().tokens(60, 0)).await,
        Some(Dimension::TokensPerDay)
    );
    assert_eq!(
        usage(&b, &id, Dimension::RequestsPerMinute).await,
        1,
        "the day's refusal took no request"
    );
    assert!(admits(&b, &id, AcquireOptions::default().tokens(10, 0)).await);
    assert!(admits(&b, &id, AcquireOptions::default().tokens(10, 0)).await);
    assert_eq!(
        refused_by(&b, &id, AcquireOptions::default().tokens(10, 0)).await,
        Some(Dimension::RequestsPerMinute)
    );
    assert_eq!(
        usage(&b, &id, Dimension::TokensPerDay).await,
        70,
        "the minute's refusal took no tokens"
    );
}
