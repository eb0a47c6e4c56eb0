//! The backend's shared state ([`Store`]) and its one way to call Redis:
//! a script invocation on a pooled connection with the call timeout,
//! counted in the health, failing as a [`Failure`] that says whether the
//! command may have reached Redis. Also the queue of lease releases still
//! to deliver ([`Lost`], delivered by `background.rs`, queued by
//! [`Store::lose`]), the calls that outlive their caller
//! ([`Store::call_settled`]) and the acquire scripts generated per limit
//! shape.

use crate::config::RedisConfig;
use crate::conn::{self, Pool};
use crate::health::{is_refusal, Health, Shard};
use crate::keys::member;
use crate::scripts;
use crate::settle::Settled;
use crate::shape::{self, Shape};
use parking_lot::Mutex;
use pressure_core::clock::{Clock, MonotonicClock, WallShift};
use pressure_core::{BackendError, MemoryBackend};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Distinct limit shapes that get a script of their own; past this, new
/// shapes use the generic `lua/acquire.lua` (each script is kept in Redis's
/// script cache for good, so their number must stay bounded whatever the
/// configuration holds).
const MAX_SHAPES: usize = 256;

/// Calls in flight at most per pooled connection (a cluster's one
/// connection counts as four). The rest wait for a turn in the process,
/// outside the call timeout (see [`Store::turn`]).
pub(crate) const IN_FLIGHT_PER_CONNECTION: usize = 256;

/// A release made around an outage (delivered late, or answered by a
/// shard that failed less than this ago) is delivered again every
/// [`REPLAY_EVERY`] for this long. A master that stalls past the cluster's
/// node timeout wakes as a master, answers what was queued for it, and then
/// resyncs as a replica of its promoted replica, losing those writes: a
/// release among them would leave its slot taken until the lease TTL.
/// Releasing is idempotent, so delivering it again is harmless, and once
/// the clients follow the new slot map it reaches the new master.
pub(crate) const REPLAY_WINDOW: Duration = Duration::from_secs(5);

/// The pace of [`REPLAY_WINDOW`]'s deliveries: a slot lost with a failover
/// is back within this of the cluster answering with its new map.
pub(crate) const REPLAY_EVERY: Duration = Duration::from_millis(250);

/// Undelivered releases kept at most (oldest dropped past it: their leases
/// expire by their TTL anyway).
const MAX_LOST: usize = 100_000;

/// What the backend and its tasks share: the connection pool, the health,
/// the releases still to deliver and the scripts generated per shape.
pub(crate) struct Store {
    pub(crate) pool: Pool,
    pub(crate) config: RedisConfig,
    pub(crate) health: Health,
    /// The failure mode's state (`local`).
    pub(crate) local: MemoryBackend,
    pub(crate) clock: MonotonicClock,
    /// Moves the server's time for the calendar periods (tests, a known
    /// skew); zero in production, so the fleet agrees on Redis's `TIME`.
    pub(crate) wall_shift: WallShift,
    /// Releases to deliver in the background (lost acquisitions, failed
    /// releases).
    pub(crate) lost: Mutex<Vec<Lost>>,
    /// Turns on the connections ([`IN_FLIGHT_PER_CONNECTION`] each).
    pub(crate) turns: Arc<tokio::sync::Semaphore>,
    /// Releases to deliver again for a while ([`REPLAY_WINDOW`]).
    pub(crate) replays: Mutex<Vec<Replay>>,
    /// Wakes the background task (a connection broke, a lease was lost).
    pub(crate) wake: Arc<tokio::sync::Notify>,
    /// The acquire script of every limit shape registered so far, shared by
    /// the handles of that shape (see `shape.rs`).
    pub(crate) shapes: Mutex<HashMap<Shape, Arc<ShapeScript>>>,
    /// Calls whose caller went away before the answer, settled here.
    pub(crate) cancelled_calls: AtomicU64,
    /// Leases and reservations given back because their acquisition's
    /// caller went away before its answer.
    pub(crate) cancel_releases: AtomicU64,
    /// Quota leasing's counts (`lease/`).
    pub(crate) leasing: LeasingCounters,
}

/// The acquire script generated for one [`Shape`].
#[derive(Debug)]
pub(crate) struct ShapeScript {
    pub(crate) shape: Shape,
    /// Its source, for `SCRIPT LOAD` on new connections.
    pub(crate) source: String,
    pub(crate) script: redis::Script,
}

/// A failed store call, and whether the command may have reached Redis (so
/// a lease it asked for may exist there).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: BackendError,
    pub(crate) sent: bool,
    /// The call is still in flight, owned by a task that settles its
    /// outcome (`settle.rs`): the caller must not clean up after it.
    pub(crate) owned: bool,
}

impl Failure {
    /// A call given up by its caller at the call timeout and handed to the
    /// task that settles it.
    pub(crate) fn handed_on(mut self) -> Self {
        self.owned = true;
        self
    }
}

impl From<Failure> for BackendError {
    fn from(f: Failure) -> Self {
        f.error
    }
}

/// Whether an error means the store is out (I/O, connection, cluster down)
/// or cannot decide now (an error reply such as OOM, READONLY or BUSY:
/// [`crate::health::is_refusal`]) rather than a bad answer.
pub(crate) fn is_store_failure(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.is_cluster_error()
        || conn::is_auth_failure(e)
        || is_refusal(e)
}

/// Why a lease release is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostKind {
    /// The acquisition's reply never came: the lease may or may not exist,
    /// and may still be created by a script on its way (tombstone needed).
    Acquisition,
    /// The lease was granted; releasing it failed.
    Release,
}

/// A lease release to deliver.
#[derive(Debug, Clone)]
pub(crate) struct Lost {
    /// State hash of the resource.
    pub(crate) key: String,
    /// Lease id as stored (`l:<member>`).
    pub(crate) member: String,
    /// Tombstone TTL (us) for a lost acquisition; 0 for a plain release.
    pub(crate) tombstone_us: u64,
    /// Backend-clock time after which delivering it is pointless.
    pub(crate) give_up_ns: u64,
}

/// A delivered release to deliver again until `until_ns` (backend clock).
#[derive(Debug, Clone)]
pub(crate) struct Replay {
    pub(crate) key: String,
    pub(crate) member: String,
    pub(crate) next_ns: u64,
    pub(crate) until_ns: u64,
}

impl Store {
    /// Remembers the delivered release of `member` of `key` for
    /// [`REPLAY_WINDOW`], when it was made around an outage:
    /// `late` (delivered after failing, or answered past its caller's
    /// timeout) or its shard failed less than the window ago.
    pub(crate) fn replay_later(&self, key: &str, member: String, late: bool) {
        let window = pressure_core::clock::duration_to_nanos(REPLAY_WINDOW);
        let now = self.clock.now_nanos();
        if !late {
            let failed = self.health.shard(key).last_failure_ns();
            if failed == 0 || self.health.now_nanos().saturating_sub(failed) >= window {
                return;
            }
        }
        {
            let mut r = self.replays.lock();
            if r.len() >= MAX_LOST {
                r.remove(0);
            }
            r.push(Replay {
                key: key.to_owned(),
                member,
                next_ns: now,
                until_ns: now.saturating_add(window),
            });
        }
        self.wake.notify_one();
    }

    /// Runs one script invocation on `key` with the call timeout on a
    /// pooled connection, updating the health of `key`'s shard; a broken
    /// connection leaves the pool.
    pub(crate) async fn call<T: redis::FromRedisValue>(
        &self,
        key: &str,
        inv: redis::ScriptInvocation<'_>,
    ) -> Result<T, Failure> {
        let shard = self.health.shard(key);
        let turn = self.turn(&shard).await?;
        let call = std::pin::pin!(self.call_on(&shard, key, inv));
        let answer = match self.bounded(&shard, call).await {
            Some(answer) => answer,
            None => Err(self.timed_out(&shard, key)),
        };
        drop(turn);
        answer
    }

    /// Waits for a turn to send a call to `shard`: at most
    /// [`IN_FLIGHT_PER_CONNECTION`] calls per connection are in flight, the
    /// others wait here, back-pressured, before their call timeout starts.
    /// So a burst of thousands of calls is a short queue in the process,
    /// not thousands of replies that each wait behind the others against
    /// their own timeout; and when the shard fails while a call waits, the
    /// call is not sent at all (the failure mode answers it at once).
    pub(crate) async fn turn(&self, shard: &Shard) -> Result<tokio::sync::OwnedSemaphorePermit, Failure> {
        let queued = self.health.now_nanos();
        let unavailable = |why: String| Failure {
            error: BackendError::Unavailable(format!("{}: {why}", shard.address)),
            sent: false,
            owned: false,
        };
        let turn = match Arc::clone(&self.turns).try_acquire_owned() {
            Ok(turn) => return Ok(turn),
            Err(_) => Arc::clone(&self.turns)
                .acquire_owned()
                .await
                .map_err(|_| unavailable("the backend is shutting down".into()))?,
        };
        if shard.last_failure_ns() > queued {
            return Err(unavailable("failed while this call waited for its turn".into()));
        }
        Ok(turn)
    }

    /// Awaits `call` on `shard` for the call timeout — measured from the
    /// shard's last answer, not from the start: while the shard answers
    /// other calls, this one is queued behind them in the process (a burst
    /// on one connection, a busy machine) and the store is not slow. So a
    /// burst never puts a healthy store in failure mode; a store that
    /// answers nobody for the timeout does. Bounded in all by the
    /// connection's own response timeout (four times the call timeout, at
    /// least a second), which fails the call itself past it. `None`: no
    /// answer in time.
    pub(crate) async fn bounded<F: std::future::Future + Unpin>(
        &self,
        shard: &Shard,
        mut call: F,
    ) -> Option<F::Output> {
        let timeout_ns = pressure_core::clock::duration_to_nanos(self.config.timeout());
        let started = self.health.now_nanos();
        let cap = started.saturating_add(timeout_ns.saturating_mul(4).max(1_000_000_000));
        let mut since = started;
        loop {
            let wait = since
                .saturating_add(timeout_ns)
                .saturating_sub(self.health.now_nanos());
            if let Ok(answer) = tokio::time::timeout(Duration::from_nanos(wait), &mut call).await {
                return Some(answer);
            }
            // One turn for the connection's task: a reply that a busy
            // process has not read yet is not a silent store.
            tokio::task::yield_now().await;
            if let std::task::Poll::Ready(answer) = futures::poll!(&mut call) {
                return Some(answer);
            }
            let heard = shard.last_answer_ns();
            if heard <= since || self.health.now_nanos() >= cap {
                return None;
            }
            since = heard;
        }
    }

    /// The failure of a call on `key` that got no answer within the call
    /// timeout (its command was sent: it may still run), counted in the
    /// health of its shard.
    pub(crate) fn timed_out(&self, shard: &Shard, key: &str) -> Failure {
        let timeout = self.config.timeout();
        self.health.failed(
            shard,
            Some(key),
            &format!("no answer within {} ms", timeout.as_millis()),
            false,
        );
        Failure {
            error: BackendError::Timeout(timeout),
            sent: true,
            owned: false,
        }
    }

    /// [`Store::call`] without the timeout: for a call whose caller bounds
    /// the wait itself and hands the call on when it gives up (`settle.rs`).
    pub(crate) async fn call_untimed<T: redis::FromRedisValue>(
        &self,
        key: &str,
        inv: redis::ScriptInvocation<'_>,
    ) -> Result<T, Failure> {
        let shard = self.health.shard(key);
        self.call_on(&shard, key, inv).await
    }

    async fn call_on<T: redis::FromRedisValue>(
        &self,
        shard: &Shard,
        key: &str,
        inv: redis::ScriptInvocation<'_>,
    ) -> Result<T, Failure> {
        let timeout = self.config.timeout();
        let Some(mut pooled) = self.pool.get() else {
            let cause = self.health.last_error().unwrap_or_else(|| "connecting".into());
            self.health.unreachable(shard);
            return Err(Failure {
                error: BackendError::Unavailable(format!(
                    "not connected to {}: {cause}",
                    self.health.address
                )),
                sent: false,
                owned: false,
            });
        };
        match inv.invoke_async(&mut pooled.conn).await {
            Ok(v) => {
                self.health.answered(shard);
                Ok(v)
            }
            Err(e) if is_store_failure(&e) => {
                if conn::is_broken(&e) {
                    self.pool.discard(&pooled);
                }
                let refusal = is_refusal(&e);
                let cause = conn::describe(&e, timeout);
                self.health.failed(shard, Some(key), &cause, refusal);
                // The background task refills the pool, reads the slot map
                // and probes the shard now, not at its next idle round.
                self.wake.notify_one();
                Err(Failure {
                    error: BackendError::Unavailable(format!("{}: {cause}", shard.address)),
                    sent: true,
                    owned: false,
                })
            }
            Err(e) => {
                self.health.answered(shard);
                Err(Failure {
                    error: BackendError::Protocol(e.to_string()),
                    sent: true,
                    owned: false,
                })
            }
        }
    }

    /// Releases `members` of `key` in one call (`tombstone_us` > 0: leave a
    /// tombstone for those not there yet).
    pub(crate) async fn release_remote(
        &self,
        key: &str,
        tombstone_us: u64,
        members: &[String],
    ) -> Result<i64, Failure> {
        self.call(key, release_invocation(key, tombstone_us, members))
            .await
    }

    /// Queues a release for the background task and wakes it.
    pub(crate) fn push_lost(&self, lost: Lost) {
        {
            let mut l = self.lost.lock();
            if l.len() >= MAX_LOST {
                l.remove(0);
            }
            l.push(lost);
        }
        self.wake.notify_one();
    }
}

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
    pub(crate) fn release_detached(self: &Arc<Self>, key: String, lease: u64, lease_ttl_ns: u64) {
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

    /// The wall-time offset in µs, as the scripts take it.
    pub(crate) fn offset_us(&self) -> i64 {
        self.wall_shift.nanos() / 1_000
    }

    /// Runs `call` as a [`Settled`] call bounded by the call timeout: past
    /// it, the caller gets a timeout failure marked as handed on, and the
    /// call goes on in a task that waits up to [`ORPHAN_WAIT`] for the
    /// answer and gives it to `orphan` (`None`: none came), counted in
    /// [`crate::RedisStatus::cancelled_calls`].
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

impl Store {
    /// The script of `shape`, generated and cached on first use; `None`
    /// once [`MAX_SHAPES`] shapes have one (the generic script serves the
    /// rest).
    pub(crate) fn shape_script(&self, shape: Shape) -> Option<Arc<ShapeScript>> {
        let mut shapes = self.shapes.lock();
        if let Some(s) = shapes.get(&shape) {
            return Some(Arc::clone(s));
        }
        if shapes.len() >= MAX_SHAPES {
            return None;
        }
        let source = shape::generate(&shape);
        let s = Arc::new(ShapeScript {
            script: redis::Script::new(&source),
            source,
            shape: shape.clone(),
        });
        shapes.insert(shape, Arc::clone(&s));
        drop(shapes);
        self.preload_shape(&s.source);
        Some(s)
    }

    /// Loads a newly generated script in the background (one `SCRIPT LOAD`
    /// on a pooled connection, when there is a runtime and a connection), so
    /// the first acquisition of a new shape is usually one EVALSHA, not
    /// EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA. Best effort: NOSCRIPT is
    /// handled on use anyway. Not on a cluster: `SCRIPT LOAD` would reach one
    /// node only (as in `background::preload_scripts`).
    fn preload_shape(&self, source: &str) {
        if !self.config.cluster_nodes.is_empty() {
            return;
        }
        let (Ok(rt), Some(pooled)) = (tokio::runtime::Handle::try_current(), self.pool.get()) else {
            return;
        };
        let source = source.to_owned();
        let timeout = self.config.timeout();
        rt.spawn(async move {
            let mut conn = pooled.conn;
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(source);
            let _ = tokio::time::timeout(timeout, load.query_async::<String>(&mut conn)).await;
        });
    }

    /// Sources of the generated scripts, for `SCRIPT LOAD` on a new
    /// connection.
    pub(crate) fn shape_sources(&self) -> Vec<String> {
        self.shapes.lock().values().map(|s| s.source.clone()).collect()
    }
}

/// One call of `lua/release.lua`: release `members` of `key` (`tombstone_us`
/// > 0: leave a tombstone for those not there yet).
pub(crate) fn release_invocation(
    key: &str,
    tombstone_us: u64,
    members: &[String],
) -> redis::ScriptInvocation<'static> {
    let mut inv = scripts::RELEASE.prepare_invoke();
    inv.key(key).arg(tombstone_us);
    for m in members {
        inv.arg(m);
    }
    inv
}

/// What quota leasing (`lease/`) did in this process (for
/// [`crate::RedisStatus`]).
#[derive(Debug, Default)]
pub(crate) struct LeasingCounters {
    /// Calls of `lua/lease.lua`.
    pub(crate) calls: AtomicU64,
    /// Decisions answered from a lease in memory.
    pub(crate) served: AtomicU64,
}
