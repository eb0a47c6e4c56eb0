//! [`RetryHint`]: when a chain that gave up could be asked again.
//!
//! Each level that gave up with a wait (the limiter's, the breaker's open
//! time, the provider's `retry-after`) says when it could answer: the
//! moment it gave up plus that wait. The chain's hint is the time from
//! *now* — when the whole chain gives up — to the soonest of those
//! moments, and never less than the chain's own backoff before it would
//! try a level again (its retry policy's delay after the attempts made):
//! a level whose moment passed while later levels were tried is not ready
//! "at once". Without that floor a client told "retry in 0 ms" re-runs
//! the whole chain at once.

use std::time::Duration;

use tokio::time::Instant;

/// The soonest moment a level could answer, and the chain's own backoff.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RetryHint {
    soonest: Option<Instant>,
    floor: Option<Duration>,
}

impl RetryHint {
    /// A level gave up at `at`, able to answer after `wait`; the chain
    /// itself would wait `backoff` before trying it again.
    pub(super) fn note(&mut self, at: Instant, wait: Duration, backoff: Duration) {
        let ready = at + wait;
        self.soonest = Some(self.soonest.map_or(ready, |t| t.min(ready)));
        self.floor = Some(self.floor.map_or(backoff, |f| f.min(backoff)));
    }

    /// The hint at `now`; `None` when no level said anything.
    pub(super) fn at(&self, now: Instant) -> Option<Duration> {
        let soonest = self.soonest?.saturating_duration_since(now);
        Some(soonest.max(self.floor.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_soonest_level_counted_from_now() {
        let t0 = Instant::now();
        let mut h = RetryHint::default();
        assert_eq!(h.at(t0), None);
        h.note(t0, 500 * MS, 10 * MS);
        h.note(t0 + 100 * MS, 2000 * MS, 10 * MS);
        assert_eq!(h.at(t0 + 200 * MS), Some(300 * MS));
    }

    #[test]
    fn a_passed_moment_still_waits_the_chains_own_backoff() {
        let t0 = Instant::now();
        let mut h = RetryHint::default();
        h.note(t0, 30 * MS, 80 * MS);
        h.note(t0 + 80 * MS, 30 * MS, 500 * MS);
        // The first level's moment passed 50 ms ago: not "at once".
        assert_eq!(h.at(t0 + 80 * MS), Some(80 * MS));
    }
}
