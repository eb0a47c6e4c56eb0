//! Settings of a circuit breaker (JSON names in camelCase).
//!
//! The defaults follow docs/architecture.md#the-llm-stack: trip at a 50 % failure rate over a 30 s
//! sliding window once at least 10 calls were seen, stay open for 30 s, then
//! admit 3 probes. The slow-call rule is off by default
//! (`slowCallRateThreshold` = 1.0); set it below 1 to also trip when too many
//! calls take longer than `slowCallDurationMs` (e.g. time to first token).
//!
//! The window is kept in buckets ([`BreakerConfig::bucket_ms`] wide,
//! [`BreakerConfig::buckets`] of them), so a call is forgotten between one
//! bucket before and exactly the end of the window after it was recorded.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Largest number of buckets of the sliding window; longer windows get wider
/// buckets.
const MAX_BUCKETS: u64 = 600;
/// Widest bucket for windows that fit in [`MAX_BUCKETS`]: one second, as in
/// resilience4j's time-based window.
const MAX_BUCKET_MS: u64 = 1_000;

/// Where a breaker's state lives (`scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BreakerScope {
    /// Shared by the fleet through the broker's store (Redis backend): once
    /// one instance opens it, no instance calls the model until the
    /// fleet-wide probes succeed. The default on the Redis backend.
    Fleet,
    /// Each process decides alone. The default (and the only choice) on the
    /// memory backend.
    Process,
}

/// Settings of one [`super::CircuitBreaker`]; every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Failure rate (0 < r ≤ 1) in the window at or above which a closed
    /// breaker opens, and among the probes at or above which a half-open one
    /// opens again.
    pub failure_rate_threshold: f64,
    /// Share of slow calls (0 < r ≤ 1) at or above which the breaker opens;
    /// 1.0 turns the slow-call rule off.
    pub slow_call_rate_threshold: f64,
    /// A call taking longer than this many milliseconds is slow.
    pub slow_call_duration_ms: u64,
    /// Length of the sliding time window, in milliseconds.
    pub window_ms: u64,
    /// Calls the window must hold before any rate is evaluated.
    pub minimum_calls: u64,
    /// How long an open breaker rejects calls before turning half-open, in
    /// milliseconds (unless a longer retry-after was given).
    pub open_wait_ms: u64,
    /// Probes a half-open breaker admits; the decision is taken once they all
    /// reported (or earlier, once the failures alone reach the threshold).
    pub half_open_probes: u32,
    /// `"fleet"` or `"process"`; absent: `fleet` on the Redis backend,
    /// `process` on the memory backend (where `fleet` is an error). Read by
    /// whoever builds the client with a shared store (the gateway).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<BreakerScope>,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_rate_threshold: 0.5,
            slow_call_rate_threshold: 1.0,
            slow_call_duration_ms: 10_000,
            window_ms: 30_000,
            minimum_calls: 10,
            open_wait_ms: 30_000,
            half_open_probes: 3,
            scope: None,
        }
    }
}

impl BreakerConfig {
    /// Checks the values; the error names the JSON field.
    pub fn validate(&self) -> Result<(), pressure_core::FieldError> {
        let rate_ok = |r: f64| r.is_finite() && r > 0.0 && r <= 1.0;
        // The first rule broken, by its JSON field.
        let check = |ok: bool, field: &str, problem: &str| {
            if ok {
                Ok(())
            } else {
                Err(pressure_core::FieldError::new(field, problem))
            }
        };
        check(
            rate_ok(self.failure_rate_threshold),
            "failureRateThreshold",
            "must be > 0 and at most 1",
        )?;
        check(
            rate_ok(self.slow_call_rate_threshold),
            "slowCallRateThreshold",
            "must be > 0 and at most 1 (1 = off)",
        )?;
        check(
            self.slow_call_duration_ms > 0,
            "slowCallDurationMs",
            "must be > 0",
        )?;
        check(
            (10..=3_600_000).contains(&self.window_ms),
            "windowMs",
            "must be between 10 and 3600000",
        )?;
        check(self.minimum_calls > 0, "minimumCalls", "must be > 0")?;
        check(
            (1..=86_400_000).contains(&self.open_wait_ms),
            "openWaitMs",
            "must be between 1 and 86400000",
        )?;
        check(
            (1..=1_000).contains(&self.half_open_probes),
            "halfOpenProbes",
            "must be between 1 and 1000",
        )
    }

    /// The thresholds a shared store applies for this breaker
    /// (`pressure_core::shared_breaker`).
    pub(crate) fn circuit_rules(&self) -> pressure_core::shared_breaker::CircuitRules {
        pressure_core::shared_breaker::CircuitRules {
            window_ms: self.window_ms,
            bucket_ms: self.bucket_ms(),
            minimum_calls: self.minimum_calls,
            failure_rate_threshold: self.failure_rate_threshold,
            slow_call_rate_threshold: self.slow_call_rate_threshold,
            open_wait_ms: self.open_wait_ms,
            half_open_probes: self.half_open_probes,
        }
    }

    /// Whether the slow-call rule is on (`slowCallRateThreshold` < 1).
    pub fn slow_calls_enabled(&self) -> bool {
        self.slow_call_rate_threshold < 1.0
    }

    /// A call taking longer than this is slow.
    pub(crate) fn slow_call_duration(&self) -> Duration {
        Duration::from_millis(self.slow_call_duration_ms)
    }

    /// How long an open breaker waits before admitting probes.
    pub(crate) fn open_wait(&self) -> Duration {
        Duration::from_millis(self.open_wait_ms)
    }

    /// The length of the sliding window.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }

    /// Width of one bucket of the sliding window, in milliseconds: a tenth
    /// of the window, at most 1 s, but wide enough that the window needs at
    /// most 600 buckets.
    pub fn bucket_ms(&self) -> u64 {
        let w = self.window_ms.max(1);
        (w / 10).clamp(1, MAX_BUCKET_MS).max(w.div_ceil(MAX_BUCKETS))
    }

    /// Number of buckets of the sliding window (the window rounded up to a
    /// whole bucket). A call recorded in bucket `e` counts while the current
    /// bucket is before `e + buckets()`.
    pub fn buckets(&self) -> u64 {
        self.window_ms.max(1).div_ceil(self.bucket_ms())
    }
}
