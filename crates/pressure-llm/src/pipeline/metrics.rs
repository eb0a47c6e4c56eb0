//! Counters kept by the client; exported elsewhere (no Prometheus here).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
    pub(crate) budget_rejections: AtomicU64,
    pub(crate) embedding_requests: AtomicU64,
    pub(crate) embedding_spent_micro_usd: AtomicU64,
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
    /// Time to first token per (provider, model).
    ttft: BTreeMap<(String, String), Histogram>,
    /// Total latency per (provider, model).
    latency: BTreeMap<(String, String), Histogram>,
}

/// Upper bounds (seconds) of the latency histogram buckets; `+Inf` is implied.
pub const LATENCY_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// A fixed-bucket latency histogram (the buckets of [`LATENCY_BUCKETS`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Observations at or below each bound of [`LATENCY_BUCKETS`]
    /// (cumulative, as Prometheus `_bucket{le=..}` wants them).
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    /// Observations in all (the `+Inf` bucket).
    pub count: u64,
    /// Sum of the observations, in microseconds.
    pub sum_micros: u64,
}

impl Histogram {
    /// Adds one observation.
    pub fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, n) in LATENCY_BUCKETS.iter().zip(self.buckets.iter_mut()) {
            if secs <= *bound {
                *n += 1;
            }
        }
        self.count += 1;
        self.sum_micros = self
            .sum_micros
            .saturating_add(d.as_micros().try_into().unwrap_or(u64::MAX));
    }

    /// Sum of the observations, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        // Microsecond sums stay exact in an f64 far beyond any realistic total.
        #[allow(clippy::cast_precision_loss)]
        let s = self.sum_micros as f64 / 1e6;
        s
    }

    /// `(bound, cumulative count)` pairs, `+Inf` excluded.
    pub fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        LATENCY_BUCKETS.iter().copied().zip(self.buckets.iter().copied())
    }
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
    /// Model levels skipped because the event's payer refused the attempt
    /// (a spent budget, or another of its limits).
    pub budget_rejections: u64,
    /// Embeddings events started (also counted in `requests`).
    pub embedding_requests: u64,
    /// Micro-dollars spent on embeddings calls (also in `spent_micro_usd`).
    pub embedding_spent_micro_usd: u64,
    /// Events that failed, by error label.
    pub errors: BTreeMap<String, u64>,
    /// Failed attempts, by error kind label (`rate_limited` gives the 429 share).
    pub attempt_errors: BTreeMap<String, u64>,
    /// Answers by degradation (`primary`, `backup`, `knn`, `rules`, `manual_queue`).
    pub served: BTreeMap<String, u64>,
    /// Time to first token of successful provider calls, per (provider, model):
    /// the response head of a complete call, the first output chunk of a
    /// stream.
    pub ttft: BTreeMap<(String, String), Histogram>,
    /// Total latency of successful provider calls (to the last body byte or
    /// the stream's end), per (provider, model).
    pub latency: BTreeMap<(String, String), Histogram>,
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

    /// Records one successful provider call's time to first token and total time.
    pub(crate) fn timing(
        &self,
        provider: &str,
        model: &str,
        ttft: Option<Duration>,
        total: Option<Duration>,
    ) {
        let key = (provider.to_owned(), model.to_owned());
        let mut l = self.labelled.lock();
        if let Some(t) = ttft {
            l.ttft.entry(key.clone()).or_default().observe(t);
        }
        if let Some(t) = total {
            l.latency.entry(key).or_default().observe(t);
        }
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
            budget_rejections: self.budget_rejections.load(Ordering::Relaxed),
            embedding_requests: self.embedding_requests.load(Ordering::Relaxed),
            embedding_spent_micro_usd: self.embedding_spent_micro_usd.load(Ordering::Relaxed),
            errors: l.errors.clone(),
            attempt_errors: l.attempt_errors.clone(),
            served: l.served.clone(),
            ttft: l.ttft.clone(),
            latency: l.latency.clone(),
        }
    }
}
