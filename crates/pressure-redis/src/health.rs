//! Health of the store, shard by shard: the failure-mode switch, with one
//! log line per transition (naming the shard's address and the real
//! cause), counters, the last error for operators, and at most one traffic
//! probe per interval while a shard is out so callers get the failure mode
//! at once instead of a timeout each. The backend's background task probes
//! too, so recovery needs no traffic.
//!
//! A single Redis is one shard. On a Redis Cluster each master is one: the
//! background task reads the slot map (`CLUSTER SLOTS`) and every key finds
//! its shard by its hash slot, so one dead master lifts only the limits of
//! the keys it serves; the others keep counting in Redis. Until the map is
//! known the whole cluster is one shard.
//!
//! A shard is out when a call finds no connection, gets no answer within
//! the call timeout while the shard answers nobody else either, or gets an
//! error reply that says the store cannot decide now ([`is_refusal`]: OOM,
//! READONLY, BUSY, MASTERDOWN, LOADING, ...). A shard out for a refusal
//! answers reads and deletions still, so only an accepted write — a
//! granted acquisition, the background task's write probe — brings it back.

use crate::config::FailureMode;
use parking_lot::{Mutex, RwLock};
use pressure_core::clock::{Clock, MonotonicClock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// While a shard is out, one caller per interval tries it again, and the
/// background task probes at this pace.
pub(crate) const PROBE_INTERVAL_NS: u64 = 100_000_000;

/// Hash slots of a Redis Cluster.
const SLOTS: usize = 16_384;

/// Error reply codes that mean the store cannot decide now, though it
/// answers: out of memory under `noeviction`, a demoted or replica node, a
/// script past the busy threshold, a master without its replicas or still
/// loading its data, a cluster that is down or resharding, a disk that
/// refuses writes. Each is a store failure: the failure mode applies.
const REFUSALS: [&str; 9] = [
    "OOM",
    "READONLY",
    "BUSY",
    "MASTERDOWN",
    "LOADING",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "NOREPLICAS",
    "MISCONF",
];

/// Whether `e` is an error reply of a store that answers but cannot decide
/// now ([`REFUSALS`]), rather than a bad request.
pub(crate) fn is_refusal(e: &redis::RedisError) -> bool {
    e.code().is_some_and(|code| REFUSALS.contains(&code)) || e.detail().is_some_and(refusal_in_script_error)
}

/// A script error that carries a refusal inside (`ERR Error running script
/// ...: -OOM ...`, as older servers word it).
fn refusal_in_script_error(detail: &str) -> bool {
    detail.split(['-', ' ']).any(|word| REFUSALS.contains(&word)) && detail.contains("script")
}

/// One shard: the single Redis, or one master of a cluster.
#[derive(Debug)]
pub(crate) struct Shard {
    /// For messages: the master's `host:port`, or the store's address.
    pub(crate) address: String,
    healthy: AtomicBool,
    /// Out because it refused a write: only an accepted write brings it back.
    refused: AtomicBool,
    last_probe: AtomicU64,
    /// When it last answered anything (backend clock, ns).
    last_answer: AtomicU64,
    /// When it last failed (backend clock, ns; 0: never).
    last_failure: AtomicU64,
    /// A key it serves (the last one that failed), for the write probe.
    probe_key: Mutex<Option<String>>,
}

impl Shard {
    fn new(address: String, healthy: bool) -> Self {
        Self {
            address,
            healthy: AtomicBool::new(healthy),
            refused: AtomicBool::new(false),
            last_probe: AtomicU64::new(0),
            last_answer: AtomicU64::new(0),
            last_failure: AtomicU64::new(0),
            probe_key: Mutex::new(None),
        }
    }

    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// When the shard last answered anything (backend clock, ns).
    pub(crate) fn last_answer_ns(&self) -> u64 {
        self.last_answer.load(Ordering::Relaxed)
    }

    /// When the shard last failed (backend clock, ns; 0: never).
    pub(crate) fn last_failure_ns(&self) -> u64 {
        self.last_failure.load(Ordering::Relaxed)
    }

    /// A key of the shard to probe with, if one failed there.
    pub(crate) fn probe_key(&self) -> Option<String> {
        self.probe_key.lock().clone()
    }
}

/// Which shard each hash slot belongs to: a single entry for a single
/// Redis (or a cluster whose map is not known yet).
#[derive(Debug)]
struct Shards {
    list: Vec<Arc<Shard>>,
    /// Slot → index in `list`; `None`: everything is `list[0]`.
    by_slot: Option<Box<[u16]>>,
}

/// The store's health: its shards, the counters over all of them, and the
/// most recent failure.
#[derive(Debug)]
pub(crate) struct Health {
    mode: FailureMode,
    /// The store's address for messages (password redacted).
    pub(crate) address: String,
    clock: MonotonicClock,
    cluster: bool,
    shards: RwLock<Shards>,
    last_error: Mutex<Option<String>>,
    pub(crate) failures: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) transitions: AtomicU64,
}

impl Health {
    /// Health of a backend that starts healthy or not (the store did not
    /// answer at start: `error` says why). `cluster`: shards by hash slot
    /// once [`Health::set_slot_map`] is called.
    pub(crate) fn new(mode: FailureMode, address: String, cluster: bool, error: Option<String>) -> Self {
        let clock = MonotonicClock::new();
        let shard = Shard::new(address.clone(), error.is_none());
        let h = Self {
            mode,
            address,
            clock,
            cluster,
            shards: RwLock::new(Shards {
                list: vec![Arc::new(shard)],
                by_slot: None,
            }),
            last_error: Mutex::new(None),
            failures: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
        };
        if let Some(e) = error {
            h.failures.fetch_add(1, Ordering::Relaxed);
            let now = h.clock.now_nanos();
            let shards = h.shards.read();
            shards.list[0].last_probe.store(now, Ordering::Relaxed);
            shards.list[0].last_failure.store(now.max(1), Ordering::Relaxed);
            drop(shards);
            tracing::warn!(
                redis = %h.address,
                failure_mode = ?h.mode,
                error = %e,
                "redis backend unavailable at start; failure mode applies until it answers"
            );
            *h.last_error.lock() = Some(e);
        }
        h
    }

    /// The shard that serves `key`.
    #[inline]
    pub(crate) fn shard(&self, key: &str) -> Arc<Shard> {
        let shards = self.shards.read();
        let i = match &shards.by_slot {
            Some(by_slot) => usize::from(by_slot[usize::from(slot(key))]),
            None => 0,
        };
        Arc::clone(&shards.list[i])
    }

    /// Every shard now.
    pub(crate) fn shards(&self) -> Vec<Arc<Shard>> {
        self.shards.read().list.clone()
    }

    /// Whether every shard answers.
    pub(crate) fn is_healthy(&self) -> bool {
        self.shards.read().list.iter().all(|s| s.is_healthy())
    }

    /// The addresses of the shards that are out.
    pub(crate) fn unhealthy(&self) -> Vec<String> {
        let shards = self.shards.read();
        shards
            .list
            .iter()
            .filter(|s| !s.is_healthy())
            .map(|s| s.address.clone())
            .collect()
    }

    /// The most recent failure, with its cause; kept after recovery.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// Installs a cluster's slot map: `ranges` of (first slot, last slot,
    /// master address). A master already known keeps its shard (and its
    /// health); a new one starts healthy; a slot no range covers stays with
    /// the shard it had. Ignored for a single Redis.
    pub(crate) fn set_slot_map(&self, ranges: &[(u16, u16, String)]) {
        if !self.cluster || ranges.is_empty() {
            return;
        }
        let mut shards = self.shards.write();
        let mut list: Vec<Arc<Shard>> = Vec::new();
        let mut by_slot = vec![u16::MAX; SLOTS];
        for (first, last, address) in ranges {
            let i = match list.iter().position(|s| &s.address == address) {
                Some(i) => i,
                None => {
                    let known = shards.list.iter().find(|s| &s.address == address);
                    let shard = known
                        .map(Arc::clone)
                        .unwrap_or_else(|| Arc::new(Shard::new(address.clone(), true)));
                    list.push(shard);
                    list.len() - 1
                }
            };
            let Ok(i) = u16::try_from(i) else { continue };
            let last = usize::from(*last).min(SLOTS - 1);
            if let Some(range) = by_slot.get_mut(usize::from(*first)..=last) {
                range.fill(i);
            }
        }
        // Slots no range covers: where they were before.
        for (s, entry) in by_slot.iter_mut().enumerate() {
            if *entry != u16::MAX {
                continue;
            }
            let before = match &shards.by_slot {
                Some(old) => &shards.list[usize::from(old[s])],
                None => &shards.list[0],
            };
            let i = match list.iter().position(|x| Arc::ptr_eq(x, before)) {
                Some(i) => i,
                None => {
                    list.push(Arc::clone(before));
                    list.len() - 1
                }
            };
            *entry = u16::try_from(i).unwrap_or(0);
        }
        *shards = Shards {
            list,
            by_slot: Some(by_slot.into_boxed_slice()),
        };
    }

    /// Whether this call should go to `shard`: always while it is healthy;
    /// while out, only the one caller that claims the next probe slot.
    #[inline]
    pub(crate) fn should_try(&self, shard: &Shard) -> bool {
        if shard.healthy.load(Ordering::Relaxed) {
            return true;
        }
        let now = self.clock.now_nanos();
        let last = shard.last_probe.load(Ordering::Relaxed);
        now.saturating_sub(last) >= PROBE_INTERVAL_NS
            && shard
                .last_probe
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// `shard` answered: a shard out for a refusal stays out (a read or a
    /// deletion says nothing of writes), any other comes back.
    #[inline]
    pub(crate) fn answered(&self, shard: &Shard) {
        shard.last_answer.store(self.clock.now_nanos(), Ordering::Relaxed);
        if !shard.healthy.load(Ordering::Relaxed) && !shard.refused.load(Ordering::Relaxed) {
            self.recovered(shard);
        }
    }

    /// `shard` accepted a write: it is back whatever put it out.
    #[inline]
    pub(crate) fn written(&self, shard: &Shard) {
        shard.last_answer.store(self.clock.now_nanos(), Ordering::Relaxed);
        if !shard.healthy.load(Ordering::Relaxed) {
            self.recovered(shard);
        }
    }

    fn recovered(&self, shard: &Shard) {
        if !shard.healthy.swap(true, Ordering::AcqRel) {
            shard.refused.store(false, Ordering::Relaxed);
            self.transitions.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                redis = %self.address,
                shard = %shard.address,
                failure_mode = ?self.mode,
                "redis backend recovered; counting in redis again"
            );
        }
    }

    /// A call found no connection (the store is out and still
    /// reconnecting): counted and unhealthy, the cause of the outage kept
    /// as it is.
    pub(crate) fn unreachable(&self, shard: &Shard) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now_nanos();
        shard.last_probe.store(now, Ordering::Relaxed);
        shard.last_failure.store(now.max(1), Ordering::Relaxed);
        if shard.healthy.swap(false, Ordering::AcqRel) {
            self.transitions.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                redis = %self.address,
                shard = %shard.address,
                failure_mode = ?self.mode,
                "redis backend unavailable (no connection); failure mode applies"
            );
        }
    }

    /// A call on `key` of `shard` failed or timed out; `cause` names why,
    /// `refusal` says the shard answered with an error reply that says it
    /// cannot decide now ([`is_refusal`]).
    pub(crate) fn failed(&self, shard: &Shard, key: Option<&str>, cause: &str, refusal: bool) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.mark_out(shard, key, cause, refusal);
    }

    /// Puts `shard` out (uncounted: the caller counts the failure).
    fn mark_out(&self, shard: &Shard, key: Option<&str>, cause: &str, refusal: bool) {
        let now = self.clock.now_nanos();
        shard.last_probe.store(now, Ordering::Relaxed);
        shard.last_failure.store(now.max(1), Ordering::Relaxed);
        if let Some(key) = key {
            let mut probe = shard.probe_key.lock();
            if probe.as_deref() != Some(key) {
                *probe = Some(key.to_owned());
            }
        }
        {
            let mut last = self.last_error.lock();
            if last.as_deref() != Some(cause) {
                *last = Some(cause.to_owned());
            }
        }
        if refusal {
            // It answered: reachable, not silent (see `Store::bounded`).
            shard.last_answer.store(now, Ordering::Relaxed);
            shard.refused.store(true, Ordering::Relaxed);
        }
        if shard.healthy.swap(false, Ordering::AcqRel) {
            self.transitions.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                redis = %self.address,
                shard = %shard.address,
                failure_mode = ?self.mode,
                error = %cause,
                "redis backend unavailable; failure mode applies"
            );
        }
    }

    /// A connection to the store could not be opened: every shard is out,
    /// one failure counted.
    pub(crate) fn failed_everywhere(&self, cause: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        for shard in self.shards() {
            self.mark_out(&shard, None, cause, false);
        }
    }

    /// Now on the backend clock (ns).
    pub(crate) fn now_nanos(&self) -> u64 {
        self.clock.now_nanos()
    }
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag —
/// the text between the first `{` and the next `}` when not empty — or of
/// the whole key, modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    let hashed = tagged.unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % 16_384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster_keyslot() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        for (key, keyslot) in [
            ("foo", 12_182),
            ("123456789", 12_739),
            ("{user1000}.following", 3_443),
            ("user1000", 3_443),
            // An empty tag hashes the whole key; only the first tag counts.
            ("a{}b", 13_694),
            ("{}x{y}", 2_166),
            ("x{y}{z}", 12_222),
            ("", 0),
        ] {
            assert_eq!(slot(key), keyslot, "{key}");
        }
    }

    #[test]
    fn a_refusal_inside_a_script_error_is_found_and_a_bad_script_is_not() {
        for detail in [
            "Error running script (call to f_abc): @user_script:1: -OOM command not allowed",
            "Error running script: @user_script:1: READONLY You can't write against a read only replica.",
        ] {
            assert!(refusal_in_script_error(detail), "{detail}");
        }
        for detail in [
            "Error running script: @user_script:1: attempt to compare nil with number",
            "OOM",
            "wrong number of arguments",
        ] {
            assert!(!refusal_in_script_error(detail), "{detail}");
        }
    }

    fn health(cluster: bool) -> Health {
        Health::new(FailureMode::Open, "redis://test".into(), cluster, None)
    }

    #[test]
    fn a_refused_shard_comes_back_only_with_a_write() {
        let h = health(false);
        let s = h.shard("k");
        h.failed(&s, Some("k"), "OOM command not allowed", true);
        assert!(!h.is_healthy());
        h.answered(&s);
        assert!(!h.is_healthy(), "a read or a deletion proves nothing of writes");
        h.written(&s);
        assert!(h.is_healthy());
        assert_eq!(h.transitions.load(Ordering::Relaxed), 2);
        assert_eq!(s.probe_key().as_deref(), Some("k"));
    }

    #[test]
    fn a_timed_out_shard_comes_back_with_any_answer() {
        let h = health(false);
        let s = h.shard("k");
        h.failed(&s, None, "no answer within 50 ms", false);
        h.failed(&s, None, "no answer within 50 ms", false);
        assert_eq!(
            h.transitions.load(Ordering::Relaxed),
            1,
            "one transition each way"
        );
        h.answered(&s);
        assert!(h.is_healthy());
        assert_eq!(h.failures.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn on_a_cluster_one_shard_out_leaves_the_others_in() {
        let h = health(true);
        h.set_slot_map(&[
            (0, 5_460, "a:1".into()),
            (5_461, 10_922, "b:1".into()),
            (10_923, 16_383, "c:1".into()),
        ]);
        let on_c = h.shard("foo"); // slot 12182
        assert_eq!(on_c.address, "c:1");
        h.failed(&on_c, Some("foo"), "no answer within 50 ms", false);
        assert!(!h.is_healthy());
        assert_eq!(h.unhealthy(), vec!["c:1".to_owned()]);
        let on_a = h.shard("123456789"); // slot 12739: also c
        assert!(!on_a.is_healthy());
        let other = (0..1_000)
            .map(|i| format!("k{i}"))
            .find(|k| slot(k) < 5_461)
            .expect("some key on a");
        assert!(h.shard(&other).is_healthy());
        assert!(h.should_try(&h.shard(&other)));
        // A new map keeps c's state; a promoted replica is a new, healthy shard.
        h.set_slot_map(&[
            (0, 5_460, "a:1".into()),
            (5_461, 10_922, "b:1".into()),
            (10_923, 16_383, "c:1".into()),
        ]);
        assert!(!h.shard("foo").is_healthy());
        h.set_slot_map(&[
            (0, 5_460, "a:1".into()),
            (5_461, 10_922, "b:1".into()),
            (10_923, 16_383, "c:2".into()),
        ]);
        assert!(h.shard("foo").is_healthy());
        assert!(h.is_healthy());
    }
}
