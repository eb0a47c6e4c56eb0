//! The specialised grant of a locked resource ([`LockedState::grant_at_once`])
//! against the generic decision it short-cuts: driven with the same
//! operations, step by step, two states give the same answers (grants,
//! denials with their exact waits, leases) and end in the same state
//! (buckets, windows, leases, counts) after every step — acquisitions,
//! releases, reconciles, usage reads and changes of limits included.

use super::locked::DimState;
use super::*;
use crate::clock::ManualClock;
use crate::limits::Dimension;
use crate::limits::Limits;
use crate::ppm::PPM;
use futures::FutureExt;
use proptest::prelude::*;

/// The shapes a locked resource takes: several rates, with and without
/// concurrency, both algorithms, and one with a calendar dimension (never
/// specialised).
fn shapes() -> Vec<Limits> {
    let rpm_tpm = Limits::default().requests_per_minute(6).tokens_per_minute(1_500);
    vec![
        rpm_tpm.clone().max_concurrent_requests(3),
        rpm_tpm.clone().max_concurrent_requests(3).gcra(None),
        rpm_tpm.clone(),
        rpm_tpm.clone().gcra(Some(2)),
        Limits::default()
            .requests_per_second(2)
            .input_tokens_per_minute(900)
            .output_tokens_per_minute(700)
            .max_concurrent_requests(2),
        Limits::default()
            .requests_per_second(3)
            .max_concurrent_requests(1)
            .gcra(None),
        rpm_tpm.clone().requests_per_day(20).max_concurrent_requests(2),
    ]
}

fn spec(i: usize) -> Arc<LimitSpec> {
    let shapes = shapes();
    Arc::new(shapes[i % shapes.len()].clone().compile().expect("valid"))
}

impl LockedState {
    /// The reference: the generic decision alone, as before the
    /// specialised grant existed.
    fn acquire_held_reference(&mut self, now: u64, demand: &Demand) -> Held {
        let now = self.monotonic(now);
        self.acquire_held_generic(now, demand)
    }

    /// Everything that is state (the limits aside, shared by both).
    fn assert_same(&self, other: &Self, step: usize) {
        assert_eq!(self.dims, other.dims, "dimensions after step {step}");
        assert_eq!(self.cals, other.cals, "calendars after step {step}");
        assert_eq!(self.leases, other.leases, "leases after step {step}");
        assert_eq!(
            (self.allowed, self.denied, self.high),
            (other.allowed, other.denied, other.high),
            "counts after step {step}"
        );
    }
}

/// The grant a [`Held`] answer stands for (what a permit keeps).
fn grant_of(held: Held, demand: &Demand) -> Option<Grant> {
    match held.into_compact(demand).into_decision(demand) {
        Decision::Granted(g) => Some(g),
        Decision::Denied(_) => None,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        requests: u64,
        input: u64,
        output: u64,
        lease: bool,
        batch: bool,
        book: bool,
    },
    /// Releases the `n`-th grant kept (modulo), if any.
    Release(usize),
    /// Corrects the `n`-th grant kept to these tokens.
    Reconcile(usize, u64, u64),
    Advance(u64),
    Usage,
    /// Changes the limits to shape `n`.
    Reshape(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..3, 0u64..500, 0u64..500, any::<bool>(), 0u8..4, 0u8..4).prop_map(
            |(requests, input, output, lease, batch, book)| Op::Acquire {
                requests,
                input,
                output,
                lease: lease || requests > 0,
                batch: batch == 0,
                book: book == 0,
            }
        ),
        2 => any::<usize>().prop_map(Op::Release),
        1 => (any::<usize>(), 0u64..600, 0u64..600).prop_map(|(i, a, b)| Op::Reconcile(i, a, b)),
        3 => prop_oneof![0u64..2_000_000_000, 0u64..50_000_000_000].prop_map(Op::Advance),
        1 => Just(Op::Usage),
        1 => any::<usize>().prop_map(Op::Reshape),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Step by step, the specialised grant and the generic decision agree
    /// on every answer and leave the same state.
    #[test]
    fn the_specialised_grant_agrees_with_the_generic_decision(
        first in 0usize..7,
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        let mut a = LockedState::new(spec(first), clock.clone());
        let mut b = LockedState::new(spec(first), clock.clone());
        let mut now = 3_000_000_000u64;
        let mut kept: Vec<Grant> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Acquire { requests, input, output, lease, batch, book } => {
                    let demand = Demand {
                        requests,
                        input_tokens: input,
                        output_tokens: output,
                        lease,
                        ceiling_ppm: if batch { 600_000 } else { PPM },
                        book_within_ns: if book { 5_000_000_000 } else { 0 },
                        ..Demand::default()
                    };
                    let got = a.acquire_held(now, &demand);
                    let want = b.acquire_held_reference(now, &demand);
                    prop_assert_eq!(got, want, "step {}", step);
                    if let Some(g) = grant_of(got, &demand) {
                        kept.push(g);
                    }
                }
                Op::Release(i) if !kept.is_empty() => {
                    let g = kept.remove(i % kept.len());
                    if let Some(lease) = g.lease {
                        prop_assert_eq!(a.leases.remove(lease.0), b.leases.remove(lease.0));
                    }
                }
                Op::Reconcile(i, input, output) if !kept.is_empty() => {
                    let i = i % kept.len();
                    let actual = Reserved { input_tokens: input, output_tokens: output, ..kept[i].reserved };
                    a.reconcile(now, &kept[i], &actual);
                    b.reconcile(now, &kept[i], &actual);
                    kept[i].reserved = actual;
                }
                Op::Advance(gap) => now += gap,
                Op::Usage => prop_assert_eq!(a.usage(now), b.usage(now)),
                Op::Reshape(i) => {
                    let to = spec(i);
                    a.reshape(Arc::clone(&to), now);
                    b.reshape(to, now);
                }
                Op::Release(_) | Op::Reconcile(..) => {}
            }
            clock.set(now);
            a.assert_same(&b, step);
        }
    }
}

/// The specialised grant is taken where it should be: a plain grant and
/// a leased one come back as such, and a full concurrency limit, a batch
/// caller or a calendar dimension go to the generic decision (which gives
/// the same answers, see above).
#[test]
fn the_specialised_grant_answers_the_common_demands() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let mut st = LockedState::new(spec(0), Arc::clone(&clock));
    let one = Demand {
        input_tokens: 100,
        output_tokens: 200,
        ..Demand::default()
    };
    let now = 1_000_000_000;
    assert_eq!(st.grant_at_once(now, &Demand { lease: false, ..one }), Some(None));
    let leased = |st: &mut LockedState| st.grant_at_once(now, &one);
    assert!(matches!(leased(&mut st), Some(Some(_))));
    assert!(matches!(leased(&mut st), Some(Some(_))));
    assert!(matches!(leased(&mut st), Some(Some(_))));
    assert_eq!(leased(&mut st), None, "the concurrency limit is full");
    let batch = Demand {
        ceiling_ppm: PPM / 2,
        lease: false,
        ..one
    };
    assert_eq!(st.grant_at_once(now, &batch), None, "a batch caller");
    let mut cal = LockedState::new(spec(6), clock);
    assert_eq!(cal.grant_at_once(now, &one), None, "a calendar dimension");
}

/// Threads acquiring and releasing on a locked resource with two rates and
/// a concurrency limit (the specialised grant): never more holders than the
/// limit, never more than the rates admit at one instant, and the counts
/// and usage are exact.
#[test]
fn the_specialised_grant_is_exact_under_threads() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const THREADS: u64 = 4;
    const EACH: u64 = 2_000;
    const RPM: u64 = 3_000;
    const TOKENS: u64 = 300;
    const CONCURRENT: u64 = 2;
    for limits in [
        Limits::default()
            .requests_per_minute(RPM)
            .tokens_per_minute(RPM * TOKENS)
            .max_concurrent_requests(CONCURRENT),
        Limits::default()
            .requests_per_minute(RPM)
            .tokens_per_minute(RPM * TOKENS)
            .max_concurrent_requests(CONCURRENT)
            .gcra(None),
    ] {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        let b = MemoryBackend::with_clock(clock);
        let h = b
            .attach("r", Arc::new(limits.clone().compile().unwrap()))
            .unwrap();
        let demand = Demand {
            input_tokens: 100,
            output_tokens: TOKENS - 100,
            ..Demand::default()
        };
        let holders = AtomicU64::new(0);
        let granted: u64 = std::thread::scope(|s| {
            let run = || {
                s.spawn(|| {
                    let mut n = 0;
                    for _ in 0..EACH {
                        if let Decision::Granted(g) = b.acquire_now(&h, &demand) {
                            let held = holders.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(held <= CONCURRENT, "{held} holders");
                            n += 1;
                            holders.fetch_sub(1, Ordering::SeqCst);
                            b.release_detached(&h, g);
                        }
                    }
                    n
                })
            };
            let threads: Vec<_> = (0..THREADS).map(|_| run()).collect();
            threads.into_iter().map(|t| t.join().expect("thread")).sum()
        });
        assert!(granted <= RPM, "{limits:?}: {granted}");
        assert!(granted > 0, "{limits:?}");
        let c = b.counts(&h);
        assert_eq!(
            (c.allowed, c.allowed + c.denied),
            (granted, THREADS * EACH),
            "{limits:?}"
        );
        let u = b.usage(&h).now_or_never().unwrap().unwrap();
        assert_eq!(
            u.dimensions,
            vec![
                (Dimension::RequestsPerMinute, granted),
                (Dimension::TokensPerMinute, granted * TOKENS)
            ],
            "{limits:?}"
        );
        assert_eq!(u.leases, 0, "{limits:?}");
    }
}

/// A spec built by hand whose limits say `gcra` but that holds a window
/// dimension: the bucket pass puts back what it stored and leaves the
/// demand to the generic decision.
#[test]
fn a_window_among_buckets_goes_to_the_generic_decision() {
    let mut mixed = (*spec(1)).clone();
    mixed.rates[1].algorithm = Algorithm::Window;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let mut st = LockedState::new(Arc::new(mixed), clock);
    assert!(matches!(st.dims[1], DimState::Window(_)));
    let before = st.dims.clone();
    let one = Demand {
        input_tokens: 10,
        ..Demand::default()
    };
    assert_eq!(st.grant_at_once(1_000_000_000, &one), None);
    assert_eq!(st.dims, before, "the bucket's TAT put back");
    assert!(matches!(
        st.acquire_held(1_000_000_000, &one),
        Held::Leased { .. }
    ));
}

/// The mirror case: limits that say `window` holding a bucket (a spec built
/// by hand) leave the demand to the generic decision, nothing stored.
#[test]
fn a_bucket_among_windows_goes_to_the_generic_decision() {
    let mut mixed = (*spec(0)).clone();
    mixed.rates[1].algorithm = Algorithm::Gcra;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let mut st = LockedState::new(Arc::new(mixed), clock);
    assert!(matches!(st.dims[1], DimState::Gcra { .. }));
    let one = Demand {
        input_tokens: 10,
        ..Demand::default()
    };
    assert_eq!(st.grant_at_once(1_000_000_000, &one), None);
    assert_eq!(st.usage(1_000_000_000).dimensions[0].1, 0, "nothing counted");
    assert!(matches!(
        st.acquire_held(1_000_000_000, &one),
        Held::Leased { .. }
    ));
    assert_eq!(st.usage(1_000_000_000).dimensions[0].1, 1);
}
