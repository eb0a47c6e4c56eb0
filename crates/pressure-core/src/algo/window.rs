//! The strict sliding window.
//!
//! Time is cut into sub-windows of length `g = ceil(W / S)` (S =
//! [`SUB_WINDOWS`]) aligned on multiples of `g`. A demand at `now`, in
//! sub-window `k = now / g`, is admitted iff the units already admitted in
//! sub-windows `k−S ..= k` plus the demand do not exceed `N`.
//!
//! Guarantee: any interval of length `W` overlaps at most `S + 1`
//! consecutive sub-windows, and the last admission inside it counted all of
//! them, so **no interval of length W ever holds more than N units**.
//! Utilization: under saturation the window admits `N` per `S + 1`
//! sub-windows, i.e. at least `S / (S + 1)` (96.7 %) of `N` per `W`.
//! The wait on a denial is exact: the time at which enough old sub-windows
//! have left the `S + 1` span for the demand to fit.

use crate::limits::{RateSpec, SUB_WINDOWS};
use std::collections::VecDeque;

/// Units admitted per sub-window, oldest first; only non-empty sub-windows
/// are stored, so an idle resource costs no memory beyond the struct.
///
/// A state is counted against one sub-window length (`spec.sub_window_ns`)
/// for its whole life; it remembers the last sub-window it saw, so the
/// common call within the same sub-window costs no 64-bit division.
#[derive(Debug, Clone, Default)]
pub(crate) struct WindowState {
    buckets: VecDeque<(u64, u64)>,
    sum: u64,
    /// The last sub-window seen: its index `k` and its start `k · g` (a
    /// cache; `(0, 0)` is sub-window 0, also correct).
    seen: (u64, u64),
}

impl PartialEq for WindowState {
    /// The counted units; the cache of the last sub-window is not state.
    fn eq(&self, other: &Self) -> bool {
        self.buckets == other.buckets && self.sum == other.sum
    }
}

impl Eq for WindowState {}

impl WindowState {
    /// The sub-window index of `now`: the cached one while `now` stays in
    /// it, one division when it moves.
    #[inline(always)]
    fn index(&mut self, spec: &RateSpec, now: u64) -> u64 {
        let (k, start) = self.seen;
        if now >= start && now - start < spec.sub_window_ns {
            return k;
        }
        let k = now / spec.sub_window_ns;
        self.seen = (k, k * spec.sub_window_ns);
        k
    }

    /// Drops sub-windows that no longer count at `now`.
    #[inline]
    pub(crate) fn evict(&mut self, spec: &RateSpec, now: u64) {
        let k = self.index(spec, now);
        while let Some(&(idx, count)) = self.buckets.front() {
            if idx + SUB_WINDOWS < k {
                self.sum -= count;
                self.buckets.pop_front();
            } else {
                break;
            }
        }
    }

    /// Units counted at `now` (call [`WindowState::evict`] first).
    pub(crate) fn sum(&self) -> u64 {
        self.sum
    }

    /// The oldest sub-window that holds units (call [`WindowState::evict`]
    /// first): with the window full, the one whose departure frees the next
    /// unit.
    pub(crate) fn oldest_counted(&self) -> Option<u64> {
        self.buckets
            .iter()
            .find(|&&(_, count)| count > 0)
            .map(|&(idx, _)| idx)
    }

    /// Whether nothing is counted any more, so the state can be dropped.
    pub(crate) fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Checks `units` against `limit` at `now` (after eviction):
    /// `Ok(())` or `Err(wait_ns)`.
    pub(crate) fn check(&self, spec: &RateSpec, now: u64, units: u64, limit: u64) -> Result<(), u64> {
        if units == 0 || self.sum.saturating_add(units) <= limit {
            return Ok(());
        }
        if units > limit {
            return Err(spec.window_ns);
        }
        let need = self.sum + units - limit;
        let mut freed = 0;
        for &(idx, count) in &self.buckets {
            freed += count;
            if freed >= need {
                let at = (idx + SUB_WINDOWS + 1) * spec.sub_window_ns;
                return Err(at.saturating_sub(now).max(1));
            }
        }
        Err(spec.window_ns)
    }

    /// Counts `units` admitted at `now`.
    #[inline]
    pub(crate) fn commit(&mut self, spec: &RateSpec, now: u64, units: u64) {
        if units == 0 {
            return;
        }
        let k = self.index(spec, now);
        self.sum += units;
        match self.buckets.back_mut() {
            Some((idx, count)) if *idx == k => *count += units,
            _ => self.buckets.push_back((k, units)),
        }
    }

    /// Corrects the units admitted at `at` by `delta` (reconcile). A refund
    /// never takes more than the sub-window holds; a correction for a
    /// sub-window that has left the window changes nothing.
    pub(crate) fn adjust(&mut self, spec: &RateSpec, now: u64, at: u64, delta: i64) {
        self.evict(spec, now);
        let k_at = at / spec.sub_window_ns;
        let k_now = now / spec.sub_window_ns;
        if k_at + SUB_WINDOWS < k_now {
            return;
        }
        let pos = self.buckets.iter().position(|&(idx, _)| idx >= k_at);
        match pos {
            Some(p) if self.buckets[p].0 == k_at => {
                let c = &mut self.buckets[p].1;
                if delta >= 0 {
                    *c += delta.unsigned_abs();
                    self.sum += delta.unsigned_abs();
                } else {
                    let take = (*c).min(delta.unsigned_abs());
                    *c -= take;
                    self.sum -= take;
                }
            }
            _ if delta > 0 => {
                let p = pos.unwrap_or(self.buckets.len());
                self.buckets.insert(p, (k_at, delta.unsigned_abs()));
                self.sum += delta.unsigned_abs();
            }
            _ => {}
        }
    }

    /// Tries to admit `units` at `now` in one step (evict, check, commit):
    /// the reference the tests compare the backends' split steps with.
    #[cfg(test)]
    pub(crate) fn try_admit(&mut self, spec: &RateSpec, now: u64, units: u64, limit: u64) -> Result<(), u64> {
        self.evict(spec, now);
        self.check(spec, now, units, limit)?;
        self.commit(spec, now, units);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use proptest::prelude::*;

    fn spec(n: u64) -> RateSpec {
        Limits::default()
            .requests_per_second(n)
            .compile()
            .expect("valid")
            .rates[0]
    }

    /// Max units in any half-open interval [t, t + w) over a sorted log.
    fn max_in_any_window(log: &[(u64, u64)], w: u64) -> u64 {
        let mut best = 0;
        let mut sum = 0;
        let mut lo = 0;
        for hi in 0..log.len() {
            sum += log[hi].1;
            while log[hi].0 - log[lo].0 >= w {
                sum -= log[lo].1;
                lo += 1;
            }
            best = best.max(sum);
        }
        best
    }

    #[test]
    fn denial_wait_is_exact() {
        let s = spec(10);
        let mut st = WindowState::default();
        let now = 5_000_000_000;
        for _ in 0..10 {
            st.try_admit(&s, now, 1, 10).expect("fits");
        }
        let wait = st.try_admit(&s, now, 1, 10).unwrap_err();
        assert!(st.clone().try_admit(&s, now + wait - 1, 1, 10).is_err());
        assert!(st.try_admit(&s, now + wait, 1, 10).is_ok());
        assert!(wait <= s.window_ns + s.sub_window_ns);
    }

    #[test]
    fn the_cached_sub_window_follows_the_clock_both_ways() {
        let s = spec(30);
        let g = s.sub_window_ns;
        let mut st = WindowState::default();
        for now in [5 * g, 5 * g + 1, 6 * g - 1, 6 * g, 3 * g, 40 * g - 1, 0] {
            assert_eq!(st.index(&s, now), now / g, "now = {now}");
        }
    }

    #[test]
    fn reconcile_moves_the_sum_both_ways() {
        let s = spec(100);
        let mut st = WindowState::default();
        st.try_admit(&s, 1_000, 10, 100).expect("fits");
        st.adjust(&s, 2_000, 1_000, 5);
        assert_eq!(st.sum(), 15);
        st.adjust(&s, 2_000, 1_000, -20);
        assert_eq!(st.sum(), 0);
    }

    proptest! {
        #[test]
        fn never_more_than_n_in_any_window(
            n in 1u64..200,
            arrivals in proptest::collection::vec((0u64..80_000_000, 1u64..4), 1..600),
        ) {
            let s = spec(n);
            let mut st = WindowState::default();
            let mut now = 1_000_000_000u64;
            let mut log = Vec::new();
            for (gap, units) in arrivals {
                now += gap;
                if units <= n && st.try_admit(&s, now, units, n).is_ok() {
                    log.push((now, units));
                }
            }
            prop_assert!(max_in_any_window(&log, s.window_ns) <= n);
        }

        #[test]
        fn saturation_uses_at_least_95_percent(
            n in 20u64..2_000,
            step in 1_000_000u64..20_000_000,
            windows in 3u64..8,
        ) {
            // Offered load far above N: every `step` ns a burst of N arrivals.
            let s = spec(n);
            let mut st = WindowState::default();
            let start = 1_000_000_000u64;
            let end = start + windows * s.window_ns;
            let mut now = start;
            let mut admitted = 0u64;
            // Skip the first window (its initial burst inflates the figure).
            let measure_from = start + s.window_ns;
            while now < end {
                for _ in 0..n {
                    if st.try_admit(&s, now, 1, n).is_ok() {
                        if now >= measure_from { admitted += 1; }
                    } else { break; }
                }
                now += step;
            }
            let span = (end - measure_from) as f64 / s.window_ns as f64;
            let utilization = admitted as f64 / (n as f64 * span);
            prop_assert!(utilization >= 0.95, "utilization {utilization}");
        }
    }
}
