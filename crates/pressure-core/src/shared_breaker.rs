//! [`SharedBreakerStore`]: the state of a circuit breaker held outside the
//! process, so a fleet of instances opens, probes and closes one breaker
//! together (docs/architecture.md#what-openai-and-anthropic-clients-expect).
//!
//! The store knows nothing of LLMs or HTTP: a breaker is a name, and its
//! shared state is a small record, [`SharedCircuit`]:
//!
//! * **closed**: outcomes [`record`](SharedBreakerStore::record)ed by every
//!   instance land in one time-bucketed window; when the window holds at
//!   least `minimum_calls` calls and the failure rate (or, when enabled, the
//!   slow-call rate) is at or above its threshold, the store opens the
//!   breaker itself — four instances that each see a quarter of the
//!   failures still open it.
//! * **open** until a time on the store's clock (so instances need no
//!   synchronised clocks; they read `retry_in`). Any instance may
//!   [`open`](SharedBreakerStore::open) it (its own window tripped, or a
//!   provider's retry-after).
//! * **half-open** once that time has passed: at most `half_open_probes`
//!   [`acquire_probe`](SharedBreakerStore::acquire_probe) grants per epoch,
//!   fleet-wide. All of them reporting success closes it; the first failure
//!   reopens it. Probes granted but never reported (their instance died)
//!   are given up after another `open_wait`, under a new epoch.
//!
//! Every transition bumps the **epoch**. Probe reports and opens name the
//! epoch they were decided in, and the store ignores the stale ones, so two
//! instances that both saw a probe fail open the breaker once.
//!
//! Every operation is atomic for one breaker and costs one round trip.
//! Callers keep a local breaker as the fallback: a store error must never
//! fail a call.

use crate::backend::BackendError;
use futures::future::BoxFuture;
use std::fmt;
use std::time::Duration;

/// Where a shared breaker stands, by the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SharedState {
    /// Calls pass; outcomes feed the shared window.
    Closed,
    /// No calls until `retry_in` has passed.
    Open,
    /// A fleet-wide quota of probes passes; their outcomes decide.
    HalfOpen,
}

/// The shared state of one breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedCircuit {
    /// The state now.
    pub state: SharedState,
    /// Bumped on every transition (0 for a breaker never seen).
    pub epoch: u64,
    /// Open: time left until half-open; otherwise zero.
    pub retry_in: Duration,
    /// Half-open: probes granted in this epoch (fleet-wide).
    pub probes_granted: u32,
}

impl SharedCircuit {
    /// The state of a breaker the store has never seen: closed, epoch 0.
    pub const FRESH: SharedCircuit = SharedCircuit {
        state: SharedState::Closed,
        epoch: 0,
        retry_in: Duration::ZERO,
        probes_granted: 0,
    };
}

/// The thresholds the store applies, from the breaker's configuration.
/// Every instance of a fleet is expected to pass the same rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CircuitRules {
    /// Length of the shared sliding window, in milliseconds.
    pub window_ms: u64,
    /// Width of one bucket of it, in milliseconds (> 0).
    pub bucket_ms: u64,
    /// Calls the window must hold before a rate is evaluated (> 0).
    pub minimum_calls: u64,
    /// Failure rate (0 < r ≤ 1) at or above which the window opens it.
    pub failure_rate_threshold: f64,
    /// Slow-call rate at or above which the window opens it; 1.0 = off.
    pub slow_call_rate_threshold: f64,
    /// How long it stays open, in milliseconds.
    pub open_wait_ms: u64,
    /// Probes granted per half-open epoch, fleet-wide (> 0).
    pub half_open_probes: u32,
}

/// Outcomes of calls made while closed, summed over a short batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutcomeCounts {
    /// Calls.
    pub calls: u64,
    /// Of which failed.
    pub failures: u64,
    /// Of which slow.
    pub slow: u64,
}

impl OutcomeCounts {
    /// Whether there is nothing to record.
    pub fn is_empty(&self) -> bool {
        self.calls == 0
    }
}

/// The answer to a probe request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeGrant {
    /// Make the probe call, and report it under this epoch.
    Granted {
        /// The half-open epoch the probe belongs to.
        epoch: u64,
    },
    /// No probe: the breaker is open, closed, or its quota is taken.
    Refused(SharedCircuit),
}

/// How a granted probe ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// It succeeded (and was not slow with the slow rule on).
    Success,
    /// It failed (or was slow with the slow rule on): reopen.
    Failure,
    /// It was never made or says nothing (cancelled): give the slot back.
    Released,
}

/// A store of shared breaker states (docs/architecture.md#what-openai-and-anthropic-clients-expect), e.g. in Redis. Every
/// method is atomic for one breaker, costs one round trip, and answers the
/// breaker's state after the operation.
pub trait SharedBreakerStore: Send + Sync + fmt::Debug {
    /// The state of `name` now.
    fn read<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<SharedCircuit, BackendError>>;

    /// Adds `counts` to the shared window of `name` if it is closed (they
    /// are dropped otherwise: calls admitted before it opened), and opens it
    /// under a new epoch when the window crosses a threshold of `rules`.
    fn record<'a>(
        &'a self,
        name: &'a str,
        rules: &'a CircuitRules,
        counts: OutcomeCounts,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>>;

    /// Opens `name` for `open_for`: from closed always (a new epoch); from
    /// open or half-open only if its epoch is still `seen_epoch` (an open
    /// one is extended, never shortened; a half-open one reopens under a
    /// new epoch). Otherwise the fleet has moved on and nothing changes.
    fn open<'a>(
        &'a self,
        name: &'a str,
        rules: &'a CircuitRules,
        seen_epoch: u64,
        open_for: Duration,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>>;

    /// One probe slot of the half-open epoch, if the fleet-wide quota has
    /// one left.
    fn acquire_probe<'a>(
        &'a self,
        name: &'a str,
        rules: &'a CircuitRules,
    ) -> BoxFuture<'a, Result<ProbeGrant, BackendError>>;

    /// Reports a probe granted in `epoch`: the last success of the quota
    /// closes it, a failure reopens it (each under a new epoch); a report
    /// for another epoch changes nothing.
    fn report_probe<'a>(
        &'a self,
        name: &'a str,
        rules: &'a CircuitRules,
        epoch: u64,
        outcome: ProbeOutcome,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>>;
}
