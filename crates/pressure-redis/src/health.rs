//! Health of the connection to Redis: the failure-mode switch, with one log
//! line per transition, counters, and at most one probe per interval while
//! Redis is out so callers get the failure mode at once instead of a timeout
//! each.

use crate::config::FailureMode;
use pressure_core::clock::{Clock, MonotonicClock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// While Redis is out, one caller per interval tries it again.
pub(crate) const PROBE_INTERVAL_NS: u64 = 100_000_000;

#[derive(Debug)]
pub(crate) struct Health {
    mode: FailureMode,
    clock: MonotonicClock,
    healthy: AtomicBool,
    last_probe: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) transitions: AtomicU64,
}

impl Health {
    pub(crate) fn new(mode: FailureMode) -> Self {
        Self {
            mode,
            clock: MonotonicClock::new(),
            healthy: AtomicBool::new(true),
            last_probe: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
        }
    }

    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Whether this call should go to Redis: always while healthy; while out,
    /// only the one caller that claims the next probe slot.
    #[inline]
    pub(crate) fn should_try(&self) -> bool {
        if self.healthy.load(Ordering::Relaxed) {
            return true;
        }
        let now = self.clock.now_nanos();
        let last = self.last_probe.load(Ordering::Relaxed);
        now.saturating_sub(last) >= PROBE_INTERVAL_NS
            && self
                .last_probe
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// Redis answered.
    #[inline]
    pub(crate) fn ok(&self) {
        if !self.healthy.load(Ordering::Relaxed) && !self.healthy.swap(true, Ordering::AcqRel) {
            self.transitions.fetch_add(1, Ordering::Relaxed);
            tracing::info!(failure_mode = ?self.mode, "redis backend recovered; counting in redis again");
        }
    }

    /// Redis failed or timed out.
    pub(crate) fn failed(&self, error: &dyn std::fmt::Display) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.last_probe.store(self.clock.now_nanos(), Ordering::Relaxed);
        if self.healthy.swap(false, Ordering::AcqRel) {
            self.transitions.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(failure_mode = ?self.mode, error = %error, "redis backend unavailable; failure mode applies");
        }
    }
}
