//! Retry of transient errors, with backoff, `retry-after` and a money budget.
//!
//! * `backoff` — exponential backoff with full jitter, capped, and the
//!   provider's `retry-after` honoured (never sooner).
//! * `budget` — the money budget per event: what failed attempts cost, and
//!   whether the next attempt still fits.
//! * `policy` — the configuration (`RetryPolicy`) and the per-event state
//!   ([`RetryState`]) that turns a failed attempt into a [`Decision`].
//!
//! Only [`ErrorKind`](crate::taxonomy::ErrorKind)s whose disposition is
//! `Retry` are retried; time is read only through the injected clock (the
//! caller passes `now` in the clock's nanoseconds), and randomness comes from
//! an injectable RNG, so every decision can be reproduced in tests.

mod backoff;
mod budget;
mod policy;

pub use backoff::Backoff;
pub use budget::MoneyBudget;
pub use policy::{Decision, GiveUpReason, PolicyError, RetryPolicy, RetryState};
