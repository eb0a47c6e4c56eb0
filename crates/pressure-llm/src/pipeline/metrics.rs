//! Counters kept by the client; exported elsewhere (no Prometheus here).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// The client's counters.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) requests: AtomicU64,
    pub(crate) attempts: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) failed_spent_micro_usd: AtomicU64,
    pub(crate) spent_micro_usd: AtomicU64,
    pub(crate) breaker_rejections: AtomicU64,
    pub(crate) limiter_rejections: AtomicU64,
    labelled: Mutex<Labelled>,
}

#[derive(Debug, Default)]
struct Labelled {
    /// Final errors of events by label.
    errors: BTreeMap<String, u64>,
    /// Failed attempts by error kind label.
    attempt_errors: BTreeMap<String, u64>,
    /// Answers by degradation label.
    served: BTreeMap<String, u64>,
}

/// A copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Events started.
    pub requests: u64,
    /// Provider calls made.
    pub attempts: u64,
    /// Retries (calls after a backoff on the same level).
    pub retries: u64,
    /// Micro-dollars spent on failed attempts.
    pub failed_spent_micro_usd: u64,
    /// Micro-dollars spent on all attempts.
    pub spent_micro_usd: u64,
    /// Model levels skipped because the breaker was open.
    pub breaker_rejections: u64,
    /// Model levels skipped because the limiter had no capacity in time.
    pub limiter_rejections: u64,
    /// Events that failed, by error label.
    pub errors: BTreeMap<String, u64>,
    /// Failed attempts, by error kind label (`rate_limited` gives the 429 share).
    pub attempt_errors: BTreeMap<String, u64>,
    /// Answers by degradation (`primary`, `backup`, `rules`, `manual_queue`).
    pub served: BTreeMap<String, u64>,
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, label: &str) {
        *self.labelled.lock().errors.entry(label.to_owned()).or_default() += 1;
    }

    pub(crate) fn attempt_error(&self, label: &str) {
        *self
            .labelled
            .lock()
            .attempt_errors
            .entry(label.to_owned())
            .or_default() += 1;
    }

    pub(crate) fn served(&self, label: &str) {
        *self.labelled.lock().served.entry(label.to_owned()).or_default() += 1;
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let l = self.labelled.lock();
        MetricsSnapshot {
            requests: self.requests.load(Ordering::Relaxed),
            attempts: self.attempts.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            failed_spent_micro_usd: self.failed_spent_micro_usd.load(Ordering::Relaxed),
            spent_micro_usd: self.spent_micro_usd.load(Ordering::Relaxed),
            breaker_rejections: self.breaker_rejections.load(Ordering::Relaxed),
            limiter_rejections: self.limiter_rejections.load(Ordering::Relaxed),
            errors: l.errors.clone(),
            attempt_errors: l.attempt_errors.clone(),
            served: l.served.clone(),
        }
    }
}
