//! The states of a breaker and the record of a transition between them.
//!
//! ```text
//!            failure or slow rate ≥ threshold, calls ≥ minimumCalls
//!   Closed ───────────────────────────────────────────────────────▶ Open
//!     ▲                 (or open_for(retry-after) from any state)     │
//!     │ all halfOpenProbes succeeded                                  │ openWaitMs (or the
//!     │ (none failed, none slow)                                      │ retry-after) elapsed,
//!     │                                                               ▼ seen lazily
//!     └──────────────────────────── HalfOpen ◀────────────────────────┘
//!                                      │
//!                                      └──▶ Open at the first failed (or, with
//!                                           the slow rule on, slow) probe
//! ```

use serde::Serialize;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Calls pass; their outcomes feed the sliding window.
    Closed,
    /// Calls are rejected without any network call until the wait ends.
    Open,
    /// A limited number of probe calls pass; their outcomes decide.
    HalfOpen,
}

impl State {
    /// `"closed"`, `"open"` or `"half_open"` (log fields and metric labels).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }

    /// A gauge value by severity: closed 0, half-open 1, open 2.
    pub fn as_gauge(self) -> i64 {
        match self {
            State::Closed => 0,
            State::HalfOpen => 1,
            State::Open => 2,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a transition happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransitionReason {
    /// Closed → open: the failure rate in the window reached the threshold.
    FailureRate,
    /// Closed → open: the slow-call rate in the window reached the threshold.
    SlowCallRate,
    /// → open: forced by [`super::CircuitBreaker::open_for`] (a provider's
    /// retry-after).
    Forced,
    /// Open → half-open: the wait elapsed.
    WaitElapsed,
    /// Half-open → closed: every probe reported and the rates stayed below
    /// the thresholds.
    ProbesSucceeded,
    /// Half-open → open: the probes' failure rate reached the threshold.
    ProbesFailed,
    /// Half-open → open: the probes' slow-call rate reached the threshold.
    ProbesSlow,
    /// Any change learned from the fleet's shared state (another instance
    /// opened, probed or closed it; `llm.breaker.scope` `fleet`).
    Fleet,
}

impl TransitionReason {
    /// The reason as a snake_case label.
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionReason::FailureRate => "failure_rate",
            TransitionReason::SlowCallRate => "slow_call_rate",
            TransitionReason::Forced => "forced",
            TransitionReason::WaitElapsed => "wait_elapsed",
            TransitionReason::ProbesSucceeded => "probes_succeeded",
            TransitionReason::ProbesFailed => "probes_failed",
            TransitionReason::ProbesSlow => "probes_slow",
            TransitionReason::Fleet => "fleet",
        }
    }
}

impl fmt::Display for TransitionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One state change, as logged and handed to the transition hook.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The breaker's name (`provider/model` in a registry).
    pub name: Arc<str>,
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
    /// Why.
    pub reason: TransitionReason,
    /// Failure rate of the counts that decided (window or probes), 0..=1.
    pub failure_rate: f64,
    /// Slow-call rate of the same counts, 0..=1.
    pub slow_call_rate: f64,
    /// Number of calls in those counts.
    pub calls: u64,
    /// For a transition to open: how long it stays open.
    pub open_for: Option<Duration>,
    /// The breaker clock's reading, in nanoseconds.
    pub at_nanos: u64,
}
