//! Health of the connection to Redis: the failure-mode switch, with one log
//! line per transition (naming the address and the real cause), counters,
//! the last error for operators, and at most one traffic probe per interval
//! while Redis is out so callers get the failure mode at once instead of a
//! timeout each. The backend's background task probes too, so recovery
//! needs no traffic.

use crate::config::FailureMode;
use parking_lot::Mutex;
use pressure_core::clock::{Clock, MonotonicClock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// While Redis is out, one caller per interval tries it again, and the
/// background task probes at this pace.
pub(crate) const PROBE_INTERVAL_NS: u64 = 100_000_000;

#[derive(Debug)]
pub(crate) struct Health {
    mode: FailureMode,
    /// The store's address for messages (password redacted).
    pub(crate) address: String,
    clock: MonotonicClock,
    healthy: AtomicBool,
    last_probe: AtomicU64,
    last_error: Mutex<Option<String>>,
    pub(crate) failures: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) transitions: AtomicU64,
}

impl Health {
    /// Health of a backend that starts healthy or not (the store did not
    /// answer at start: `error` says why).
    pub(crate) fn new(mode: FailureMode, address: String, error: Option<String>) -> Self {
        let h = Self {
            mode,
            address,
            clock: MonotonicClock::new(),
            healthy: AtomicBool::new(error.is_none()),
            last_probe: AtomicU64::new(0),
            last_error: Mutex::new(None),
            failures: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
        };
        if let Some(e) = error {
            h.failures.fetch_add(1, Ordering::Relaxed);
            h.last_probe.store(h.clock.now_nanos(), Ordering::Relaxed);
            tracing::warn!(
                redis = %h.address,
                failure_mode = ?h.mode,
                error = %e,
                "redis backend unavailable at start; failure mode applies until it answers"
            );
            *h.last_error.lock() = Some(e);
        }
        h
    }

    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// The most recent failure, with its cause; kept after recovery.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
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
            tracing::info!(redis = %self.address, failure_mode = ?self.mode, "redis backend recovered; counting in redis again");
        }
    }

    /// A call found no connection (Redis is out and still reconnecting):
    /// counted and unhealthy, the cause of the outage kept as it is.
    pub(crate) fn unreachable(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.last_probe.store(self.clock.now_nanos(), Ordering::Relaxed);
        if self.healthy.swap(false, Ordering::AcqRel) {
            self.transitions.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(redis = %self.address, failure_mode = ?self.mode, "redis backend unavailable (no connection); failure mode applies");
        }
    }

    /// Redis failed or timed out; `cause` names why.
    pub(crate) fn failed(&self, cause: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.last_probe.store(self.clock.now_nanos(), Ordering::Relaxed);
        {
            let mut last = self.last_error.lock();
            if last.as_deref() != Some(cause) {
                *last = Some(cause.to_owned());
            }
        }
        if self.healthy.swap(false, Ordering::AcqRel) {
            self.transitions.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(redis = %self.address, failure_mode = ?self.mode, error = %cause, "redis backend unavailable; failure mode applies");
        }
    }
}
