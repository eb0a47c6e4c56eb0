//! [`RuntimeKeys`]: this instance's mirror of the API keys issued at
//! runtime (`gateway.auth.runtimeKeys`, `POST /admin/pressure/keys`; the
//! store and its propagation are `crate::plan::keys`).
//!
//! The request path reads it as it reads the config's table
//! ([`super::api_key`]): one relaxed flag while there is no key, else a
//! lock-free snapshot found by the first 8 bytes of the presented key's
//! digest and compared on all 32 in constant time — no store call per
//! request. Writes (admin calls here, announcements of the other
//! instances) are rare and go under a lock; each carries the store's
//! version, so a late or repeated announcement never undoes a newer write,
//! and a revocation, once known, is never undone by an older write.
//!
//! A key's entry holds the record as stored (JSON, with the key's
//! SHA-256, never the key): the admin API shows it without the digest.

use super::api_key::{prefix, KeyDigest};
use super::tenant::Tenant;
use crate::backend::AnyBackend;
use arc_swap::ArcSwap;
use pressure_core::ResourceHandle;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// One live key issued at runtime, as the request path reads it.
pub(crate) struct RuntimeKey {
    /// Its id (`key_` and 16 hex digits).
    pub(crate) id: String,
    /// The SHA-256 of the key.
    pub(crate) digest: KeyDigest,
    /// The tenant it names.
    pub(crate) tenant: Tenant,
    /// Its label in logs and its resource: the name, or the id.
    pub(crate) label: String,
    /// Its own limit (`gateway:apikey:<label>`), if any.
    pub(crate) limit: Option<ResourceHandle<AnyBackend>>,
    /// The use cases it may call; `None`: all.
    pub(crate) use_cases: Option<Arc<[String]>>,
    /// When it stops working, Unix milliseconds; `None`: never.
    pub(crate) expires_at_ms: Option<u64>,
    /// The record as stored (JSON).
    pub(crate) stored: Arc<str>,
}

/// The id and label, never the digest nor the record.
impl std::fmt::Debug for RuntimeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeKey")
            .field("id", &self.id)
            .field("label", &self.label)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl RuntimeKey {
    /// Whether it has expired at `now_ms` (Unix milliseconds).
    pub(crate) fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| now_ms >= at)
    }
}

/// Now by the wall clock, Unix milliseconds: what an `expiresAt` (a date
/// an operator wrote) is compared with. Limiter time is the injected
/// monotonic clock; an expiry is a calendar fact, like a log's timestamp.
pub(crate) fn wall_clock_ms() -> u64 {
    let nanos = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
    u64::try_from(nanos / 1_000_000).unwrap_or(0)
}

/// The use cases a runtime key may call, put in the request's extensions
/// by [`super::credential::identify`] when the key has a list; an endpoint
/// refuses any other use case (`403`).
#[derive(Debug, Clone)]
pub(crate) struct KeyScope(pub(crate) Arc<[String]>);

impl KeyScope {
    /// Whether `use_case` is on the list.
    pub(crate) fn allows(&self, use_case: &str) -> bool {
        self.0.iter().any(|u| u == use_case)
    }
}

/// One mirrored key: the version of its last write, and the key (`None`:
/// revoked by that write).
struct Entry {
    version: u64,
    key: Option<Arc<RuntimeKey>>,
}

#[derive(Default)]
struct Mirror {
    /// Every write up to this version is already reflected (a snapshot).
    floor: u64,
    entries: HashMap<String, Entry>,
}

/// What the request path and the admin API read.
#[derive(Default)]
struct View {
    by_prefix: HashMap<[u8; 8], Vec<Arc<RuntimeKey>>>,
    by_id: BTreeMap<String, Arc<RuntimeKey>>,
}

/// This instance's mirror of the keys issued at runtime (module docs).
#[derive(Default)]
pub struct RuntimeKeys {
    mirror: parking_lot::Mutex<Mirror>,
    view: ArcSwap<View>,
    /// Whether `view` has any key (the request path's fast exit).
    any: AtomicBool,
}

impl std::fmt::Debug for RuntimeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeKeys")
            .field("keys", &self.view.load().by_id.len())
            .finish()
    }
}

impl RuntimeKeys {
    /// The live key whose digest is `d`.
    pub(crate) fn find(&self, d: &KeyDigest) -> Option<Arc<RuntimeKey>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.view
            .load()
            .by_prefix
            .get(&prefix(d))?
            .iter()
            .find(|k| bool::from(k.digest.ct_eq(d)))
            .cloned()
    }

    /// The live key `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<RuntimeKey>> {
        self.view.load().by_id.get(id).cloned()
    }

    /// Every live key, by id.
    pub(crate) fn all(&self) -> Vec<Arc<RuntimeKey>> {
        self.view.load().by_id.values().cloned().collect()
    }

    /// How many keys are live.
    pub(crate) fn len(&self) -> usize {
        self.view.load().by_id.len()
    }

    /// Records the write of `version` to `id`: the key `build` makes (run
    /// under the lock, so that what it registers follows the order of the
    /// writes), or its revocation when `build` makes none. `None` when a
    /// newer write is already known (nothing changes, `build` is not run);
    /// else the key it replaced, if any.
    pub(crate) fn apply(
        &self,
        version: u64,
        id: &str,
        build: impl FnOnce() -> Option<RuntimeKey>,
    ) -> Option<Option<Arc<RuntimeKey>>> {
        let mut m = self.mirror.lock();
        if version <= m.floor || m.entries.get(id).is_some_and(|e| e.version >= version) {
            return None;
        }
        let key = build().map(Arc::new);
        let previous = m
            .entries
            .insert(id.to_owned(), Entry { version, key })
            .and_then(|e| e.key);
        self.publish(&m);
        Some(previous)
    }

    /// Replaces everything with the store's whole content as of `version`
    /// (`(id, stored)` pairs, each made a key by `build` under the lock;
    /// entries written later here are kept); the keys that went or were
    /// replaced.
    pub(crate) fn replace(
        &self,
        version: u64,
        all: impl IntoIterator<Item = (String, String)>,
        mut build: impl FnMut(&str, &str) -> Option<RuntimeKey>,
    ) -> Vec<Arc<RuntimeKey>> {
        let mut m = self.mirror.lock();
        let mut gone = Vec::new();
        m.entries.retain(|_, e| {
            let keep = e.version > version;
            if !keep {
                gone.extend(e.key.take());
            }
            keep
        });
        for (id, stored) in all {
            if m.entries.contains_key(&id) {
                continue;
            }
            let key = build(&id, &stored).map(Arc::new);
            m.entries.insert(id, Entry { version, key });
        }
        m.floor = m.floor.max(version);
        self.publish(&m);
        gone
    }

    /// Publishes the view of `m`.
    fn publish(&self, m: &Mirror) {
        let mut view = View::default();
        for key in m.entries.values().filter_map(|e| e.key.as_ref()) {
            view.by_prefix
                .entry(prefix(&key.digest))
                .or_default()
                .push(Arc::clone(key));
            view.by_id.insert(key.id.clone(), Arc::clone(key));
        }
        self.any.store(!view.by_id.is_empty(), Ordering::Release);
        self.view.store(Arc::new(view));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::api_key::digest;

    fn key(id: &str, secret: &str) -> RuntimeKey {
        RuntimeKey {
            id: id.into(),
            digest: digest(secret.as_bytes()),
            tenant: Tenant("acme".into()),
            label: id.into(),
            limit: None,
            use_cases: None,
            expires_at_ms: Some(1_000),
            stored: Arc::from("{}"),
        }
    }

    #[test]
    fn finds_live_keys_and_forgets_revoked_ones() {
        let keys = RuntimeKeys::default();
        assert!(keys.find(&digest(b"sk-a")).is_none());
        assert_eq!(
            keys.apply(1, "a", || Some(key("a", "sk-a"))).map(|p| p.is_none()),
            Some(true)
        );
        assert_eq!(
            keys.find(&digest(b"sk-a")).map(|k| k.id.clone()),
            Some("a".into())
        );
        assert!(keys.find(&digest(b"sk-b")).is_none());
        assert!(
            keys.apply(0, "a", || None).is_none(),
            "older than the first write"
        );
        assert!(keys.apply(2, "a", || None).is_some());
        assert!(keys.find(&digest(b"sk-a")).is_none());
        assert!(
            keys.apply(1, "a", || Some(key("a", "sk-a"))).is_none(),
            "a revocation is remembered"
        );
        assert_eq!(keys.len(), 0);
    }

    #[test]
    fn a_snapshot_replaces_what_it_covers_and_keeps_later_writes() {
        let keys = RuntimeKeys::default();
        keys.apply(1, "gone", || Some(key("gone", "sk-gone")));
        keys.apply(9, "later", || Some(key("later", "sk-later")));
        let all = [
            ("kept".to_owned(), "{}".to_owned()),
            ("later".to_owned(), "{}".to_owned()),
        ];
        let gone = keys.replace(5, all, |id, _| Some(key(id, &format!("sk-{id}"))));
        assert_eq!(gone.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(), ["gone"]);
        let ids: Vec<String> = keys.all().iter().map(|k| k.id.clone()).collect();
        assert_eq!(ids, ["kept", "later"]);
        assert!(keys.apply(4, "gone", || Some(key("gone", "sk-gone"))).is_none());
    }

    #[test]
    fn expiry_and_scope() {
        let k = key("a", "sk-a");
        assert!(!k.expired(999));
        assert!(k.expired(1_000));
        let scope = KeyScope(Arc::from(vec!["chat".to_owned()]));
        assert!(scope.allows("chat") && !scope.allows("other"));
        assert!(!format!("{k:?}").contains("digest"));
    }
}
