//! # pressure-core
//!
//! One [`ResourceBroker`] for everything a platform pushes downstream: one
//! counting machinery, two strategies on exhaustion.
//!
//! | strategy | API | on exhaustion |
//! |---|---|---|
//! | queue+execute | [`ResourceBroker::register`] + [`ResourceBroker::enqueue`] | wait in a priority queue, run when capacity frees, retry on a reported rate limit |
//! | check+reject | [`ResourceBroker::register_limit`] + [`ResourceBroker::try_acquire`] | answer at once with the wait time |
//!
//! State lives behind the [`Backend`] trait: [`MemoryBackend`] here,
//! `pressure-redis` for a fleet.
//!
//! ```
//! use pressure_core::{AcquireOptions, Acquisition, Limits, Request, ResourceBroker, ResourceConfig, TaskError};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let broker = ResourceBroker::new();
//!
//! // check+reject
//! broker.register_limit("webhooks", Limits::default().requests_per_second(2))?;
//! let mut refused = 0;
//! for _ in 0..3 {
//!     match broker.try_acquire("webhooks", AcquireOptions::default()).await? {
//!         Acquisition::Granted(_permit) => {} // handle; the permit releases on drop
//!         Acquisition::Denied(d) => {
//!             refused += 1;
//!             assert!(d.wait > std::time::Duration::ZERO); // → Retry-After
//!         }
//!     }
//! }
//! assert_eq!(refused, 1);
//!
//! // queue+execute
//! broker.register("llm", ResourceConfig::new(Limits::default().tokens_per_minute(10_000)))?;
//! let answer = broker
//!     .enqueue(Request::new("llm", |attempt| async move {
//!         // Call the provider here; report its usage with attempt.usage.set(..)
//!         // and return Err(TaskError::RateLimited { .. }) on a 429.
//!         Ok::<_, TaskError<String>>(format!("attempt {}", attempt.number))
//!     }).tokens(1_200, 512))
//!     .await?;
//! assert_eq!(answer.value, "attempt 1");
//! # Ok(())
//! # }
//! ```
//!
//! ## Limits and their exact meaning
//!
//! [`Limits`] may set `requestsPerSecond`, `requestsPerMinute`,
//! `requestsPerHour`, `requestsPer24Hours`, `tokensPerMinute`,
//! `inputTokensPerMinute`, `outputTokensPerMinute`, the calendar
//! dimensions `requestsPerDay`, `tokensPerDay`, `costMicroUsdPerDay`,
//! `costMicroUsdPerMonth`, and `maxConcurrentRequests`, in any subset. An
//! acquisition must fit all of them; it reserves all or nothing, and **a
//! denial consumes nothing** on any dimension.
//!
//! ### `window` (default)
//! A strict sliding window, counted in `S = 30` aligned sub-windows
//! (`g = ⌈W/S⌉`) and the time of the last admission, `last`. A sub-window
//! counts until `min(its end, last) + W` (all its units were admitted by
//! both), and a demand is admitted iff the units counted plus the demand
//! stay within `N`.
//! * **Bound:** no interval of length `W` ever holds more than `N` units (its
//!   last admission counted every earlier one in it).
//! * **Utilization:** under saturation at least `S/(S+1)` ≈ 96.7 % of `N`
//!   per `W`.
//! * **Wait:** exact — when enough old sub-windows leave, or everything
//!   leaves at `last + W` — and **never longer than `W`**: a burst that
//!   exhausts a per-minute limit waits out the minute from its last
//!   admission.
//!
//! ### `gcra` (with optional `burst`)
//! The generic cell rate algorithm (continuous-refill token bucket, as
//! providers and nginx `limit_req` count): one timestamp of state per
//! dimension, emission interval `T = ⌈W/N⌉` ns, bucket `C` = `burst` on
//! request dimensions (default `N`) and `N` on token dimensions.
//! * **Bound:** over any interval of length `d`, at most `C + d/T` units.
//! * **Wait:** exact — the same demand fits at `now + wait` and not one
//!   nanosecond earlier. A queued caller can *book* its future slot and sleep
//!   once.
//!
//! ### Calendar dimensions (`requestsPerDay`, `tokensPerDay`, `costMicroUsdPerDay`, `costMicroUsdPerMonth`)
//! Fixed UTC calendar windows, what finance means by a daily or monthly
//! budget: a count of units per UTC day (reset at 00:00:00 UTC) or per UTC
//! month (reset on the first at 00:00:00 UTC). `algorithm` and `burst` do
//! not apply to them; a caller's batch ceiling does. Costs are integers in
//! micro-USD ([`Demand::cost_micro_usd`], [`AcquireOptions::cost_micro_usd`]).
//! * **Bound:** within one period at most `N` units are admitted; the
//!   period's count is never carried into the next (so up to `2N` may pass
//!   around a boundary, as any fixed window allows — use `requestsPer24Hours`
//!   for a sliding day).
//! * **Wait:** exact — the time until the period ends
//!   ([`Calendar::next_reset`]); [`Denial::is_exact`] holds.
//! * **Reconcile** corrects the count of the grant's own period, up or down;
//!   a grant reconciled after its period ended changes nothing (the new
//!   period's count is not touched).
//! * **Time:** the period comes from the backend's wall time — the injected
//!   [`clock::Clock::unix_nanos_at`] in memory, the Redis server's `TIME` for
//!   a fleet — and [`Usage::resets`] / `ResourceStats::resets_at` tell when
//!   each count resets. A resource with a calendar dimension is counted
//!   under its lock in memory (never on the lock-free paths) and never books
//!   a future slot.
//!
//! ### `maxConcurrentRequests`
//! Live permits. Each is a lease with a TTL (`leaseTtlMs`, default 30 s),
//! renewed for as long as its permit lives by one renewal task per broker
//! that batches every live lease (one backend call per resource), so the cap
//! holds for a permit of any duration. A dead process (or a dropped broker)
//! renews nothing, and its slots come back when the leases expire. The wait
//! on a concurrency denial is an estimate: the time until the earliest lease
//! expires, at most 100 ms.
//!
//! ### Tokens
//! Reserve an estimate (input counted, output = `max_tokens`), then
//! [`Permit::reconcile`] with the actual usage: windows and buckets are
//! corrected by the difference, up or down.
//!
//! ## Queue order
//! [`ResourceBroker::enqueue`] waits in a priority queue until the resource
//! has capacity, runs the task, and retries it transparently when the task
//! reports a rate limit.
//!
//! Two classes ([`Priority`]), `interactive` and `batch`. Interactive
//! requests go first; within a class, first come first served. **Batch never
//! starves**: after `interactiveBurst` (default 8) consecutive interactive
//! grants while a batch request was waiting, the oldest batch request goes
//! next. So a batch request waits for at most `interactiveBurst` interactive
//! grants per batch request ahead of it.
//!
//! Across a fleet, priority needs no coordination: batch callers may fill
//! only `1 − batchHeadroom` of every limit (backend-enforced), so
//! interactive traffic from any instance always finds the headroom.
//!
//! Bounds ([`QueueConfig`]): at most `maxQueued` waiters (beyond:
//! [`QueueError::Full`] at once); each request waits at most its `maxWait`
//! (beyond: [`QueueError::Timeout`], as soon as the backend's wait time
//! shows the deadline cannot be met). Dropping the `enqueue` future removes
//! the request from the queue and releases anything it held.
//!
//! The dispatcher sleeps exactly until the backend's wait time, or until a
//! permit of this process frees capacity; with `gcra` limits it books each
//! waiter's future slot so the waiter sleeps once and runs on time.
//!
//! ## Live reconfiguration
//! [`ResourceBroker::set_limits`] changes a resource's limits in place (a
//! configuration reload): unchanged limits keep everything, changed ones
//! apply to every new acquisition — also through [`ResourceHandle`]s
//! obtained before — while current usage carries over by dimension (window
//! sub-windows, `gcra` bucket levels, live leases) and the counters
//! continue. [`ResourceBroker::unregister`] drops a resource; its
//! outstanding permits still release.
//!
//! ## Lazily registered resources
//! [`ResourceBroker::lazy_limit`] registers per-tenant resources on first use.
//! Their number is bounded (default 100 000): past the bound the broker evicts
//! resources at rest (nothing counted, so no accuracy is lost), then, if a
//! flood of distinct ids leaves none at rest, the least recently used ones not
//! held by any permit — like nginx's `limit_req` zone, which trades accuracy
//! for a tenant idle longest over refusing every new one.
//!
//! ## Nested budgets
//! A [`Nest`] charges several resources at once — an API key, its tenant,
//! the tenant's team, the organisation — all or nothing, in one atomic step
//! of the backend ([`Backend::acquire_nested`]); a refusal names the level
//! and the dimension, and consumes nothing on any level. Register the
//! levels of a hierarchy with [`ResourceBroker::lazy_limit_in_group`] (the
//! root as the group) so a store that shards by key (Redis Cluster) keeps
//! them in one slot.

#![warn(unreachable_pub)]

mod acquisition;
mod algo;
mod attempt;
mod backend;
mod broker;
mod calendar;
pub mod clock;
#[cfg(feature = "contract")]
pub mod contract;
mod entry;
mod error;
mod field_error;
mod handle;
mod leasing;
mod limits;
mod limits_error;
mod nest;
mod ppm;
mod priority;
mod queue;
mod queue_config;
mod renewal;
pub mod shared_breaker;
mod stats;
mod striped;
pub mod trace;
mod units;

pub use acquisition::{AcquireOptions, Acquisition, ActualUsage};
pub use backend::{
    Backend, BackendError, CompactDecision, Counts, Decision, Denial, DenialCause, Grant, LeaseId,
    LocalBackend, MemoryBackend, MemoryHandle, NestedDecision, Reserved, Usage,
};
pub use broker::{
    BrokerBuilder, LimitChange, LimitTemplate, ResourceBroker, ResourceConfig, DEFAULT_MAX_LAZY_RESOURCES,
};
pub use calendar::Calendar;
pub use entry::Permit;
pub use error::{Error, QueueError};
pub use field_error::FieldError;
pub use handle::ResourceHandle;
pub use leasing::{Leasing, Share, MAX_LEASE_TTL_MS, MIN_LEASE_TTL_MS};
pub use limits::{
    Algorithm, CalendarSpec, Demand, Dimension, LimitSpec, Limits, RateSpec, DEFAULT_LEASE_TTL, MAX_LIMIT,
    SUB_WINDOWS,
};
pub use limits_error::LimitsError;
pub use nest::{Nest, NestAcquisition, NestError};
pub use ppm::PPM;
pub use priority::Priority;
pub use queue::{Attempt, Request, Response, TaskError, UsageReport};
pub use queue_config::QueueConfig;
pub use stats::{BrokerStats, ResourceKind, ResourceStats, WaitTimes};
pub use units::UnitsDelta;
