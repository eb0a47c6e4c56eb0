//! Circuit breaker per (provider, model), with resilience4j semantics
//! (docs/architecture.md#the-llm-stack, layer 4).
//!
//! ```text
//!   Closed ──(window: calls ≥ minimumCalls and failure rate ≥ threshold,
//!     ▲        or slow-call rate ≥ slow threshold; or open_for)──▶ Open
//!     │                                                             │
//!     │  all halfOpenProbes succeeded                 openWaitMs or │
//!     │  (none failed, none slow)                  the retry-after  │
//!     │                                                   elapsed   ▼
//!     └────────────────────────── HalfOpen ◀────────────────────────┘
//!                                    └──(a probe failed, or was slow
//!                                         with the slow rule on)──▶ Open
//! ```
//!
//! * [`CircuitBreaker::try_acquire`] → [`CallPermit`] or [`Rejected`];
//!   rejected means no network call at all (and costs no limiter quota).
//! * The closed state counts calls, failures and slow calls in a time-based
//!   sliding window kept in buckets (1 s buckets over the default 30 s
//!   window): O(1) to record, O(1) to read.
//! * Open turns half-open lazily, on the first `try_acquire`, `state` or
//!   `snapshot` after the wait, by the injected [`pressure_core::clock::Clock`].
//! * Half-open admits at most `halfOpenProbes` permits, closes when they all
//!   succeeded, and reopens at the first failed (or slow) probe — "closed on
//!   success, open again on failure" (docs/architecture.md#the-llm-stack); stricter than
//!   resilience4j's rate over the probes, because a provider that still
//!   fails one call in three is not back.
//! * A permit dropped without a report counts for nothing and frees its
//!   probe slot (resilience4j ignores cancelled calls).
//! * Every transition is logged (`warn!` into open, `info!` otherwise, with
//!   `name`, `from`, `to`, `reason`, `failure_rate`), counted
//!   ([`CircuitBreaker::transitions`], [`BreakerSnapshot`]) and handed to an
//!   optional [`TransitionHook`].
//! * [`BreakerRegistry`] holds the breakers per (provider, model).
//! * With a shared store ([`BreakerRegistry::fleet`], `scope` `fleet` on
//!   the Redis backend) the breakers of every instance act as one: see
//!   `fleet`. Learned transitions carry the reason `fleet`.

mod circuit;
mod config;
mod fleet;
mod registry;
mod state;
mod sync;
mod window;

pub use circuit::{
    BreakerSnapshot, CallPermit, CircuitBreaker, InvalidBreakerConfig, Rejected, TransitionHook,
};
pub use config::{BreakerConfig, BreakerScope};
pub use fleet::SYNC_INTERVAL;
pub use registry::{BreakerRegistry, FleetStatus, KeyedSnapshot, RECENT_TRANSITIONS};
pub use state::{State, Transition, TransitionReason};
