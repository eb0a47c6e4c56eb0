//! GCRA (generic cell rate algorithm), the continuous-refill token bucket.
//!
//! State is one number, the theoretical arrival time `tat` (nanoseconds).
//! With emission interval `T = ceil(W / N)` and capacity `C` (burst), a demand
//! of `n` units at `now` is admitted iff
//! `max(tat, now) + n·T − now ≤ C·T`, and then `tat = max(tat, now) + n·T`.
//! For `n = 1` this is the textbook virtual-scheduling test
//! `tat − (C−1)·T ≤ now` (ITU-T I.371).
//!
//! Bound: over any interval of length `d` at most `C + d / T` units are
//! admitted; since `T` is rounded up to whole nanoseconds the long-run rate is
//! never above `N / W`. The wait returned on a denial is exact: the same demand
//! is admitted at `now + wait` and denied one nanosecond earlier (absent other
//! traffic).

use crate::limits::RateSpec;
use crate::units::UnitsDelta;

/// `n · T` in nanoseconds, saturating.
#[inline]
pub(crate) fn increment(spec: &RateSpec, units: u64) -> u64 {
    units.saturating_mul(spec.emission_ns)
}

/// `C · T` in nanoseconds for a capacity already scaled by the caller's
/// ceiling.
#[inline]
pub(crate) fn tolerance(spec: &RateSpec, capacity: u64) -> u64 {
    capacity.saturating_mul(spec.emission_ns)
}

/// The earliest time (≥ `now`) at which `units` fit, given `tat`.
#[inline]
pub(crate) fn earliest(tat: u64, now: u64, inc: u64, tol: u64) -> u64 {
    tat.max(now).saturating_add(inc).saturating_sub(tol).max(now)
}

/// Checks `units` at `now`: `Ok(new_tat)` to store, or `Err(wait_ns)`.
#[inline]
pub(crate) fn check(spec: &RateSpec, tat: u64, now: u64, units: u64, capacity: u64) -> Result<u64, u64> {
    if units == 0 {
        return Ok(tat);
    }
    admit(tat, now, increment(spec, units), tolerance(spec, capacity))
}

/// The GCRA test itself, with the increment `n·T` ([`increment`], `n > 0`)
/// and the tolerance `C·T` ([`tolerance`]) already computed:
/// `Ok(new_tat)` to store, or `Err(wait_ns)`. The one place of this
/// arithmetic: [`check`] and the memory backend's hot paths, which hoist
/// or precompute `inc` and `tol`, all call it.
#[inline(always)]
pub(crate) fn admit(tat: u64, now: u64, inc: u64, tol: u64) -> Result<u64, u64> {
    let new_tat = tat.max(now).saturating_add(inc);
    if new_tat - now <= tol {
        Ok(new_tat)
    } else {
        Err(new_tat - tol - now)
    }
}

/// The state after booking `units` to start at `start` (≥ the earliest time).
#[inline]
pub(crate) fn book(spec: &RateSpec, tat: u64, start: u64, units: u64) -> u64 {
    if units == 0 {
        return tat;
    }
    tat.max(start).saturating_add(increment(spec, units))
}

/// The highest `tat` a correction leaves: one below `u64::MAX`, which the
/// memory backend's lock-free cell keeps for a retired state.
pub(crate) const PINNED: u64 = u64::MAX - 1;

/// Applies a correction of `delta` units (up: more was used than reserved;
/// down: a refund). An addition saturates at [`PINNED`] ("full" for as long
/// as time can tell, never wrapped); a `tat` pinned there has lost its exact
/// figure, so a refund leaves it pinned rather than take back units that may
/// still be held (a holder cannot erase its usage by overflowing it first).
/// The units added were used at the grant, `at`: a bucket that had drained
/// by then (a grant of nothing) counts them from `at`, as a grant would.
#[inline]
pub(crate) fn adjust(spec: &RateSpec, tat: u64, at: u64, delta: UnitsDelta) -> u64 {
    let d = increment(spec, delta.magnitude());
    match delta {
        UnitsDelta::Up(_) => tat.max(at).saturating_add(d).min(PINNED),
        UnitsDelta::Down(_) if tat >= PINNED => tat,
        UnitsDelta::Down(_) => tat.saturating_sub(d),
    }
}

/// Units currently "in the bucket" (used and not yet refilled).
#[inline]
pub(crate) fn used(spec: &RateSpec, tat: u64, now: u64) -> u64 {
    tat.saturating_sub(now).div_ceil(spec.emission_ns.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use proptest::prelude::*;

    fn spec(n: u64, burst: Option<u64>) -> RateSpec {
        Limits::default()
            .requests_per_second(n)
            .gcra(burst)
            .compile()
            .expect("valid")
            .rates[0]
    }

    /// Reference GCRA, textbook virtual scheduling, one cell at a time: a
    /// demand of `n` is `n` conforming cells at the same instant, all or none.
    fn reference(t: u64, c: u64, tat: u64, now: u64, n: u64) -> Option<u64> {
        let tau = (c - 1) * t;
        let mut x = tat;
        for _ in 0..n {
            if x > now + tau {
                return None;
            }
            x = x.max(now) + t;
        }
        Some(x)
    }

    #[test]
    fn burst_then_paced() {
        let s = spec(10, Some(3));
        let now = 1_000_000_000;
        let mut tat = 0;
        for _ in 0..3 {
            tat = check(&s, tat, now, 1, s.capacity).expect("burst");
        }
        let wait = check(&s, tat, now, 1, s.capacity).unwrap_err();
        assert_eq!(wait, 100_000_000);
        assert!(check(&s, tat, now + wait - 1, 1, s.capacity).is_err());
        assert!(check(&s, tat, now + wait, 1, s.capacity).is_ok());
    }

    proptest! {
        #[test]
        fn matches_reference_and_waits_are_exact(
            n in 1u64..2_000,
            burst in 1u64..50,
            steps in proptest::collection::vec((0u64..400_000_000, 1u64..5), 1..200),
        ) {
            let s = spec(n, Some(burst));
            let mut now = 1_000_000_000u64;
            let mut tat = 0u64;
            let mut rtat = 0u64;
            for (gap, units) in steps {
                now += gap;
                let ours = check(&s, tat, now, units, s.capacity);
                let theirs = reference(s.emission_ns, s.capacity, rtat, now, units);
                prop_assert_eq!(ours.ok(), theirs);
                match ours {
                    Ok(t) => { tat = t; rtat = t; }
                    Err(wait) => {
                        if units <= s.capacity {
                            prop_assert!(check(&s, tat, now + wait, units, s.capacity).is_ok());
                            prop_assert!(wait == 0 || check(&s, tat, now + wait - 1, units, s.capacity).is_err());
                        }
                    }
                }
            }
        }

        #[test]
        fn never_more_than_burst_plus_rate(
            n in 1u64..500,
            burst in 1u64..20,
            gaps in proptest::collection::vec(0u64..50_000_000, 10..400),
        ) {
            let s = spec(n, Some(burst));
            let mut now = 1_000_000_000u64;
            let start = now;
            let mut tat = 0;
            let mut admitted = 0u64;
            for gap in gaps {
                now += gap;
                if let Ok(t) = check(&s, tat, now, 1, s.capacity) { tat = t; admitted += 1; }
            }
            let bound = s.capacity + (now - start) / s.emission_ns;
            prop_assert!(admitted <= bound, "admitted {} > bound {}", admitted, bound);
        }
    }
}
