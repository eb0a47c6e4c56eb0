//! Reconcile over the whole `u64` range on every memory layout (the
//! lock-free `gcra` word, the lock-free window, the locked state with rates
//! of either algorithm, a calendar budget): a correction is the exact
//! difference of two counts ([`UnitsDelta`]), additions saturate ("full",
//! never wrapped) and a count pinned at its ceiling is not refunded, so no
//! holder can lower the usage below what it holds — in particular not by
//! reconciling `u64::MAX` (read as `−1` when cast to `i64`) or `2^63` twice.

use super::*;
use crate::clock::ManualClock;
use crate::limits::Dimension;
use crate::limits::Limits;
use futures::FutureExt;
use proptest::prelude::*;

const LIMIT: u64 = 1_000;
const S: u64 = 1_000_000_000;

fn now<T>(f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().expect("memory backend is synchronous")
}

/// The layouts, each counting tokens against [`LIMIT`], and the dimension
/// read back.
fn shapes() -> Vec<(&'static str, Limits, Dimension)> {
    let tpm = Limits::default().tokens_per_minute(LIMIT);
    vec![
        ("fast window", tpm.clone(), Dimension::TokensPerMinute),
        ("fast gcra", tpm.clone().gcra(None), Dimension::TokensPerMinute),
        (
            "locked window",
            tpm.clone().requests_per_minute(1_000_000),
            Dimension::TokensPerMinute,
        ),
        (
            "locked gcra",
            tpm.clone().requests_per_minute(1_000_000).gcra(None),
            Dimension::TokensPerMinute,
        ),
        (
            "calendar",
            Limits::default().tokens_per_day(LIMIT),
            Dimension::TokensPerDay,
        ),
    ]
}

/// A backend on a frozen clock (noon UTC, far from a day's boundary) and a
/// handle of `limits`.
fn attach(limits: &Limits) -> (MemoryBackend, MemoryHandle) {
    let clock = Arc::new(ManualClock::new(S));
    clock.set_unix_nanos((20_000 * 86_400 + 43_200) * S);
    let b = MemoryBackend::with_clock(clock);
    let h = b
        .attach("r", Arc::new(limits.clone().compile().expect("valid")))
        .expect("attach");
    (b, h)
}

fn used(b: &MemoryBackend, h: &MemoryHandle, dim: Dimension) -> u64 {
    let u = now(b.usage(h)).expect("usage");
    u.dimensions
        .iter()
        .find(|(d, _)| *d == dim)
        .map_or(0, |(_, n)| *n)
}

fn tokens(n: u64) -> Reserved {
    Reserved {
        requests: 1,
        input_tokens: n,
        output_tokens: 0,
        cost_micro_usd: 0,
    }
}

fn acquire(b: &MemoryBackend, h: &MemoryHandle, input: u64) -> Option<Grant> {
    let d = Demand {
        input_tokens: input,
        lease: false,
        ..Demand::default()
    };
    match now(b.acquire(h, &d)).expect("acquire") {
        Decision::Granted(g) => Some(g),
        Decision::Denied(_) => None,
    }
}

/// What a permit does: corrects the backend, then holds `actual`.
fn reconcile(b: &MemoryBackend, h: &MemoryHandle, grant: &mut Grant, actual: u64) {
    let actual = tokens(actual);
    now(b.reconcile(h, grant, &actual)).expect("reconcile");
    grant.reserved = actual;
}

/// The defect: `u64::MAX` reconciled read as a refund of one (usage to
/// zero), and `2^63` twice wrapped to zero; both now pin the count full.
#[test]
fn a_huge_reconcile_pins_usage_full_on_every_layout() {
    for (name, limits, dim) in shapes() {
        for steps in [vec![u64::MAX], vec![1 << 63, 1 << 63], vec![u64::MAX, 1 << 63]] {
            let (b, h) = attach(&limits);
            let mut g = acquire(&b, &h, 100).expect("granted");
            let mut other = acquire(&b, &h, 50).expect("granted");
            for &s in &steps {
                reconcile(&b, &h, &mut g, s);
                let u = used(&b, &h, dim);
                assert!(u >= LIMIT, "{name} {steps:?}: usage {u} after reconciling {s}");
                assert!(
                    acquire(&b, &h, 1).is_none(),
                    "{name} {steps:?}: admitted when full"
                );
            }
            // The other holder's refund leaves the pinned count full.
            reconcile(&b, &h, &mut other, 0);
            assert!(used(&b, &h, dim) >= LIMIT, "{name} {steps:?}");
        }
    }
}

/// A correction below the ceiling is exact both ways: up by `u64::MAX − n`
/// is never a refund, and a refund never takes more than was counted.
#[test]
fn corrections_below_the_ceiling_are_exact() {
    for (name, limits, dim) in shapes() {
        let (b, h) = attach(&limits);
        let mut g = acquire(&b, &h, 100).expect("granted");
        let _keep = acquire(&b, &h, 40).expect("granted");
        reconcile(&b, &h, &mut g, 900);
        assert_eq!(used(&b, &h, dim), 940, "{name}");
        reconcile(&b, &h, &mut g, 0);
        assert_eq!(used(&b, &h, dim), 40, "{name}");
        reconcile(&b, &h, &mut g, 10);
        assert_eq!(used(&b, &h, dim), 50, "{name}");
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire(u64),
    Reconcile(usize, u64),
}

fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(1 << 63),
        Just((1 << 63) - 1),
        Just((1 << 63) + 1),
        0..2 * LIMIT,
        any::<u64>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..400u64).prop_map(Op::Acquire),
        (any::<usize>(), amount()).prop_map(|(i, n)| Op::Reconcile(i, n)),
    ]
}

proptest! {
    /// For any sequence of grants and reconciles (within one window and
    /// one period: the clock stands still), on every layout:
    ///
    /// * usage never drops below what was granted minus what was
    ///   reconciled down, and never below what the holders hold now, as
    ///   far as the limit (a count the holders filled reads full);
    /// * while no count came near the ceiling, usage is exactly what the
    ///   holders hold (nothing wrapped, nothing lost);
    /// * a grant of tokens is only made when what the holders hold leaves
    ///   room.
    #[test]
    fn reconcile_never_lowers_usage_below_what_is_held(ops in prop::collection::vec(op(), 1..40)) {
        for (name, limits, dim) in shapes() {
            let (b, h) = attach(&limits);
            let mut held: Vec<Grant> = Vec::new();
            let (mut granted, mut down) = (0_i128, 0_i128);
            let mut small = true;
            for (step, op) in ops.iter().enumerate() {
                let holding: i128 = held.iter().map(|g| i128::from(g.reserved.input_tokens)).sum();
                match *op {
                    Op::Acquire(n) => {
                        if let Some(g) = acquire(&b, &h, n) {
                            prop_assert!(
                                n == 0 || holding + i128::from(n) <= i128::from(LIMIT),
                                "{name} step {step}: granted {n} over {holding} held"
                            );
                            granted += i128::from(n);
                            held.push(g);
                        }
                    }
                    Op::Reconcile(_, _) if held.is_empty() => {}
                    Op::Reconcile(i, n) => {
                        let i = i % held.len();
                        let before = held[i].reserved.input_tokens;
                        down += (i128::from(before) - i128::from(n)).max(0);
                        small &= n <= 1 << 30;
                        reconcile(&b, &h, &mut held[i], n);
                    }
                }
                let holding: i128 = held.iter().map(|g| i128::from(g.reserved.input_tokens)).sum();
                let u = i128::from(used(&b, &h, dim));
                prop_assert!(u >= granted - down, "{name} step {step}: usage {u} < {granted} − {down}");
                prop_assert!(
                    u >= holding.min(i128::from(LIMIT)),
                    "{name} step {step}: usage {u} below the {holding} held"
                );
                if small {
                    prop_assert_eq!(u, holding, "{} step {}: not exact", name, step);
                }
            }
        }
    }
}
