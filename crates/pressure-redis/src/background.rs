//! The backend's one background task: it keeps the connection pool full
//! (reconnecting and reloading the scripts after an outage), probes Redis
//! while it is unhealthy so recovery needs no traffic, and delivers the
//! lease releases that could not be delivered when they were due (an
//! acquisition whose reply was lost, a release that failed).
//!
//! The task holds only a weak reference to the backend and ends with it.
//! Every store call here has the backend's call timeout.

use crate::config::RedisConfig;
use crate::conn::{self, Conn};
use crate::health::PROBE_INTERVAL_NS;
use crate::scripts;
use crate::store::Store;
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
                    self.health.failed(&cause);
                    return;
                }
            }
        }
    }

    /// While unhealthy: one PING; its answer flips the health back.
    async fn probe(&self) {
        let timeout = self.config.timeout();
        let Some(mut pooled) = self.pool.get() else {
            return;
        };
        let ping = redis::cmd("PING");
        match tokio::time::timeout(timeout, ping.query_async::<String>(&mut pooled.conn)).await {
            Ok(Ok(_)) => self.health.ok(),
            Ok(Err(e)) => {
                if conn::is_broken(&e) {
                    self.pool.discard(&pooled);
                }
                self.health.failed(&conn::describe(&e, timeout));
            }
            Err(_) => self
                .health
                .failed(&format!("no answer within {} ms", timeout.as_millis())),
        }
    }

    /// One round of upkeep; returns how long to pause before the next, or
    /// `None` when there is nothing to do until woken.
    async fn upkeep(&self, retry: &mut Duration) -> Option<Duration> {
        self.refill().await;
        if !self.health.is_healthy() {
            self.probe().await;
        }
        let mut pause = None;
        if !self.health.is_healthy() || !self.pool.empty_slots().is_empty() {
            pause = Some(Duration::from_nanos(PROBE_INTERVAL_NS));
        }
        if self.pool.is_connected() && self.deliver_lost().await {
            pause = Some(pause.map_or(*retry, |p| p.min(*retry)));
            *retry = (*retry * 2).min(RETRY_MAX);
        } else if self.lost.lock().is_empty() {
            *retry = RETRY_MIN;
        } else {
            pause = Some(pause.map_or(*retry, |p| p.min(*retry)));
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
    let mut retry = RETRY_MIN;
    loop {
        let pause = {
            let Some(store) = backend.upgrade() else {
                return;
            };
            store.upkeep(&mut retry).await
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
