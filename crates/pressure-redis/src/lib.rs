//! # pressure-redis
//!
//! [`RedisBackend`]: the state of a `pressure_core::ResourceBroker` held in
//! Redis, so a fleet of instances enforces one limit.
//!
//! * **One round trip per acquisition**: one script checks and reserves
//!   every dimension (rates, tokens, concurrency) or nothing, with EVALSHA
//!   (reloaded on NOSCRIPT). That script is generated at registration for
//!   the limit's shape — its dimensions, algorithm, window lengths and lease
//!   TTL baked in, straight-line, one `HMGET` and one `HSET` — and shared by
//!   every resource of that shape (`shape.rs`); `lua/acquire.lua`, the
//!   generic form it is checked against, serves shapes past a bound.
//!   Reconcile, renew, usage and release are single scripts too.
//! * **Server time only**: every script reads `TIME`, so instances with
//!   skewed clocks share one correct window. Time is counted in
//!   microseconds (exact in Lua's doubles); the algorithms and their bounds
//!   are pressure-core's (its crate docs, "Limits and their exact meaning")
//!   at that resolution: a `window` dimension keeps the time of its last
//!   grant (`w<d>:t`) next to its sub-windows, so the units of that grant's
//!   sub-window leave a window after it, not a window after the
//!   sub-window's end, and **a denial's wait is never longer than W**
//!   (`w<d>:tc`, that sub-window's units then, tells grants by versions
//!   that keep no `w<d>:t` apart: they keep their sub-window to its end).
//!   A `gcra` rate
//!   finer than one unit per microsecond cannot be represented and is
//!   refused at registration (use `window` for such token limits).
//! * **Cluster-safe keys**: all keys of a resource share one hash tag made
//!   from the escaped resource id ([`keys`]), so no tenant id can address
//!   another resource's keys and Redis Cluster works.
//! * **Leases** are fields of the resource's hash scored by expiry, swept in
//!   the script, and renewed in one call per resource by the broker's
//!   renewal task while their permits live.
//! * **Short timeouts and a failure mode**: every call has a timeout (50 ms by
//!   default). When Redis is unreachable or slow the configured
//!   [`FailureMode`] applies — `closed` (deny, with a
//!   [`pressure_core::DenialCause::Unavailable`] denial so a gateway answers
//!   503, not 429), `open` (allow) or `local` (an in-memory limiter with a
//!   share of each limit) — logged once per transition with the address and
//!   the real cause, counted, and left by itself when Redis answers again.
//! * **Redis down at start is not fatal**: [`RedisBackend::start`] returns
//!   without a connection; a background task reconnects, reloads the
//!   scripts and probes every 100 ms, with or without traffic.
//!   [`RedisBackend::connect`] is the strict variant that fails when Redis
//!   does not answer.
//! * **No ghost leases**: an acquisition whose reply was lost (timeout) and a
//!   release that failed are released in the background by their
//!   client-chosen lease id, retried until Redis answers; a tombstone makes a
//!   late script reserve nothing.
//! * **Cancellation-safe**: once a call has been handed to the connection,
//!   its outcome is settled even if the caller's future is dropped (a client
//!   that resets mid-admission): a task awaits the answer and gives back
//!   what was granted — the lease released, the units refunded — and a
//!   release or reconcile is delivered all the same (`settle.rs`; counted
//!   in [`RedisStatus::cancelled_calls`] and [`RedisStatus::cancel_releases`]).
//! * **Every key expires**: each script sets the expiry of what it writes in
//!   the same call, after the write that may create the key (the hash field
//!   `e` remembers it), no later than the longest window, TAT, lease or
//!   tombstone the key holds plus a margin of at most that again and at
//!   most 10 s; Redis memory follows the live resources.
//! * **Shared circuit breakers**: `RedisBackend` is also a
//!   [`pressure_core::shared_breaker::SharedBreakerStore`] (`lua/breaker.lua`):
//!   one breaker state per (provider, model) for the whole fleet, with a
//!   shared failure window and a fleet-wide half-open probe quota.
//! * **Local deny cache**: after the store denies a demand until `T`, the same
//!   or a larger demand is refused locally until `T`, with no round trip.
//! * **Repair of keys without an expiry**: [`gc`] (`pressure redis gc`)
//!   gives the keys that versions before the `e` mark left without a TTL
//!   the expiry they were meant to have, or deletes them when their content
//!   is past; one atomic script per key, so it runs on a live fleet.
//! * **Quota leasing** (per limit, `"leasing": {"maxShare": 0.1, "ttlMs":
//!   1000}`, off by default): one hot key is bounded by one shard's script
//!   calls per second; with leasing an instance reserves a batch of units
//!   in one call (`lua/lease.lua`, same hash tag, so Redis Cluster works),
//!   decides from it in memory, and gives back the unused units when the
//!   lease ends (in the call that takes its next lease, when the key cools
//!   down, when the resource or the backend is dropped). The batch is
//!   sized to the instance's decisions in the last TTL, and all
//!   outstanding leases of the fleet hold at most `maxShare × N`, kept in
//!   the resource's hash with one record and expiry per lease, so a dead
//!   instance's share of that budget comes back within `ttlMs`. Below
//!   4 eligible decisions per TTL an instance does not lease: a cold key
//!   keeps one exact call per decision. Only one-request demands without
//!   tokens or cost, at the full ceiling, without booking and without a
//!   concurrency lease are served from a lease (the rest go to the store);
//!   `maxConcurrentRequests` and the calendar dimensions are never leased
//!   (a limit with them only, or with a calendar dimension, leases
//!   nothing). The two bounds:
//!   * **Never more than N in any W** (`window`), and the `gcra` bound,
//!     as without leasing: a batch is checked and counted centrally when
//!     it is taken, as that many admissions, and *dated at the lease's
//!     end* — a `window` dimension counts it in the sub-window after the
//!     one holding the lease's end, a `gcra` TAT becomes at least the
//!     lease's end plus the batch's emission — so every leased unit, used
//!     at any moment of its lease, is counted at least W after its use.
//!     An instance serves a lease until its send time plus the TTL, never
//!     past the store's end of it. A killed instance's units stay counted
//!     (it may have used them all); only its share of the lease budget
//!     comes back at its TTL.
//!   * **Under-use is bounded by the lease length**: a leased unit counts
//!     at most `ttlMs` plus two sub-windows (2W/30) longer than a unit
//!     admitted by the store, so under saturation with every decision
//!     leased the fleet admits at least `W / (W + ttl + 2W/30)` of N per
//!     window (on top of the window's own 96.7 %); at most `maxShare × N`
//!     units are held unused by leases at any moment, each for at most
//!     `ttlMs`. With `gcra`, a lease taken on a nearly idle bucket costs
//!     it at most `ttlMs / T` units of burst once. A denial's wait stays
//!     at most W but may be short while dated units are counted (the retry
//!     is then denied again with a new wait).
//! * **Shared configuration**: [`SharedHash`] is a persistent hash under
//!   `<prefix>:{config}:` whose writes are announced on a pub/sub channel,
//!   so every instance applies a change one delivery after it is made (the
//!   gateway's live tenant limit overrides).

#![warn(unreachable_pub)]

mod any;
mod backend;
mod background;
mod client;
mod config;
mod conn;
mod gc;

pub use conn::{connect, Conn as RedisConnection};
mod health;
pub mod keys;
mod lease;
mod scripts;
mod settle;
mod shape;
mod shared_breaker;
mod shared_hash;
mod slot_map;
mod store;

pub use any::{AnyBackend, AnyHandle};
pub use backend::{RedisBackend, RedisHandle, RedisStatus};
pub use config::{FailureMode, RedisConfig, RedisTlsConfig};
/// The one-off repair of keys left without an expiry by older versions
/// (`pressure redis gc`, docs/runbook.md "Redis keys without an expiry").
pub use gc::{gc, GcOptions, GcReport};
/// A small hash of configuration the fleet shares and watches (the
/// gateway's live tenant limit overrides); persistent, left alone by [`gc`].
pub use shared_hash::{SharedHash, SharedHashEvent};
