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

use crate::background;
use crate::config::{FailureMode, RedisConfig};
use crate::conn::{self, Pool};
use crate::health::Health;
use crate::keys::ResourceKeys;
use crate::lease;
use crate::scripts;
use crate::settle::Settled;
use crate::shape::{self, calendar_kind, CalendarArgs, RateArgs, Shape};
use crate::store::{release_invocation, Failure, Lost, LostKind, ShapeScript, Store};
use parking_lot::Mutex;
use pressure_core::clock::{Clock, MonotonicClock, WallShift};
use pressure_core::{
    Algorithm, Backend, BackendError, CalendarSpec, Counts, Decision, Demand, Denial, Dimension, Grant,
    LeaseId, LimitSpec, Limits, LocalBackend, MemoryBackend, RateSpec, Reserved,
};
use pressure_core::{MemoryHandle, UnitsDelta, Usage};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Wait suggested by a `closed` failure-mode denial.
const CLOSED_RETRY: Duration = Duration::from_secs(1);

/// How long a tombstone of a lost acquisition keeps refusing its lease id
/// (at least the lease TTL).
const TOMBSTONE_MIN: Duration = Duration::from_secs(60);

/// How long past the lease TTL a lost lease is still worth releasing: by
/// then a lease the late script created has expired by itself.
const LOST_MARGIN: Duration = Duration::from_secs(10);

/// How long a call whose caller went away (or gave up at the call
/// timeout) waits for its answer before its outcome counts as lost (a lease
/// then goes back by the background release and its tombstone).
const ORPHAN_WAIT: Duration = Duration::from_secs(10);

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

#[derive(Debug, Clone)]
struct Dim {
    rate: RateSpec,
    gcra: bool,
    /// gcra: emission interval; window: sub-window length (microseconds).
    step_us: u64,
    /// The window length W (microseconds): a window dimension's units all
    /// leave W after its last grant.
    window_us: u64,
    /// Hash fields: gcra `g<d>` and the T it was counted with `g<d>t`;
    /// window the prefix `w<d>:` of its sub-windows (and of `w<d>:t`, the
    /// time of its last grant), its sum `w<d>:s` and its oldest sub-window
    /// `w<d>:lo`.
    fields: [String; 3],
}

impl Dim {
    /// This dimension's per-call arguments for `demand`: units, and the
    /// limit scaled by its ceiling (gcra: as a tolerance in µs).
    fn args(&self, demand: &Demand) -> RateArgs {
        let limit = if self.gcra {
            RateSpec::scaled(self.rate.capacity, demand.ceiling_ppm).saturating_mul(self.step_us)
        } else {
            RateSpec::scaled(self.rate.limit, demand.ceiling_ppm)
        };
        RateArgs {
            units: self.rate.units(demand),
            limit,
            step_us: self.step_us,
        }
    }
}

/// The rate dimensions of `spec` as the scripts count them; refuses a
/// `gcra` rate finer than 1 µs.
fn dims_of(spec: &LimitSpec) -> Result<Vec<Dim>, BackendError> {
    let mut dims = Vec::with_capacity(spec.rates.len());
    for r in &spec.rates {
        let window_us = r.window_ns / 1_000;
        let gcra = r.algorithm == Algorithm::Gcra;
        let step_us = if gcra {
            if r.limit > window_us {
                return Err(BackendError::Unsupported(format!(
                    "{}: {} per window is finer than the store's 1 µs resolution with gcra; use window",
                    r.dimension, r.limit
                )));
            }
            window_us.div_ceil(r.limit)
        } else {
            window_us.div_ceil(pressure_core::SUB_WINDOWS)
        };
        let id = r.dimension.index();
        dims.push(Dim {
            rate: *r,
            gcra,
            step_us,
            window_us,
            fields: if gcra {
                [format!("g{id}"), format!("g{id}t"), "-".to_owned()]
            } else {
                [format!("w{id}:"), format!("w{id}:s"), format!("w{id}:lo")]
            },
        });
    }
    Ok(dims)
}

/// What one acquisition sends, whichever script counts it.
struct AcquireArgs<'a> {
    dims: &'a [Dim],
    spec: &'a LimitSpec,
    demand: &'a Demand,
    /// The concurrency limit scaled by the ceiling; 0 without a lease.
    conc: u64,
    /// The lease's member in the concurrency set.
    member: &'a str,
    /// The wall-time offset for calendar periods (µs).
    offset_us: i64,
}

impl AcquireArgs<'_> {
    /// `ARGV` of one call of the generic `lua/acquire.lua` (see its header).
    fn generic(&self) -> Vec<String> {
        let (dims, spec, demand) = (self.dims, self.spec, self.demand);
        let mut out = Vec::with_capacity(dims.len() * 9 + 5);
        out.push(dims.len().to_string());
        for d in dims {
            let a = d.args(demand);
            out.push(u8::from(d.gcra).to_string());
            out.push(d.rate.dimension.index().to_string());
            out.push(a.units.to_string());
            out.push(a.limit.to_string());
            out.push(d.step_us.to_string());
            out.push(d.window_us.to_string());
            out.extend(d.fields.iter().cloned());
        }
        out.push(self.conc.to_string());
        out.push((spec.lease_ttl_ns / 1_000).to_string());
        out.push(self.member.to_owned());
        out.push((demand.book_within_ns / 1_000).to_string());
        out.extend(calendar_args(spec, demand, self.offset_us));
        out
    }

    /// `ARGV` of one call of the script generated for `shape` (see
    /// [`shape::generate`]).
    fn shaped(&self, shape: &Shape) -> Vec<String> {
        let rates: Vec<RateArgs> = self.dims.iter().map(|d| d.args(self.demand)).collect();
        let calendars = CalendarArgs {
            offset_us: self.offset_us,
            dims: calendar_units(self.spec, self.demand).collect(),
        };
        shape::args(
            shape,
            &rates,
            self.conc,
            self.member,
            self.demand.book_within_ns / 1_000,
            &calendars,
        )
    }
}

#[cfg(test)]
impl<'a> AcquireArgs<'a> {
    /// A test's acquisition that takes no concurrency slot.
    fn unleased(
        dims: &'a [Dim],
        spec: &'a LimitSpec,
        demand: &'a Demand,
        member: &'a str,
        offset_us: i64,
    ) -> Self {
        Self {
            dims,
            spec,
            demand,
            conc: 0,
            member,
            offset_us,
        }
    }
}

/// The calendar part of an acquire script's `ARGV` (see `lua/acquire.lua`):
/// the number of calendar dimensions, the wall-time offset (µs), and per
/// dimension its kind, id, units and limit scaled by the ceiling. Always
/// sent, so the arguments that follow it in tests stay in place.
fn calendar_args(spec: &LimitSpec, demand: &Demand, offset_us: i64) -> Vec<String> {
    let mut out = Vec::with_capacity(2 + 4 * spec.calendars.len());
    out.push(spec.calendars.len().to_string());
    out.push(offset_us.to_string());
    for (c, (units, limit)) in spec.calendars.iter().zip(calendar_units(spec, demand)) {
        out.push(calendar_kind(c.calendar).to_string());
        out.push(c.dimension.index().to_string());
        out.push(units.to_string());
        out.push(limit.to_string());
    }
    out
}

/// Per calendar dimension of `spec`: the units `demand` asks for and the
/// limit scaled by its ceiling.
fn calendar_units<'a>(spec: &'a LimitSpec, demand: &'a Demand) -> impl Iterator<Item = (u64, u64)> + 'a {
    spec.calendars
        .iter()
        .map(|c| (c.units(demand), RateSpec::scaled(c.limit, demand.ceiling_ppm)))
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
            pending_releases: self.store.lost.lock().len() as u64,
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
            Some(refill) => refill.run(self, h, demand).await,
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
        let (a, b) = (a.max(0) as u64, b.max(0) as u64);
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
        let dimension = Dimension::from_index(b as usize).unwrap_or(Dimension::MaxConcurrentRequests);
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

pub(crate) fn member(lease: u64) -> String {
    format!("{lease:016x}")
}

/// The limits a process may use alone in `local` mode: `share` of each.
fn local_limits(limits: &Limits, share: f64) -> Limits {
    limits.map_values(|v| ((v as f64 * share).floor() as u64).max(1))
}

impl Backend for RedisBackend {
    type Handle = RedisHandle;

    fn attach(&self, resource: &str, spec: Arc<LimitSpec>) -> Result<RedisHandle, BackendError> {
        let dims = dims_of(&spec)?;
        let local = match self.store.config.failure_mode {
            FailureMode::Local => {
                let limits = local_limits(&spec.limits, self.store.config.local_share);
                let local_spec = limits
                    .compile()
                    .map_err(|e| BackendError::Unsupported(format!("local share of the limits: {e}")))?;
                Some(self.store.local.attach(resource, Arc::new(local_spec))?)
            }
            _ => None,
        };
        let steps: Vec<u64> = dims.iter().map(|d| d.step_us).collect();
        let shaped = Shape::of(&spec, &steps).and_then(|s| self.store.shape_script(s));
        let keys = ResourceKeys::new(&self.store.config.key_prefix, resource);
        let one = Demand {
            lease: false,
            ..Demand::default()
        };
        let leases = lease::Book::new(
            Arc::clone(&self.store),
            keys.state.clone(),
            &spec,
            AcquireArgs {
                dims: &dims,
                spec: &spec,
                demand: &one,
                conc: 0,
                member: &member(0),
                offset_us: 0,
            }
            .generic(),
        )
        .map(Box::new);
        Ok(RedisHandle {
            keys,
            leases,
            spec,
            dims: dims.into(),
            local,
            deny: Mutex::new(None),
            tally: Arc::default(),
            shaped,
        })
    }

    /// The state is in Redis under the resource's key, by dimension: the new
    /// script arguments continue it (window sub-windows count units, a
    /// `gcra` TAT is rescaled by the script to the new emission interval,
    /// leases are fields of the same hash). Only the local fallback state
    /// and the counts are carried here; the deny cache starts empty.
    fn reattach(
        &self,
        resource: &str,
        old: &RedisHandle,
        spec: Arc<LimitSpec>,
    ) -> Result<RedisHandle, BackendError> {
        let mut h = self.attach(resource, Arc::clone(&spec))?;
        if let (Some(old_local), Some(_)) = (&old.local, &h.local) {
            let limits = local_limits(&spec.limits, self.store.config.local_share);
            let local_spec = limits
                .compile()
                .map_err(|e| BackendError::Unsupported(format!("local share of the limits: {e}")))?;
            h.local = Some(
                self.store
                    .local
                    .reattach(resource, old_local, Arc::new(local_spec))?,
            );
        }
        h.tally = Arc::clone(&old.tally);
        Ok(h)
    }

    async fn acquire(&self, h: &RedisHandle, demand: &Demand) -> Result<Decision, BackendError> {
        let decision = if let Some(d) = self.cached_denial(h, demand) {
            d
        } else if let Some(d) = h.leases.as_ref().and_then(|b| b.serve(demand)) {
            d
        } else {
            self.acquire_in_store(h, demand).await?
        };
        match decision {
            Decision::Granted(_) => h.tally.allowed.fetch_add(1, Ordering::Relaxed),
            Decision::Denied(_) if demand.count_denial => h.tally.denied.fetch_add(1, Ordering::Relaxed),
            Decision::Denied(_) => 0,
        };
        Ok(decision)
    }

    fn counts(&self, h: &RedisHandle) -> Counts {
        Counts {
            allowed: h.tally.allowed.load(Ordering::Relaxed),
            denied: h.tally.denied.load(Ordering::Relaxed),
        }
    }

    async fn release(&self, h: &RedisHandle, grant: &Grant) -> Result<(), BackendError> {
        if grant.fallback {
            if let Some(local) = &h.local {
                self.store.local.release_detached(local, *grant);
            }
            return Ok(());
        }
        let Some(lease) = grant.lease else { return Ok(()) };
        // Settled: a caller that goes away mid-call (or gives up at the
        // timeout) still has its lease released: the connection would drop
        // an unwritten command whose caller is gone.
        let (store, key, ttl) = (Arc::clone(&self.store), h.keys.state.clone(), h.spec.lease_ttl_ns);
        let call = {
            let (store, key) = (Arc::clone(&store), key.clone());
            let members = [member(lease.0)];
            async move {
                store
                    .call_untimed::<i64>(&key, release_invocation(&key, 0, &members))
                    .await
            }
        };
        let answer = self
            .store
            .call_settled(&h.keys.state, call, move |answer| {
                if matches!(answer, Some(Ok(_))) {
                    // Answered past its caller's timeout: around an outage.
                    store.replay_later(&key, member(lease.0), true);
                } else {
                    store.lose(key, lease.0, ttl, LostKind::Release);
                }
            })
            .await;
        match answer {
            Ok(_) => {
                self.store.replay_later(&h.keys.state, member(lease.0), false);
                Ok(())
            }
            Err(f) if f.owned => Err(f.error),
            Err(f) => {
                // Retried in the background until Redis answers.
                self.lose(h, lease.0, LostKind::Release);
                Err(f.error)
            }
        }
    }

    fn release_detached(&self, h: &RedisHandle, grant: Grant) {
        if grant.fallback {
            if let Some(local) = &h.local {
                self.store.local.release_detached(local, grant);
            }
            return;
        }
        let Some(lease) = grant.lease else { return };
        self.store
            .release_detached(h.keys.state.clone(), lease.0, h.spec.lease_ttl_ns);
    }

    async fn renew(&self, h: &RedisHandle, grant: &Grant) -> Result<bool, BackendError> {
        let v = self.renew_many(h, std::slice::from_ref(grant)).await?;
        Ok(v.first().copied().unwrap_or(false))
    }

    /// One script call renews every remote lease of the batch; local
    /// fallback leases renew in memory.
    async fn renew_many(&self, h: &RedisHandle, grants: &[Grant]) -> Result<Vec<bool>, BackendError> {
        let mut out = vec![false; grants.len()];
        let mut remote = Vec::new();
        for (i, g) in grants.iter().enumerate() {
            match (g.fallback, g.lease, &h.local) {
                (true, Some(_), Some(local)) => out[i] = self.store.local.renew(local, g).await?,
                (false, Some(lease), _) => remote.push((i, member(lease.0))),
                _ => {}
            }
        }
        if remote.is_empty() {
            return Ok(out);
        }
        let mut inv = scripts::RENEW.prepare_invoke();
        inv.key(&h.keys.state).arg(h.spec.lease_ttl_ns / 1_000);
        for (_, m) in &remote {
            inv.arg(m);
        }
        let kept: Vec<i64> = self.call(&h.keys.state, inv).await?;
        if kept.len() != remote.len() {
            return Err(BackendError::Protocol(format!("renew returned {kept:?}")));
        }
        for ((i, _), k) in remote.iter().zip(kept) {
            out[*i] = k == 1;
        }
        Ok(out)
    }

    async fn reconcile(&self, h: &RedisHandle, grant: &Grant, actual: &Reserved) -> Result<(), BackendError> {
        if grant.fallback {
            return match &h.local {
                Some(local) => self.store.local.reconcile(local, grant, actual).await,
                None => Ok(()),
            };
        }
        let before = Demand::from(&grant.reserved);
        let after = Demand::from(actual);
        let changes = changes(&h.dims, &h.spec, |units| (units(&before), units(&after)));
        if changes.is_empty() {
            return Ok(());
        }
        if delta_frees(&before, &after) {
            // Before the call: once it is sent the units may be free, and
            // the call outlives a caller that goes away.
            *h.deny.lock() = None;
        }
        let (store, key, at_us) = (Arc::clone(&self.store), h.keys.state.clone(), grant.at_ns / 1_000);
        let offset_us = self.offset_us();
        let call = async move {
            store
                .call_untimed::<i64>(&key, reconcile_invocation(&key, at_us, &changes, offset_us))
                .await
        };
        match self.store.call_settled(&h.keys.state, call, |_| {}).await {
            // Past the timeout the correction is the backend's to deliver
            // (when Redis answers): the permit counts it as made.
            Ok(_) | Err(Failure { owned: true, .. }) => Ok(()),
            Err(f) => Err(f.error),
        }
    }

    async fn usage(&self, h: &RedisHandle) -> Result<Usage, BackendError> {
        let mut inv = scripts::USAGE.prepare_invoke();
        inv.key(&h.keys.state).arg(h.dims.len());
        for d in h.dims.iter() {
            inv.arg(u8::from(d.gcra))
                .arg(d.rate.dimension.index())
                .arg(d.step_us)
                .arg(d.window_us);
        }
        let cals = &h.spec.calendars;
        inv.arg(cals.len()).arg(self.offset_us());
        for c in cals {
            inv.arg(calendar_kind(c.calendar)).arg(c.dimension.index());
        }
        let v: Vec<i64> = self.call(&h.keys.state, inv).await?;
        let n = h.dims.len();
        if v.len() != n + 2 * cals.len() + 1 {
            return Err(BackendError::Protocol(format!("usage returned {v:?}")));
        }
        let unit = |x: i64| x.max(0) as u64;
        let mut dimensions: Vec<(Dimension, u64)> = h
            .dims
            .iter()
            .zip(&v)
            .map(|(d, used)| (d.rate.dimension, unit(*used)))
            .collect();
        let mut resets = Vec::with_capacity(cals.len());
        for (c, pair) in cals.iter().zip(v[n..].chunks_exact(2)) {
            dimensions.push((c.dimension, unit(pair[0])));
            resets.push((c.dimension, unit(pair[1])));
        }
        Ok(Usage {
            dimensions,
            leases: unit(v[v.len() - 1]),
            resets,
        })
    }

    fn at_rest(&self, _h: &RedisHandle) -> bool {
        // The state lives in Redis and expires there by itself; dropping the
        // local handle loses nothing.
        true
    }
}

/// The acquire script of a call in flight, owned by it.
enum AcquireScript {
    /// The script generated for the limit's shape.
    Shaped(Arc<ShapeScript>),
    /// `lua/acquire.lua`.
    Generic,
}

impl AcquireScript {
    fn get(&self) -> &redis::Script {
        match self {
            AcquireScript::Shaped(s) => &s.script,
            AcquireScript::Generic => &scripts::ACQUIRE,
        }
    }
}

/// One dimension's correction for `lua/reconcile.lua`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Change {
    /// 0 window, 1 gcra, 2 calendar day, 3 calendar month.
    kind: u8,
    dimension: usize,
    /// Units to add (negative: to give back).
    delta: i64,
    step_us: u64,
    window_us: u64,
}

impl Change {
    fn of(d: &Dim, (before, after): (u64, u64)) -> Self {
        // A gcra TAT moves by delta × T (µs): bounded so the product stays
        // exact in the script's doubles.
        let bound = if d.gcra {
            MAX_SCRIPT_UNITS / d.step_us.max(1)
        } else {
            MAX_SCRIPT_UNITS
        };
        Self {
            kind: u8::from(d.gcra),
            dimension: d.rate.dimension.index(),
            delta: bounded_delta(before, after, bound),
            step_us: d.step_us,
            window_us: d.window_us,
        }
    }

    fn calendar(c: &CalendarSpec, (before, after): (u64, u64)) -> Self {
        Self {
            kind: 1 + calendar_kind(c.calendar),
            dimension: c.dimension.index(),
            delta: bounded_delta(before, after, MAX_SCRIPT_UNITS),
            step_us: 0,
            window_us: 0,
        }
    }
}

/// The most units a script counts for one grant (2^52: exact in the
/// scripts' doubles, and far past any limit): a count above it is counted
/// as this many, so it fills the limit, and a correction between two such
/// counts moves nothing (a count pinned full is not refunded).
const MAX_SCRIPT_UNITS: u64 = 1 << 52;

/// The correction from `before` to `after` units, each counted as at most
/// `bound`, as the script's signed argument: never a wrapped number, never
/// a change of sign.
fn bounded_delta(before: u64, after: u64, bound: u64) -> i64 {
    let bound = bound.max(1);
    UnitsDelta::between(before.min(bound), after.min(bound)).saturating_i64()
}

/// The non-zero corrections of every dimension, rate and calendar, where
/// `counts` gives a dimension's units (before, after) from its units
/// function.
fn changes(
    dims: &[Dim],
    spec: &LimitSpec,
    counts: impl Fn(&dyn Fn(&Demand) -> u64) -> (u64, u64),
) -> Vec<Change> {
    let rates = dims.iter().map(|d| Change::of(d, counts(&|x| d.rate.units(x))));
    let calendars = spec
        .calendars
        .iter()
        .map(|c| Change::calendar(c, counts(&|x| c.units(x))));
    rates.chain(calendars).filter(|c| c.delta != 0).collect()
}

/// What an acquisition whose caller went away before its answer may hold,
/// to give it back once the answer is known.
struct LostAcquisition {
    store: Arc<Store>,
    key: String,
    lease: Option<u64>,
    lease_ttl_ns: u64,
    dims: Arc<[Dim]>,
    spec: Arc<LimitSpec>,
    demand: Demand,
}

impl LostAcquisition {
    /// Settles the answer of the orphaned call (`None`: it could not be
    /// awaited). A grant is given back whole — its lease released, its
    /// units refunded at the instant they were counted — as if the caller
    /// had never asked; a denial holds nothing; no answer (an error, a
    /// timeout, no runtime) leaves the lease to the background release
    /// with a tombstone, as a lost reply does.
    fn settle(self, answer: Option<Result<Vec<i64>, Failure>>) {
        let store = &self.store;
        let granted_at_us = match &answer {
            Some(Ok(v)) => match v[..] {
                [1, at_us, _] => at_us.max(0) as u64,
                // Denied, or its lease id already given up: nothing held.
                _ => return,
            },
            Some(Err(f)) if !f.sent => return,
            _ => {
                if let Some(lease) = self.lease {
                    store.lose(self.key, lease, self.lease_ttl_ns, LostKind::Acquisition);
                }
                return;
            }
        };
        store.cancel_releases.fetch_add(1, Ordering::Relaxed);
        let demand = self.demand;
        let refund = changes(&self.dims, &self.spec, |units| (units(&demand), 0));
        if let Some(lease) = self.lease {
            store.release_detached(self.key.clone(), lease, self.lease_ttl_ns);
        }
        // A refund that fails (or finds no runtime) errs on the safe side:
        // the units stay counted until their window passes.
        if let (false, Ok(rt)) = (refund.is_empty(), tokio::runtime::Handle::try_current()) {
            let (store, key) = (Arc::clone(store), self.key);
            rt.spawn(async move {
                let offset_us = store.offset_us();
                let _ = store
                    .reconcile_remote(&key, granted_at_us, &refund, offset_us)
                    .await;
            });
        }
    }
}

impl Store {
    /// Queues the background release of lease `lease` of `key` (`kind`
    /// says whether its acquisition's reply was lost or its release
    /// failed).
    pub(crate) fn lose(&self, key: String, lease: u64, lease_ttl_ns: u64, kind: LostKind) {
        let ttl = Duration::from_nanos(lease_ttl_ns);
        let tombstone_us = match kind {
            LostKind::Acquisition => pressure_core::clock::duration_to_nanos(ttl.max(TOMBSTONE_MIN)) / 1_000,
            LostKind::Release => 0,
        };
        let give_up_ns = self
            .clock
            .now_nanos()
            .saturating_add(pressure_core::clock::duration_to_nanos(ttl + LOST_MARGIN));
        self.push_lost(Lost {
            key,
            member: member(lease),
            tombstone_us,
            give_up_ns,
        });
    }

    /// Releases lease `lease` of `key` without waiting: in a task when there
    /// is a runtime, queued for the background task when that fails or when
    /// there is none.
    fn release_detached(self: &Arc<Self>, key: String, lease: u64, lease_ttl_ns: u64) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let store = Arc::clone(self);
                rt.spawn(async move {
                    if store.release_remote(&key, 0, &[member(lease)]).await.is_ok() {
                        store.replay_later(&key, member(lease), false);
                    } else {
                        store.lose(key, lease, lease_ttl_ns, LostKind::Release);
                    }
                });
            }
            // No runtime here: the background task (on the backend's own
            // runtime) delivers it.
            Err(_) => self.lose(key, lease, lease_ttl_ns, LostKind::Release),
        }
    }

    /// Corrects the units counted at `at_us` (server time) by `changes`.
    async fn reconcile_remote(
        &self,
        key: &str,
        at_us: u64,
        changes: &[Change],
        offset_us: i64,
    ) -> Result<i64, Failure> {
        self.call(key, reconcile_invocation(key, at_us, changes, offset_us))
            .await
    }

    /// The wall-time offset in µs, as the scripts take it.
    pub(crate) fn offset_us(&self) -> i64 {
        self.wall_shift.nanos() / 1_000
    }

    /// Runs `call` as a [`Settled`] call bounded by the call timeout: past
    /// it, the caller gets a timeout failure marked as handed on, and the
    /// call goes on in a task that waits up to [`ORPHAN_WAIT`] for the
    /// answer and gives it to `orphan` (`None`: none came), counted in
    /// [`RedisStatus::cancelled_calls`].
    pub(crate) async fn call_settled<T, F, O>(
        self: &Arc<Self>,
        key: &str,
        call: F,
        orphan: O,
    ) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, Failure>> + Send + 'static,
        O: FnOnce(Option<Result<T, Failure>>) + Send + 'static,
    {
        let store = Arc::clone(self);
        let orphan = move |answer| {
            store.cancelled_calls.fetch_add(1, Ordering::Relaxed);
            orphan(answer)
        };
        let shard = self.health.shard(key);
        let turn = self.turn(&shard).await?;
        // The turn goes with the call, to the task that settles it if the
        // caller goes away.
        let call = async move {
            let answer = call.await;
            drop(turn);
            answer
        };
        let settled = Settled::new(call, orphan).orphan_wait(ORPHAN_WAIT);
        match self.bounded(&shard, settled).await {
            Some(answer) => answer,
            None => Err(self.timed_out(&shard, key).handed_on()),
        }
    }
}

/// One call of `lua/reconcile.lua`: correct the units counted at `at_us`.
/// The calendar counts are those of the grant's period, dated with
/// `offset_us` like the acquisition.
fn reconcile_invocation(
    key: &str,
    at_us: u64,
    changes: &[Change],
    offset_us: i64,
) -> redis::ScriptInvocation<'static> {
    let mut inv = scripts::RECONCILE.prepare_invoke();
    inv.key(key).arg(changes.len()).arg(at_us);
    for c in changes {
        inv.arg(c.kind)
            .arg(c.dimension)
            .arg(c.delta)
            .arg(c.step_us)
            .arg(c.window_us);
    }
    inv.arg(offset_us);
    inv
}

fn delta_frees(before: &Demand, after: &Demand) -> bool {
    after.requests < before.requests
        || after.input_tokens < before.input_tokens
        || after.output_tokens < before.output_tokens
        || after.cost_micro_usd < before.cost_micro_usd
}

#[cfg(test)]
#[path = "shape_equiv_tests.rs"]
mod shape_equiv_tests;

#[cfg(test)]
#[path = "script_expiry_tests.rs"]
mod script_expiry_tests;

#[cfg(test)]
#[path = "window_wait_tests.rs"]
mod window_wait_tests;
