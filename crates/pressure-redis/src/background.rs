//! The backend's one background task: it keeps the connection pool full
//! (reconnecting and reloading the scripts after an outage), reads a
//! cluster's slot map for the health of each shard, probes each shard that
//! is out with a write so recovery needs no traffic, delivers the lease
//! releases that could not be delivered when they were due (an acquisition
//! whose reply was lost, a release that failed), and delivers again, for a
//! few seconds, the releases made around an outage (`store::REPLAY_WINDOW`).
//!
//! The task holds only a weak reference to the backend and ends with it.
//! Every store call here has the backend's call timeout.

use crate::config::RedisConfig;
use crate::conn::{self, Conn};
use crate::health::{is_refusal, PROBE_INTERVAL_NS};
use crate::scripts;
use crate::slot_map;
use crate::store::{Store, REPLAY_EVERY};
use pressure_core::clock::Clock;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// First retry of an undelivered release, doubled per failed round up to
/// [`RETRY_MAX`]: once Redis answers, a lost slot is back within one retry
/// interval.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_millis(400);

/// Lease ids per release call.
const RELEASE_BATCH: usize = 256;

/// How often a cluster's slot map is read while every shard is healthy
/// (while one is out: every round).
const SLOT_MAP_EVERY: Duration = Duration::from_secs(5);

/// What the task remembers between rounds.
#[derive(Debug)]
pub(crate) struct Upkeep {
    retry: Duration,
    /// When the slot map was last read (backend clock, ns; 0: never).
    map_at_ns: u64,
}

impl Store {
    /// Delivers the pending releases, one call per resource (and kind);
    /// whatever fails stays queued (and counted in the status meanwhile).
    /// Returns whether any remain.
    async fn deliver_lost(&self) -> bool {
        let now = self.clock.now_nanos();
        let pending = {
            let mut l = self.lost.lock();
            l.retain(|x| x.give_up_ns > now);
            l.clone()
        };
        if pending.is_empty() {
            return false;
        }
        let mut groups: HashMap<(String, u64), Vec<String>> = HashMap::new();
        for x in pending {
            groups.entry((x.key, x.tombstone_us)).or_default().push(x.member);
        }
        let mut delivered: HashSet<(String, String)> = HashSet::new();
        for ((key, tombstone_us), members) in groups {
            for chunk in members.chunks(RELEASE_BATCH) {
                if self.release_remote(&key, tombstone_us, chunk).await.is_ok() {
                    for m in chunk {
                        self.replay_later(&key, m.clone(), true);
                    }
                    delivered.extend(chunk.iter().map(|m| (key.clone(), m.clone())));
                }
            }
        }
        let mut l = self.lost.lock();
        if !delivered.is_empty() {
            l.retain(|x| !delivered.contains(&(x.key.clone(), x.member.clone())));
        }
        !l.is_empty()
    }

    /// Delivers again the releases of [`REPLAY_WINDOW`](crate::store::REPLAY_WINDOW) that are due;
    /// returns whether any remain.
    async fn replay(&self) -> bool {
        let now = self.clock.now_nanos();
        let every = pressure_core::clock::duration_to_nanos(REPLAY_EVERY);
        let due = {
            let mut r = self.replays.lock();
            r.retain(|x| x.until_ns > now);
            let mut due: HashMap<String, Vec<String>> = HashMap::new();
            for x in r.iter_mut().filter(|x| x.next_ns <= now) {
                x.next_ns = now.saturating_add(every);
                due.entry(x.key.clone()).or_default().push(x.member.clone());
            }
            due
        };
        for (key, members) in due {
            for chunk in members.chunks(RELEASE_BATCH) {
                let _ = self.release_remote(&key, 0, chunk).await;
            }
        }
        !self.replays.lock().is_empty()
    }

    /// Opens connections for empty slots; stops at the first failure (the
    /// others would fail alike).
    async fn refill(&self) {
        for slot in self.pool.empty_slots() {
            match conn::open(&self.config).await {
                Ok(c) => {
                    preload_scripts(&self.config, &c, &self.shape_sources()).await;
                    self.pool.fill(slot, c);
                }
                Err(cause) => {
                    self.health.failed_everywhere(&cause);
                    return;
                }
            }
        }
    }

    /// On a cluster: reads the slot map when it is due (every
    /// [`SLOT_MAP_EVERY`], every round while a shard is out).
    async fn refresh_slot_map(&self, state: &mut Upkeep) {
        if self.config.cluster_nodes.is_empty() {
            return;
        }
        let now = self.clock.now_nanos();
        let due = state.map_at_ns == 0
            || !self.health.is_healthy()
            || now.saturating_sub(state.map_at_ns) >= pressure_core::clock::duration_to_nanos(SLOT_MAP_EVERY);
        let Some(pooled) = due.then(|| self.pool.get()).flatten() else {
            return;
        };
        if let Some(ranges) = slot_map::read(&pooled.conn, self.config.timeout()).await {
            self.health.set_slot_map(&ranges);
            state.map_at_ns = now.max(1);
        }
    }

    /// Probes every shard that is out with a write (`SET` of a probe key
    /// beside a key the shard serves, expiring in a second): a shard that
    /// answers reads but refuses writes (OOM, READONLY) stays out; its
    /// accepted write brings it back.
    async fn probe(&self) {
        let timeout = self.config.timeout();
        for shard in self.health.shards().into_iter().filter(|s| !s.is_healthy()) {
            let Some(mut pooled) = self.pool.get() else {
                return;
            };
            let key = match shard.probe_key() {
                Some(k) => format!("{k}:probe"),
                None => format!("{}:probe", self.config.key_prefix),
            };
            let mut set = redis::cmd("SET");
            set.arg(&key).arg(1).arg("PX").arg(1_000);
            match tokio::time::timeout(timeout, set.query_async::<redis::Value>(&mut pooled.conn)).await {
                Ok(Ok(_)) => self.health.written(&shard),
                Ok(Err(e)) => {
                    if conn::is_broken(&e) {
                        self.pool.discard(&pooled);
                    }
                    let refusal = is_refusal(&e);
                    self.health
                        .failed(&shard, None, &conn::describe(&e, timeout), refusal);
                }
                Err(_) => self.health.failed(
                    &shard,
                    None,
                    &format!("no answer within {} ms", timeout.as_millis()),
                    false,
                ),
            }
        }
    }

    /// One round of upkeep; returns how long to pause before the next, or
    /// `None` when there is nothing to do until woken.
    async fn upkeep(&self, state: &mut Upkeep) -> Option<Duration> {
        self.refill().await;
        self.refresh_slot_map(state).await;
        if !self.health.is_healthy() {
            self.probe().await;
        }
        let mut pause = None;
        if !self.health.is_healthy() || !self.pool.empty_slots().is_empty() {
            pause = Some(Duration::from_nanos(PROBE_INTERVAL_NS));
        }
        let retry = &mut state.retry;
        if self.pool.is_connected() && self.deliver_lost().await {
            pause = Some(pause.map_or(*retry, |p| p.min(*retry)));
            *retry = (*retry * 2).min(RETRY_MAX);
        } else if self.lost.lock().is_empty() {
            *retry = RETRY_MIN;
        } else {
            pause = Some(pause.map_or(*retry, |p| p.min(*retry)));
        }
        if self.pool.is_connected() && self.replay().await {
            pause = Some(pause.map_or(REPLAY_EVERY, |p| p.min(REPLAY_EVERY)));
        }
        pause
    }
}

/// Loads every script on a new connection — the fixed ones and `shaped`,
/// the acquire scripts generated so far — so the first call after a
/// reconnect (or a Redis restart, which forgets scripts) is one EVALSHA.
/// Best effort: NOSCRIPT is handled on use anyway.
pub(crate) async fn preload_scripts(config: &RedisConfig, c: &Conn, shaped: &[String]) {
    if !config.cluster_nodes.is_empty() {
        // SCRIPT LOAD would reach one node only; NOSCRIPT handling covers it.
        return;
    }
    let mut pipe = redis::pipe();
    for src in scripts::sources() {
        pipe.cmd("SCRIPT").arg("LOAD").arg(src).ignore();
    }
    for src in shaped {
        pipe.cmd("SCRIPT").arg("LOAD").arg(src).ignore();
    }
    let mut c = c.clone();
    let timeout = Duration::from_millis(config.connect_timeout_ms);
    let _ = tokio::time::timeout(timeout, pipe.query_async::<()>(&mut c)).await;
}

/// The task: upkeep rounds until the backend is dropped.
pub(crate) async fn run(backend: Weak<Store>, wake: Arc<Notify>) {
    let mut state = Upkeep {
        retry: RETRY_MIN,
        map_at_ns: 0,
    };
    loop {
        let pause = {
            let Some(store) = backend.upgrade() else {
                return;
            };
            store.upkeep(&mut state).await
        };
        let notified = wake.notified();
        // Idle: still look once a second whether the backend is gone.
        match pause.or(Some(Duration::from_secs(1))) {
            None => notified.await,
            Some(p) => {
                tokio::select! {
                    _ = tokio::time::sleep(p) => {}
                    _ = notified => {}
                }
            }
        }
    }
}
