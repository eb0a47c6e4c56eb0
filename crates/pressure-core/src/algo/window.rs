//! The strict sliding window.
//!
//! Time is cut into sub-windows of length `g = ceil(W / S)` (S =
//! [`SUB_WINDOWS`](crate::limits::SUB_WINDOWS)) aligned on multiples of `g`, and a state keeps the units
//! admitted per sub-window plus `last`, the time of its most recent
//! admission (an upper bound of it). Every unit of sub-window `j` was
//! admitted before the sub-window's end `(j + 1)·g`, and every unit counted
//! at or before `last`, so a unit admitted at `s` is certainly gone (it
//! leaves every interval of length `W` that holds the present) by both
//! `(j + 1)·g + W` and `last + W`: sub-window `j` counts at `now` iff
//! `now < min((j + 1)·g + W, last + W)` — in particular nothing counts once
//! `now ≥ last + W`. A demand is admitted iff the units counted plus the
//! demand do not exceed `N`.
//!
//! Guarantee: take any interval of length `W` and its last admission, at
//! `s*`. Every earlier admission `s` in the interval has `s > s* − W`, and
//! both its sub-window's end and the state's `last` are at or after `s`, so
//! `s*` counted it: **no interval of length W ever holds more than N
//! units**. Utilization: a sub-window counts at most `g` longer than its
//! units need, so under saturation the window admits `N` per `W + g`, i.e.
//! at least `S / (S + 1)` (96.7 %) of `N` per `W`.
//!
//! The wait on a denial is exact — the time at which enough old sub-windows
//! have left for the demand to fit, or at which everything leaves (`last +
//! W`) — and **a denial's wait is never longer than W**: a sub-window before
//! the present one ends at or before `now`, and `last ≤ now`. (A caller
//! whose clock read precedes a concurrent admission, `now < last`, gets the
//! wait capped at `W`.) So a burst that exhausts a per-minute limit in its
//! first second waits out the minute from the burst's last admission, not
//! from the end of its sub-window.

use crate::limits::RateSpec;
use crate::units::UnitsDelta;
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
    /// At or after the most recent admission counted: everything leaves at
    /// `last + W` (see the module docs).
    last: u64,
    /// The last sub-window seen: its index `k` and its start `k · g` (a
    /// cache; `(0, 0)` is sub-window 0, also correct).
    seen: (u64, u64),
}

impl PartialEq for WindowState {
    /// The counted units and when they leave; the cache of the last
    /// sub-window is not state.
    fn eq(&self, other: &Self) -> bool {
        self.buckets == other.buckets && self.sum == other.sum && self.last == other.last
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

    /// When the units of sub-window `idx` have all left: at its end + W, or
    /// when everything leaves (`last + W`), whichever comes first.
    #[inline(always)]
    fn departure(&self, spec: &RateSpec, idx: u64) -> u64 {
        let end = (idx + 1).saturating_mul(spec.sub_window_ns);
        end.min(self.last).saturating_add(spec.window_ns)
    }

    /// Drops sub-windows that no longer count at `now`: all of them once
    /// `now ≥ last + W`, else those whose end + W has passed.
    #[inline]
    pub(crate) fn evict(&mut self, spec: &RateSpec, now: u64) {
        if now >= self.last.saturating_add(spec.window_ns) {
            self.buckets.clear();
            self.sum = 0;
            return;
        }
        while let Some(&(idx, count)) = self.buckets.front() {
            if now >= self.departure(spec, idx) {
                self.buckets.pop_front();
                self.took(count);
            } else {
                break;
            }
        }
    }

    /// Takes `units` just taken out of the buckets off the sum, which is
    /// the buckets' total saturated at `u64::MAX`: exact below it, counted
    /// again from the buckets when it was pinned there (only after a
    /// reconcile of absurd size).
    #[inline]
    fn took(&mut self, units: u64) {
        if self.sum == u64::MAX {
            self.sum = self.buckets.iter().fold(0, |s, &(_, c)| s.saturating_add(c));
        } else {
            self.sum -= units;
        }
    }

    /// Units counted at `now` (call [`WindowState::evict`] first).
    pub(crate) fn sum(&self) -> u64 {
        self.sum
    }

    /// Whether nothing is counted any more, so the state can be dropped.
    pub(crate) fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Checks `units` against `limit` at `now` (after eviction):
    /// `Ok(())` or `Err(wait_ns)`, the wait at most W.
    #[inline]
    pub(crate) fn check(&self, spec: &RateSpec, now: u64, units: u64, limit: u64) -> Result<(), u64> {
        if units == 0 || self.sum.saturating_add(units) <= limit {
            return Ok(());
        }
        self.wait(spec, now, units, limit)
    }

    /// The wait of a demand [`WindowState::check`] refused.
    #[inline(never)]
    fn wait(&self, spec: &RateSpec, now: u64, units: u64, limit: u64) -> Result<(), u64> {
        if units > limit {
            return Err(spec.window_ns);
        }
        let need = self.sum.saturating_add(units) - limit;
        let mut freed: u64 = 0;
        for &(idx, count) in &self.buckets {
            freed = freed.saturating_add(count);
            if freed >= need {
                let at = self.departure(spec, idx);
                return Err(at.saturating_sub(now).clamp(1, spec.window_ns));
            }
        }
        Err(spec.window_ns)
    }

    /// Counts `units` admitted at `now`.
    #[inline]
    pub(crate) fn commit(&mut self, spec: &RateSpec, now: u64, units: u64) {
        self.commit_by(spec, now, units, now);
    }

    /// Counts `units` admitted in the sub-window of `at`, the latest of them
    /// at or before `by` (`by ≥ at`): a lock-free sub-window folded at `by`
    /// whose grants kept no time.
    #[inline]
    pub(crate) fn commit_by(&mut self, spec: &RateSpec, at: u64, units: u64, by: u64) {
        if units == 0 {
            return;
        }
        let k = self.index(spec, at);
        self.sum = self.sum.saturating_add(units);
        self.last = self.last.max(by);
        match self.buckets.back_mut() {
            Some((idx, count)) if *idx == k => *count = count.saturating_add(units),
            _ => {
                if self.buckets.capacity() == 0 {
                    // Room for one sub-window, not the default four: a
                    // resource that counts once (a tenant's single request)
                    // keeps 16 bytes, a busy one grows as usual.
                    self.buckets.reserve_exact(1);
                }
                self.buckets.push_back((k, units));
            }
        }
    }

    /// Corrects the units admitted at `at` by `delta` (reconcile). A refund
    /// never takes more than the sub-window holds; a correction for units
    /// that have left the window (`now ≥ at + W`) changes nothing. An
    /// addition was admitted at `at`, so `last` stays at or after it.
    /// Additions saturate at `u64::MAX` (the window pinned "full" until the
    /// sub-window leaves it, never wrapped); a sub-window pinned there has
    /// lost its exact figure, so a refund leaves it pinned rather than take
    /// back units that may still be held.
    pub(crate) fn adjust(&mut self, spec: &RateSpec, now: u64, at: u64, delta: UnitsDelta) {
        self.evict(spec, now);
        if delta.is_zero() || now >= at.saturating_add(spec.window_ns) {
            return;
        }
        let k_at = at / spec.sub_window_ns;
        let pos = self.buckets.iter().position(|&(idx, _)| idx >= k_at);
        match (pos, delta) {
            (Some(p), _) if self.buckets[p].0 == k_at => {
                let c = &mut self.buckets[p].1;
                match delta {
                    UnitsDelta::Up(n) => {
                        *c = c.saturating_add(n);
                        self.sum = self.sum.saturating_add(n);
                        self.last = self.last.max(at);
                    }
                    UnitsDelta::Down(_) if *c == u64::MAX => {}
                    UnitsDelta::Down(n) => {
                        let take = (*c).min(n);
                        *c -= take;
                        self.took(take);
                    }
                }
            }
            (_, UnitsDelta::Up(n)) => {
                let p = pos.unwrap_or(self.buckets.len());
                self.buckets.insert(p, (k_at, n));
                self.sum = self.sum.saturating_add(n);
                self.last = self.last.max(at);
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
        assert!(wait <= s.window_ns);
    }

    /// Issue 21: a burst inside one sub-window of a minute window (two
    /// requests in its first second) leaves a minute after its last
    /// admission, not a minute after its sub-window ends: the wait is at
    /// most W, and exact.
    #[test]
    fn a_burst_in_one_sub_window_waits_at_most_the_window() {
        let s = Limits::default()
            .requests_per_minute(2)
            .compile()
            .expect("valid")
            .rates[0];
        let w = s.window_ns;
        let mut st = WindowState::default();
        let t0 = 7 * s.sub_window_ns + 1_000;
        st.try_admit(&s, t0, 1, 2).expect("fits");
        st.try_admit(&s, t0 + 400_000_000, 1, 2).expect("fits");
        let now = t0 + 900_000_000;
        let wait = st.try_admit(&s, now, 1, 2).unwrap_err();
        assert!(wait <= w, "wait {wait} over the window {w}");
        assert_eq!(
            now + wait,
            t0 + 400_000_000 + w,
            "a window after the last admission"
        );
        assert!(st.clone().try_admit(&s, now + wait - 1, 1, 2).is_err());
        let mut later = st.clone();
        later
            .try_admit(&s, now + wait, 1, 2)
            .expect("admitted at now + wait");
        later.try_admit(&s, now + wait, 1, 2).expect("both units left");
        // A demand the oldest unit frees alone waits for that unit only.
        let mut one = WindowState::default();
        one.try_admit(&s, t0, 1, 2).expect("fits");
        one.try_admit(&s, t0 + 3 * s.sub_window_ns, 1, 2).expect("fits");
        let now = t0 + 4 * s.sub_window_ns;
        let wait = one.try_admit(&s, now, 1, 2).unwrap_err();
        assert_eq!(
            now + wait,
            8 * s.sub_window_ns + w,
            "the first sub-window's end + W"
        );
    }

    /// A caller whose clock read precedes a concurrent admission (`now <
    /// last`) still gets a wait of at most W.
    #[test]
    fn a_stale_clock_gets_at_most_the_window() {
        let s = spec(1);
        let mut st = WindowState::default();
        st.try_admit(&s, 5_000, 1, 1).expect("fits");
        assert_eq!(st.check(&s, 4_000, 1, 1), Err(s.window_ns));
    }

    #[test]
    fn a_correction_for_units_gone_changes_nothing() {
        let s = spec(100);
        let mut st = WindowState::default();
        st.try_admit(&s, 1_000, 10, 100).expect("fits");
        st.adjust(&s, 1_000 + s.window_ns, 1_000, UnitsDelta::Up(5));
        assert_eq!(st.sum(), 0);
        assert!(st.is_empty());
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
        st.adjust(&s, 2_000, 1_000, UnitsDelta::Up(5));
        assert_eq!(st.sum(), 15);
        st.adjust(&s, 2_000, 1_000, UnitsDelta::Down(20));
        assert_eq!(st.sum(), 0);
    }

    proptest! {
        /// No interval of length W holds more than N; every denial waits
        /// at most W, is refused a nanosecond before its wait and admitted
        /// at it.
        #[test]
        fn never_more_than_n_in_any_window_and_exact_waits_of_at_most_w(
            n in 1u64..200,
            arrivals in proptest::collection::vec((0u64..80_000_000, 1u64..4), 1..600),
        ) {
            let s = spec(n);
            let mut st = WindowState::default();
            let mut now = 1_000_000_000u64;
            let mut log = Vec::new();
            for (gap, units) in arrivals {
                now += gap;
                if units > n {
                    continue;
                }
                match st.try_admit(&s, now, units, n) {
                    Ok(()) => log.push((now, units)),
                    Err(wait) => {
                        prop_assert!(wait >= 1 && wait <= s.window_ns, "wait {wait}");
                        prop_assert!(st.clone().try_admit(&s, now + wait - 1, units, n).is_err());
                        prop_assert!(st.clone().try_admit(&s, now + wait, units, n).is_ok());
                    }
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
