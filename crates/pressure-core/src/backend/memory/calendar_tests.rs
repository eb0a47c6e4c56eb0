//! Unit tests of the calendar dimensions in the [`MemoryBackend`]: the
//! locked layout, on a manual wall clock standing before a day and month
//! boundary.
use super::*;
use crate::clock::ManualClock;
use crate::limits::Dimension;
use crate::limits::Limits;
use futures::FutureExt;

const S: u64 = 1_000_000_000;
/// 2028-02-29 00:00 UTC (a leap day), Unix seconds.
const LEAP_DAY: u64 = 1_835_395_200;

fn now<T>(f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().expect("memory backend is synchronous")
}

#[test]
fn a_day_admits_its_limit_then_resets_at_midnight_and_carries_over_a_change() {
    let clock = Arc::new(ManualClock::new(S));
    // One second before 2028-03-01 00:00 UTC: the end of a day and of a 29-day month.
    clock.set_unix_nanos((LEAP_DAY + 86_400 - 1) * S);
    let b = MemoryBackend::with_clock(clock.clone());
    let limits = Limits::default()
        .requests_per_day(2)
        .cost_micro_usd_per_month(1_000);
    let h = b.attach("r", Arc::new(limits.compile().unwrap())).unwrap();
    assert!(
        matches!(h.state, State::Locked(_)),
        "calendar dimensions take the locked path"
    );
    let one = Demand {
        cost_micro_usd: 10,
        ..Demand::default()
    };
    let g = match now(b.acquire(&h, &one)).unwrap() {
        Decision::Granted(g) => g,
        d => panic!("{d:?}"),
    };
    assert_eq!(g.reserved.cost_micro_usd, 10);
    assert!(matches!(now(b.acquire(&h, &one)).unwrap(), Decision::Granted(_)));
    let Decision::Denied(d) = now(b.acquire(&h, &one)).unwrap() else {
        panic!("the third of two per day is refused")
    };
    assert_eq!(
        (d.dimension, d.wait),
        (Dimension::RequestsPerDay, Duration::from_secs(1))
    );
    assert!(d.is_exact());
    let u = now(b.usage(&h)).unwrap();
    assert_eq!(
        u.dimensions,
        [
            (Dimension::RequestsPerDay, 2),
            (Dimension::CostMicroUsdPerMonth, 20)
        ]
    );
    let reset_ms = (LEAP_DAY + 86_400) * 1_000;
    assert_eq!(
        u.resets,
        [
            (Dimension::RequestsPerDay, reset_ms),
            (Dimension::CostMicroUsdPerMonth, reset_ms)
        ]
    );
    assert!(!b.at_rest(&h), "a counted day is not at rest");
    // A change of limits keeps the counts of the dimensions that remain.
    let h2 = b
        .reattach(
            "r",
            &h,
            Arc::new(limits.clone().requests_per_day(3).compile().unwrap()),
        )
        .unwrap();
    assert!(matches!(now(b.acquire(&h2, &one)).unwrap(), Decision::Granted(_)));
    assert!(matches!(now(b.acquire(&h2, &one)).unwrap(), Decision::Denied(_)));
    // Midnight (and the first of the month): everything resets, and the
    // old grant's reconcile leaves the new period alone.
    clock.advance(Duration::from_secs(1));
    assert!(b.at_rest(&h2));
    assert!(matches!(now(b.acquire(&h2, &one)).unwrap(), Decision::Granted(_)));
    let more = Reserved {
        cost_micro_usd: 500,
        ..g.reserved
    };
    now(b.reconcile(&h2, &g, &more)).unwrap();
    let u = now(b.usage(&h2)).unwrap();
    assert_eq!(
        u.dimensions,
        [
            (Dimension::RequestsPerDay, 1),
            (Dimension::CostMicroUsdPerMonth, 10)
        ]
    );
}
