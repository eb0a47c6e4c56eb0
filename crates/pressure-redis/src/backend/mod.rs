//! [`RedisBackend`]: the `Backend` operations as single scripts over a
//! shared, pipelined connection pool, with the failure mode and the local
//! deny cache around them.
//!
//! # Store down, store slow
//! The backend never needs Redis to exist: [`RedisBackend::start`] returns
//! at once with whatever connections it could open, the failure mode
//! answers while there are none, and a background task (see
//! `background.rs`) reconnects, reloads the scripts and probes until Redis
//! answers — with or without traffic.
//!
//! # Lost replies never hold a slot
//! A caller waits at most the call timeout; past it the call goes on in a
//! task (`settle.rs`) that waits up to 10 s more for the answer and settles
//! it as for a caller that went away (below). A lease id is chosen here,
//! before the script runs. When an acquisition that asked for a lease gets
//! no reply at all (connection lost after the send, or nothing within those
//! 10 s), the script may still run later in Redis: the backend then releases
//! that lease id in the background, retried until Redis answers (bounded by
//! the lease TTL plus a margin), and the release leaves a tombstone so an
//! acquisition that arrives after its own release reserves nothing. Rate
//! units such an acquisition reserved stay counted: that errs on the safe
//! side, while a concurrency slot comes back within about one retry interval
//! (≤ 400 ms) of Redis answering again. A release that fails is retried the
//! same way.
//!
//! # Vanished callers leave nothing
//! Acquire, release and reconcile run as `Settled` calls (`settle.rs`): a
//! caller dropped while its call is in flight — a client that reset its
//! connection — hands the call to a task. An acquisition's grant is then
//! given back whole (lease released, units refunded at the instant they
//! were counted), as if it had never been asked; a release or a correction
//! is delivered all the same. Renewals need no such care: a lost renewal
//! leaves the lease held by a permit that still lives, and the renewal task
//! repeats it. On the LLM path this covers the reservation: a client gone
//! while its tokens were being reserved leaves no tokens and no slot; one
//! gone after the provider was called leaves its estimate counted (the
//! provider counts that call too) and its slot released.

mod acquire_args;
mod dims;
mod lost;
mod nested;
mod ops;
mod reconcile;

use crate::background;
use crate::config::{FailureMode, RedisConfig};
use crate::conn::{self, Pool};
use crate::health::Health;
use crate::keys::{member, ResourceKeys};
use crate::lease;
use crate::scripts;
use crate::shape::Shape;
use crate::store::{Failure, LostKind, ShapeScript, Store};
use acquire_args::{AcquireArgs, AcquireScript};
use dims::{dims_of, Dim};
use lost::LostAcquisition;
use parking_lot::Mutex;
use pressure_core::clock::{Clock, MonotonicClock, WallShift};
use pressure_core::MemoryHandle;
use pressure_core::{
    BackendError, Decision, Demand, Denial, Dimension, Grant, LeaseId, LimitSpec, Limits, LocalBackend,
    MemoryBackend, RateSpec, Reserved,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[cfg(test)]
use reconcile::{changes, reconcile_invocation, Change};

/// Wait suggested by a `closed` failure-mode denial.
const CLOSED_RETRY: Duration = Duration::from_secs(1);

/// Limiter state in Redis, shared by every instance that points at it.
/// Cheap to clone.
#[derive(Clone)]
pub struct RedisBackend {
    pub(crate) store: Arc<Store>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("url", &self.store.config.url)
            .field("cluster_nodes", &self.store.config.cluster_nodes)
            .field("healthy", &self.store.health.is_healthy())
            .finish_non_exhaustive()
    }
}

/// Health of a [`RedisBackend`], for metrics, `/healthz` and the start-up
/// log line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedisStatus {
    /// Whether every shard answers: the last call to each reached Redis
    /// and was not refused (OOM, READONLY, BUSY, ...).
    pub healthy: bool,
    /// The shards in failure mode now: the single Redis's address, or the
    /// `host:port` of each cluster master that is out (its slots' limits
    /// follow the failure mode; the other masters' keep counting).
    pub unhealthy_shards: Vec<String>,
    /// Shards known: 1 for a single Redis; a cluster's masters once its
    /// slot map is read (1 until then).
    pub shards: usize,
    /// Calls that failed or timed out.
    pub failures: u64,
    /// Acquisitions answered by the failure mode.
    pub fallbacks: u64,
    /// Healthy ↔ unavailable transitions.
    pub transitions: u64,
    /// The store's address (`redis://host:port/db`, or `cluster <seeds>`),
    /// any password replaced by `***`.
    pub url: String,
    /// The most recent failure with its real cause — "connection refused",
    /// "timed out after 500 ms", "authentication failed: …", "no answer
    /// within 50 ms" — kept after recovery; `None` if Redis never failed.
    pub last_error: Option<String>,
    /// Lease releases waiting for Redis (lost acquisitions, failed releases).
    pub pending_releases: u64,
    /// Store calls (acquire, release, reconcile) whose caller went away
    /// before the answer — a client that reset its connection, a dropped
    /// future, a caller that gave up at the call timeout — and that the
    /// backend finished and settled itself.
    pub cancelled_calls: u64,
    /// Leases and reservations given back because the caller of their
    /// acquisition went away before its answer (each would otherwise have
    /// held its slot for the lease TTL, its units for the window).
    pub cancel_releases: u64,
    /// Quota leasing: calls of the lease script (a lease taken, with the
    /// previous one given back, or one given back alone).
    pub lease_calls: u64,
    /// Quota leasing: decisions answered from a lease in memory, with no
    /// store call.
    pub leased_decisions: u64,
}

/// Per-resource addressing and script arguments, computed once.
#[derive(Debug)]
pub struct RedisHandle {
    keys: ResourceKeys,
    /// The group the resource is in (`Backend::attach_grouped`): its keys
    /// carry the group's hash tag. A resource attached without a group is
    /// in the group named by its own id, whose tag its keys carry.
    group: Box<str>,
    spec: Arc<LimitSpec>,
    /// Shared with the calls in flight, which settle by them when their
    /// caller goes away (`settle.rs`).
    dims: Arc<[Dim]>,
    local: Option<MemoryHandle>,
    deny: Mutex<Option<Denied>>,
    /// Shared with the handles of the resource's other limits (reattach),
    /// so the counts continue across a change.
    tally: Arc<Tally>,
    /// The acquire script generated for this limit's shape; `None`: the
    /// generic `lua/acquire.lua`.
    shaped: Option<Arc<ShapeScript>>,
    /// Quota leasing of this limit, when on (`lease/`).
    /// Boxed: most limits lease nothing, and the handle stays small.
    leases: Option<Box<lease::Book>>,
}

/// Acquisitions this process made on one resource.
#[derive(Debug, Default)]
struct Tally {
    allowed: AtomicU64,
    denied: AtomicU64,
}

/// How long the deny cache keeps a calendar dimension's denial: its wait
/// runs to the end of a day or month, and a refund (reconcile down) by
/// another instance may free budget long before that.
const CALENDAR_DENY_CACHE: Duration = Duration::from_secs(1);

/// A denial remembered by the deny cache.
#[derive(Debug, Clone, Copy)]
struct Denied {
    /// Refused locally until then (local clock).
    until_ns: u64,
    /// The end of the denial's wait (local clock): at or after `until_ns`.
    wait_until_ns: u64,
    demand: Demand,
    dimension: Dimension,
}

impl RedisBackend {
    /// A backend for `config` that does not need Redis to answer: it opens
    /// what connections it can (each attempt bounded by `connectTimeoutMs`),
    /// and if Redis is down it starts unhealthy — the failure mode applies,
    /// [`RedisBackend::status`] names the address and the cause for the
    /// start-up log — while a background task reconnects and probes every
    /// 100 ms, so limits are enforced by Redis again within a probe interval
    /// of it answering, with or without traffic. Fails only on an invalid
    /// configuration.
    pub async fn start(config: RedisConfig) -> Result<Self, BackendError> {
        config
            .validate()
            .map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let pool = Pool::new(&config);
        let mut error = None;
        for slot in pool.empty_slots() {
            match conn::open(&config).await {
                Ok(c) => {
                    background::preload_scripts(&config, &c, &[]).await;
                    pool.fill(slot, c);
                }
                Err(cause) => {
                    // The others would fail alike: leave them to the task.
                    error = Some(cause);
                    break;
                }
            }
        }
        let address = conn::display_address(&config);
        let error = if pool.is_connected() { None } else { error };
        let connections = if config.cluster_nodes.is_empty() {
            config.connections.max(1)
        } else {
            4
        };
        let turns = crate::store::IN_FLIGHT_PER_CONNECTION.saturating_mul(connections);
        let store = Arc::new(Store {
            pool,
            health: Health::new(
                config.failure_mode,
                address,
                !config.cluster_nodes.is_empty(),
                error,
            ),
            local: MemoryBackend::new(),
            clock: MonotonicClock::new(),
            config,
            lost: Mutex::new(Vec::new()),
            replays: Mutex::new(Vec::new()),
            turns: Arc::new(tokio::sync::Semaphore::new(turns)),
            wake: Arc::new(tokio::sync::Notify::new()),
            shapes: Mutex::new(HashMap::new()),
            cancelled_calls: AtomicU64::new(0),
            cancel_releases: AtomicU64::new(0),
            leasing: Default::default(),
            wall_shift: WallShift::new(),
        });
        tokio::spawn(background::run(Arc::downgrade(&store), Arc::clone(&store.wake)));
        Ok(Self { store })
    }

    /// [`RedisBackend::start`], but fails when Redis does not answer at
    /// start, with the address and the real cause ("redis://127.0.0.1:6379:
    /// connection refused"). For tools that need the store now; a server
    /// should `start` and let the failure mode cover the outage.
    pub async fn connect(config: RedisConfig) -> Result<Self, BackendError> {
        let b = Self::start(config).await?;
        if b.store.pool.is_connected() {
            return Ok(b);
        }
        let cause = b
            .store
            .health
            .last_error()
            .unwrap_or_else(|| "no connection".into());
        Err(BackendError::Unavailable(format!(
            "{}: {cause}",
            b.store.health.address
        )))
    }

    /// Health counters, the address and the last error.
    pub fn status(&self) -> RedisStatus {
        let h = &self.store.health;
        RedisStatus {
            healthy: h.is_healthy(),
            unhealthy_shards: h.unhealthy(),
            shards: h.shards().len(),
            failures: h.failures.load(Ordering::Relaxed),
            fallbacks: h.fallbacks.load(Ordering::Relaxed),
            transitions: h.transitions.load(Ordering::Relaxed),
            url: h.address.clone(),
            last_error: h.last_error(),
            pending_releases: u64::try_from(self.store.lost.lock().len()).unwrap_or(u64::MAX),
            cancelled_calls: self.store.cancelled_calls.load(Ordering::Relaxed),
            cancel_releases: self.store.cancel_releases.load(Ordering::Relaxed),
            lease_calls: self.store.leasing.calls.load(Ordering::Relaxed),
            leased_decisions: self.store.leasing.served.load(Ordering::Relaxed),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &RedisConfig {
        &self.store.config
    }

    /// The offset this backend adds to the Redis server's `TIME` for the
    /// calendar dimensions' periods (a UTC day, a UTC month); zero unless
    /// set, so every instance of a fleet agrees on the server's clock. For
    /// tests that cross a day or month boundary, and for a known skew of
    /// the server's clock; set it before traffic (a change re-dates earlier
    /// grants too). Turn the deny cache off in tests that move it: a cached
    /// denial lasts until the reset as dated before the move.
    pub fn wall_shift(&self) -> &WallShift {
        &self.store.wall_shift
    }

    /// The wall-time offset in µs, as the scripts take it.
    fn offset_us(&self) -> i64 {
        self.store.offset_us()
    }

    /// The Lua source of the acquire script this backend sends for limits
    /// `spec`: the one generated for its shape (rate dimensions, algorithm,
    /// window lengths, lease TTL), or the generic `lua/acquire.lua` when
    /// the shape gets none. Its SHA1 is what `SCRIPT EXISTS`, `SLOWLOG` and
    /// `MONITOR` show; benchmarks load it into a Redis of their own. Fails
    /// as registration would (a gcra rate finer than 1 µs).
    pub fn acquire_script(&self, spec: &LimitSpec) -> Result<String, BackendError> {
        let dims = dims_of(spec)?;
        let steps: Vec<u64> = dims.iter().map(|d| d.step_us).collect();
        Ok(
            match Shape::of(spec, &steps).and_then(|s| self.store.shape_script(s)) {
                Some(s) => s.source.clone(),
                None => scripts::ACQUIRE_LUA.to_owned(),
            },
        )
    }

    /// Runs one script invocation with the call timeout, updating health.
    async fn call<T: redis::FromRedisValue>(
        &self,
        key: &str,
        inv: redis::ScriptInvocation<'_>,
    ) -> Result<T, Failure> {
        self.store.call(key, inv).await
    }

    /// Queues the background release of `lease` (`kind` says whether its
    /// acquisition's reply was lost or its release failed).
    fn lose(&self, h: &RedisHandle, lease: u64, kind: LostKind) {
        self.store
            .lose(h.keys.state.clone(), lease, h.spec.lease_ttl_ns, kind);
    }

    /// The store's decision on `demand` (through quota leasing when it is
    /// on), or the failure mode's while the key's shard is out (one caller
    /// per probe interval still asks it) or when the call fails.
    async fn acquire_in_store(&self, h: &RedisHandle, demand: &Demand) -> Result<Decision, BackendError> {
        let health = &self.store.health;
        let shard = health.shard(&h.keys.state);
        if !health.should_try(&shard) {
            return Ok(self.fallback(h, demand));
        }
        let lease = (demand.lease && h.spec.concurrency.is_some()).then(rand::random::<u64>);
        let remote = match h.leases.as_ref().and_then(|b| b.refill(demand)) {
            Some(refill) => {
                (refill.run(&self.store).await).and_then(|reply| self.decide(h, demand, None, &reply))
            }
            None => self.acquire_remote(h, demand, lease).await,
        };
        match remote {
            Ok(d) => {
                if matches!(d, Decision::Granted(_)) {
                    // A grant is a write the store accepted: a shard out
                    // for refusing writes is back.
                    health.written(&shard);
                }
                Ok(d)
            }
            Err(f) => {
                if let (true, false, Some(lease)) = (f.sent, f.owned, lease) {
                    // The script may still run: give its lease back.
                    self.lose(h, lease, LostKind::Acquisition);
                }
                match f.error {
                    BackendError::Protocol(e) => Err(BackendError::Protocol(e)),
                    _ => Ok(self.fallback(h, demand)),
                }
            }
        }
    }

    fn fallback(&self, h: &RedisHandle, demand: &Demand) -> Decision {
        self.store.health.fallbacks.fetch_add(1, Ordering::Relaxed);
        match (self.store.config.failure_mode, &h.local) {
            (FailureMode::Local, Some(local)) => match self.store.local.acquire_now(local, demand) {
                Decision::Granted(mut g) => {
                    g.fallback = true;
                    Decision::Granted(g)
                }
                denied => denied,
            },
            (FailureMode::Open, _) => Decision::Granted(Grant {
                at_ns: 0,
                delay_ns: 0,
                lease: None,
                reserved: Reserved::from(demand),
                fallback: true,
            }),
            _ => closed(h),
        }
    }

    /// One acquisition in Redis with the shape's script (or the generic
    /// one), as a [`Settled`] call: a caller that goes away before the
    /// answer leaves nothing behind — a task awaits the answer and gives
    /// back what it granted ([`LostAcquisition::settle`]).
    async fn acquire_remote(
        &self,
        h: &RedisHandle,
        demand: &Demand,
        lease: Option<u64>,
    ) -> Result<Decision, Failure> {
        let conc = match (lease, h.spec.concurrency) {
            (Some(_), Some(c)) => RateSpec::scaled(c, demand.ceiling_ppm),
            _ => 0,
        };
        let lease_member = member(lease.unwrap_or(0));
        let argv = AcquireArgs {
            dims: &h.dims,
            spec: &h.spec,
            demand,
            conc,
            member: &lease_member,
            offset_us: self.offset_us(),
        };
        let (script, args) = match &h.shaped {
            Some(s) => (AcquireScript::Shaped(Arc::clone(s)), argv.shaped(&s.shape)),
            None => (AcquireScript::Generic, argv.generic()),
        };
        let key = h.keys.state.clone();
        let call = {
            let (store, key) = (Arc::clone(&self.store), key.clone());
            async move {
                let mut inv = script.get().prepare_invoke();
                inv.key(&key);
                for a in &args {
                    inv.arg(a);
                }
                store.call_untimed::<Vec<i64>>(&key, inv).await
            }
        };
        let lost = LostAcquisition {
            store: Arc::clone(&self.store),
            key,
            lease,
            lease_ttl_ns: h.spec.lease_ttl_ns,
            dims: Arc::clone(&h.dims),
            spec: Arc::clone(&h.spec),
            demand: *demand,
        };
        let v = self
            .store
            .call_settled(&h.keys.state, call, move |answer| lost.settle(answer))
            .await?;
        self.decide(h, demand, lease, &v)
    }

    /// The decision of an acquire script's reply `v`.
    pub(crate) fn decide(
        &self,
        h: &RedisHandle,
        demand: &Demand,
        lease: Option<u64>,
        v: &[i64],
    ) -> Result<Decision, Failure> {
        let [flag, a, b] = v[..] else {
            return Err(Failure {
                error: BackendError::Protocol(format!("acquire returned {v:?}")),
                sent: true,
                owned: false,
            });
        };
        let (a, b) = (scripts::reply_u64(a), scripts::reply_u64(b));
        if flag == 2 {
            // The lease id was already given up (tombstone): nothing reserved.
            return Ok(closed(h));
        }
        if flag == 1 {
            return Ok(Decision::Granted(Grant {
                at_ns: a.saturating_mul(1_000),
                delay_ns: b.saturating_mul(1_000),
                lease: lease.map(LeaseId),
                reserved: Reserved::from(demand),
                fallback: false,
            }));
        }
        let dimension = Dimension::from_index(usize::try_from(b).unwrap_or(usize::MAX))
            .unwrap_or(Dimension::MaxConcurrentRequests);
        let denial = Denial::exhausted(Duration::from_micros(a), dimension);
        if self.store.config.deny_cache && denial.is_exact() {
            let now = self.store.clock.now_nanos();
            let wait_until_ns = now + a.saturating_mul(1_000);
            let until_ns = match dimension.calendar() {
                Some(_) => {
                    wait_until_ns.min(now + pressure_core::clock::duration_to_nanos(CALENDAR_DENY_CACHE))
                }
                None => wait_until_ns,
            };
            *h.deny.lock() = Some(Denied {
                until_ns,
                wait_until_ns,
                demand: *demand,
                dimension,
            });
        }
        Ok(Decision::Denied(denial))
    }

    /// The local deny cache: a demand at least as large as one the store
    /// denied until `T`, at the same or a lower ceiling, cannot fit before `T`.
    #[inline]
    fn cached_denial(&self, h: &RedisHandle, demand: &Demand) -> Option<Decision> {
        if !self.store.config.deny_cache {
            return None;
        }
        let guard = h.deny.lock();
        let d = guard.as_ref()?;
        let now = self.store.clock.now_nanos();
        let dominated = demand.requests >= d.demand.requests
            && demand.input_tokens >= d.demand.input_tokens
            && demand.output_tokens >= d.demand.output_tokens
            && demand.cost_micro_usd >= d.demand.cost_micro_usd
            && demand.ceiling_ppm <= d.demand.ceiling_ppm
            && demand.book_within_ns <= d.demand.book_within_ns;
        (now < d.until_ns && dominated).then(|| {
            Decision::Denied(Denial::exhausted(
                Duration::from_nanos(d.wait_until_ns - now),
                d.dimension,
            ))
        })
    }
}

/// The `closed` failure mode's refusal: marked as an outage, not a limit.
fn closed(h: &RedisHandle) -> Decision {
    Decision::Denied(Denial::unavailable(
        CLOSED_RETRY,
        h.dims
            .first()
            .map(|d| d.rate.dimension)
            .unwrap_or(Dimension::MaxConcurrentRequests),
    ))
}

/// The limits a process may use alone in `local` mode: `share` of each.
fn local_limits(limits: &Limits, share: f64) -> Limits {
    limits.map_values(|v| ((v as f64 * share).floor() as u64).max(1))
}

#[cfg(test)]
mod shape_equiv_tests;

#[cfg(test)]
mod script_expiry_tests;

#[cfg(test)]
mod window_wait_tests;
