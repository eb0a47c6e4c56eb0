//! The lock-free `gcra` layout ([`Fast`]): one rate dimension, no
//! concurrency, its TAT in one atomic word updated by compare-and-swap. Its
//! two acquisitions are twins: [`fast_acquire`] decides any demand
//! (booking included) through `gcra::check`, [`fast_plain`] — the measured
//! hot path — a demand without booking, with the increment and tolerance
//! hoisted out of the compare-and-swap loop. The tests at the bottom hold
//! them to the same decisions.

use super::{granted, State};
use crate::algo::gcra;
use crate::backend::{Decision, Denial};
use crate::limits::{Demand, RateSpec};
use crate::ppm::PPM;
use crate::striped::Tally;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The TAT word of a retired lock-free state: larger than any real TAT
/// (those are clamped below it), so every compare-and-swap against a value
/// read before the retirement fails.
pub(super) const RETIRED: u64 = u64::MAX;

/// The lock-free `gcra` state of one resource: its rate, what the hot path
/// reads of it precomputed, the TAT word and the counts.
#[derive(Debug)]
pub(super) struct Fast {
    pub(super) rate: RateSpec,
    /// `gcra::tolerance` at the full capacity, computed once.
    pub(super) tolerance: u64,
    /// Whether the dimension counts requests (the units of most demands).
    pub(super) per_request: bool,
    pub(super) tat: AtomicU64,
    /// Grants and denials, one stripe per thread once the resource is hot
    /// (no locked increment; see `striped`).
    pub(super) tally: Tally,
    /// Where the state went when the limits changed; published after the
    /// new cell holds the carried state, read by whoever meets [`RETIRED`].
    pub(super) moved: OnceLock<Arc<State>>,
}

impl Fast {
    /// Nothing counted yet on `rate`.
    pub(super) fn new(rate: RateSpec) -> Self {
        Self {
            rate,
            tolerance: gcra::tolerance(&rate, rate.capacity),
            per_request: rate.dimension.counts_requests(),
            tat: AtomicU64::new(0),
            tally: Tally::default(),
            moved: OnceLock::new(),
        }
    }

    /// The state this retired word moved to; waits out the few instructions
    /// between the retirement and the publication of the new cell.
    #[cold]
    pub(super) fn successor(&self) -> &State {
        let mut spins = 0u32;
        loop {
            if let Some(next) = self.moved.get() {
                return next;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The lock-free acquisition of any demand, booking included (the general
/// twin of [`fast_plain`], by `gcra::check` and `gcra::book`); `None` when
/// the word was retired (the limits changed) and the caller must follow
/// [`Fast::moved`]. Equivalence: `tests::fast_plain_is_fast_acquire`, and
/// with the locked layout `tests::fast_acquire_is_the_locked_decision`.
#[inline(always)]
pub(super) fn fast_acquire(f: &Fast, now: u64, demand: &Demand) -> Option<Decision> {
    let rate = &f.rate;
    let units = rate.units(demand);
    let cap = RateSpec::scaled(rate.capacity, demand.ceiling_ppm);
    let mut cur = f.tat.load(Ordering::Acquire);
    loop {
        if cur == RETIRED {
            return None;
        }
        let (next, delay) = match gcra::check(rate, cur, now, units, cap) {
            Ok(next) => (next.min(RETIRED - 1), 0),
            Err(wait) if demand.book_within_ns > 0 && wait <= demand.book_within_ns => {
                (gcra::book(rate, cur, now + wait, units).min(RETIRED - 1), wait)
            }
            Err(wait) => {
                if demand.count_denial {
                    f.tally.deny();
                }
                return Some(Decision::Denied(Denial::exhausted(
                    Duration::from_nanos(wait),
                    rate.dimension,
                )));
            }
        };
        if next == cur
            || f.tat
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            f.tally.allow();
            return Some(granted(now, delay, None, demand));
        }
        cur = f.tat.load(Ordering::Acquire);
    }
}

/// The fast twin of [`fast_acquire`], for a demand without booking
/// (`demand.book_within_ns == 0`): the grant is plain, so only the verdict
/// comes back; the increment and tolerance are hoisted out of the loop
/// (the tolerance precomputed for the full limit), the test itself is
/// `gcra::admit`. `None`: retired. Measured by `benches/callgrind-core.sh`
/// (`gcra_*`). Equivalence: `tests::fast_plain_is_gcra_check` and
/// `tests::fast_plain_is_fast_acquire`.
#[inline(always)]
pub(super) fn fast_plain(f: &Fast, now: u64, demand: &Demand) -> Option<Result<(), Denial>> {
    let rate = &f.rate;
    let units = if f.per_request {
        demand.requests
    } else {
        rate.units(demand)
    };
    let tol = if demand.ceiling_ppm >= PPM {
        f.tolerance
    } else {
        gcra::tolerance(rate, RateSpec::scaled(rate.capacity, demand.ceiling_ppm))
    };
    let inc = gcra::increment(rate, units);
    let mut cur = f.tat.load(Ordering::Acquire);
    loop {
        if cur == RETIRED {
            return None;
        }
        let next = if units == 0 {
            cur
        } else {
            match gcra::admit(cur, now, inc, tol) {
                Ok(new_tat) => new_tat.min(RETIRED - 1),
                Err(wait) => {
                    if demand.count_denial {
                        f.tally.deny();
                    }
                    return Some(Err(Denial::exhausted(Duration::from_nanos(wait), rate.dimension)));
                }
            }
        };
        if next == cur {
            f.tally.allow();
            return Some(Ok(()));
        }
        match f
            .tat
            .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                f.tally.allow();
                return Some(Ok(()));
            }
            Err(actual) => cur = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::locked::LockedState;
    use crate::clock::MonotonicClock;
    use crate::limits::Limits;

    fn rate(n: u64, burst: u64) -> RateSpec {
        Limits::default()
            .requests_per_second(n)
            .gcra(Some(burst))
            .compile()
            .unwrap()
            .rates[0]
    }

    /// A demand of `requests` at a ceiling of `ppm`, booking up to `book_ns`.
    fn demand(requests: u64, ppm: u32, book_ns: u64) -> Demand {
        Demand {
            requests,
            ceiling_ppm: ppm.min(PPM),
            book_within_ns: book_ns,
            ..Demand::default()
        }
    }

    proptest::proptest! {
        /// The lock-free `gcra` path (its arithmetic hoisted and
        /// precomputed) decides exactly as `gcra::check`, waits included,
        /// for any demand, ceiling and history.
        #[test]
        fn fast_plain_is_gcra_check(
            n in 1u64..1_000,
            burst in 1u64..20,
            steps in proptest::collection::vec((0u64..50_000_000, 0u64..4, 0u32..2_000_000), 1..100),
        ) {
            let spec = Limits::default().requests_per_second(n).gcra(Some(burst)).compile().unwrap();
            let rate = spec.rates[0];
            let f = Fast::new(rate);
            let mut now = 1_000_000_000u64;
            let mut tat = 0u64;
            for (gap, requests, ppm) in steps {
                now += gap;
                let demand = Demand { requests, ceiling_ppm: ppm.min(PPM), ..Demand::default() };
                let cap = RateSpec::scaled(rate.capacity, demand.ceiling_ppm);
                let want = gcra::check(&rate, tat, now, requests, cap);
                let got = fast_plain(&f, now, &demand).expect("not retired");
                match want {
                    Ok(next) => {
                        proptest::prop_assert!(got.is_ok());
                        tat = next;
                    }
                    Err(wait) => proptest::prop_assert_eq!(got.map_err(|d| d.wait), Err(Duration::from_nanos(wait))),
                }
                proptest::prop_assert_eq!(f.tat.load(Ordering::Relaxed), tat);
            }
        }
    }

    proptest::proptest! {
        /// The twins on two cells fed the same history, without booking:
        /// [`fast_plain`] and [`fast_acquire`] grant and deny alike (waits
        /// included), leave the same TAT and count the same.
        #[test]
        fn fast_plain_is_fast_acquire(
            n in 1u64..1_000,
            burst in 1u64..20,
            steps in proptest::collection::vec((0u64..50_000_000, 0u64..4, 0u32..2_000_000, proptest::bool::ANY), 1..100),
        ) {
            let r = rate(n, burst);
            let (plain, general) = (Fast::new(r), Fast::new(r));
            let mut now = 1_000_000_000u64;
            for (gap, requests, ppm, count_denial) in steps {
                now += gap;
                let d = Demand { count_denial, ..demand(requests, ppm, 0) };
                let p = fast_plain(&plain, now, &d).expect("not retired");
                let g = fast_acquire(&general, now, &d).expect("not retired");
                let p = match p {
                    Ok(()) => granted(now, 0, None, &d),
                    Err(denial) => Decision::Denied(denial),
                };
                proptest::prop_assert_eq!(p, g);
                proptest::prop_assert_eq!(plain.tat.load(Ordering::Relaxed), general.tat.load(Ordering::Relaxed));
                proptest::prop_assert_eq!(
                    (plain.tally.allowed(), plain.tally.denied()),
                    (general.tally.allowed(), general.tally.denied())
                );
            }
        }

        /// The lock-free layout and the locked one, fed the same history of one
        /// `gcra` dimension, bookings included: [`fast_acquire`] decides as
        /// [`LockedState::acquire`] (delays and waits included) and leaves the
        /// bucket holding the same units.
        #[test]
        fn fast_acquire_is_the_locked_decision(
            n in 1u64..1_000,
            burst in 1u64..20,
            steps in proptest::collection::vec((0u64..50_000_000, 0u64..4, 0u32..2_000_000, 0u64..3_000_000_000), 1..100),
        ) {
            let limits = Limits::default().requests_per_second(n).gcra(Some(burst));
            let spec = Arc::new(limits.compile().unwrap());
            let fast = Fast::new(spec.rates[0]);
            let mut locked = LockedState::new(Arc::clone(&spec), Arc::new(MonotonicClock::new()));
            let mut now = 1_000_000_000u64;
            for (gap, requests, ppm, book_ns) in steps {
                now += gap;
                let d = demand(requests, ppm, book_ns);
                let f = fast_acquire(&fast, now, &d).expect("not retired");
                proptest::prop_assert_eq!(f, locked.acquire(now, &d));
                let used = gcra::used(&spec.rates[0], fast.tat.load(Ordering::Relaxed), now);
                proptest::prop_assert_eq!(vec![(spec.rates[0].dimension, used)], locked.usage(now).dimensions);
            }
        }
    }
}
