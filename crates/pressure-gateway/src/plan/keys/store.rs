//! Where the keys issued at runtime are kept, and [`Keys`]: a gateway's
//! side of them — the admin writes, its mirror
//! ([`RuntimeKeys`], which the request path reads) and, on Redis, the
//! watcher that keeps the mirror in step with the other instances.
//!
//! * **Memory**: the mirror is the store; the store only numbers the
//!   writes. One process, nothing to propagate.
//! * **Redis**: a `pressure_redis::SharedHash` named `api-keys` — the
//!   hash `<keyPrefix>:{config}:api-keys` (key id → record JSON, with the
//!   key's SHA-256, never the key), persistent on purpose (`pressure redis
//!   gc` leaves `{config}` keys alone), each write announced on its pub/sub
//!   channel, the same path as the live tenant overrides
//!   (`crate::plan::overrides::store`). Every instance that reads
//!   runtime keys subscribes (from its start, or from the reload that
//!   turned them on) and reads the whole hash on each (re)subscription. A change only replaces
//!   a key still there, so an update racing a revocation never brings the
//!   key back.
//! * **Bound** of a revocation (`DELETE`): the instance that answered
//!   `204` refuses the key from then on; every other instance one pub/sub
//!   delivery later (milliseconds; the tests hold it to 1 s). An instance
//!   whose subscription broke catches up within `PING_EVERY +
//!   PING_TIMEOUT` (3 s) plus its reconnect (backoff up to 2 s) after Redis
//!   answers again; until then it still knows the keys as they were. A
//!   `DELETE` that Redis did not take is `503` and revokes nothing.
//! * **Cancellation**: a write runs in a task of its own, so a client that
//!   goes away mid-request leaves it either done (store, mirror, the key's
//!   resource) or not done. Writes of one instance go one at a time.
//!
//! A key's own limits are registered on the broker as
//! `gateway:apikey:<name or id>` when the mirror learns the key (while
//! `pressure.enabled`), updated in place by a change (usage kept), and
//! unregistered when the key goes. A key whose limits the backend cannot
//! hold is not installed (logged): it never works without its limit.

use super::{hex, new_id, new_secret, KeyPatch, KeyRecord, NewKey, Rules, MAX_KEYS};
use crate::auth::api_key::digest;
use crate::auth::runtime_keys::{RuntimeKey, RuntimeKeys};
use crate::backend::Broker;
use crate::plan::{Plan, PlanCell};
use crate::settings::{BackendConfig, ConfigError};
use futures::future::BoxFuture;
use pressure_core::{Backend, BackendError};
use pressure_redis::{SharedHash, SharedHashEvent};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The name of the shared hash of runtime keys in Redis.
pub(crate) const HASH_NAME: &str = "api-keys";

/// Why a key operation did not happen (nothing changed).
#[derive(Debug)]
pub(crate) enum KeyError {
    /// No live key has that id.
    NotFound,
    /// A field breaks a rule (the JSON path named).
    Invalid(ConfigError),
    /// The name is taken.
    NameTaken,
    /// [`MAX_KEYS`] keys are live.
    Full,
    /// The store did not take the write.
    Unavailable(BackendError),
}

/// Keeps the records for the fleet; every write gets a version larger than
/// every earlier one.
trait KeyStore: Send + Sync + std::fmt::Debug {
    /// Stores `json` as `id`'s record; the write's version.
    fn put<'a>(&'a self, id: &'a str, json: &'a str) -> BoxFuture<'a, Result<u64, BackendError>>;
    /// Stores `json` as `id`'s record if it has one; `None` when not.
    fn replace<'a>(&'a self, id: &'a str, json: &'a str) -> BoxFuture<'a, Result<Option<u64>, BackendError>>;
    /// Removes `id`'s record; the write's version.
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<u64, BackendError>>;
}

/// One process: the mirror holds the records, this numbers the writes
/// (which go one at a time, so a record checked there is still there).
#[derive(Debug, Default)]
struct MemoryStore {
    version: AtomicU64,
}

impl MemoryStore {
    fn next(&self) -> u64 {
        self.version.fetch_add(1, Ordering::SeqCst) + 1
    }
}

impl KeyStore for MemoryStore {
    fn put<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(async move { Ok(self.next()) })
    }

    fn replace<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<Option<u64>, BackendError>> {
        Box::pin(async move { Ok(Some(self.next())) })
    }

    fn delete<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(async move { Ok(self.next()) })
    }
}

/// The fleet: the shared hash in the backend's Redis.
#[derive(Debug)]
struct RedisStore {
    hash: Arc<SharedHash>,
}

impl KeyStore for RedisStore {
    fn put<'a>(&'a self, id: &'a str, json: &'a str) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(self.hash.set(id, json))
    }

    fn replace<'a>(&'a self, id: &'a str, json: &'a str) -> BoxFuture<'a, Result<Option<u64>, BackendError>> {
        Box::pin(self.hash.replace(id, json))
    }

    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(self.hash.remove(id))
    }
}

/// Aborts its task when dropped (the watcher lives as long as its gateway).
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What installing a record needs: the mirror, the plan (whether limits
/// apply, which resources the config owns) and the broker.
#[derive(Debug, Clone)]
struct Installer {
    mirror: Arc<RuntimeKeys>,
    plan: PlanCell,
    broker: Broker,
}

impl Installer {
    /// Applies the write of `version` to `id`: its record `json`, or its
    /// revocation (`None`). `false` when a newer write was already known.
    fn install(&self, version: u64, id: &str, json: Option<&str>) -> bool {
        let plan = self.plan.load();
        let applied = self
            .mirror
            .apply(version, id, || json.and_then(|j| self.build(&plan, id, j)));
        match applied {
            Some(previous) => {
                self.retire(&plan, previous, id);
                true
            }
            None => false,
        }
    }

    /// Replaces the mirror with the store's whole content as of `version`.
    fn snapshot(&self, version: u64, entries: impl IntoIterator<Item = (String, String)>) {
        let plan = self.plan.load();
        let gone = self
            .mirror
            .replace(version, entries, |id, json| self.build(&plan, id, json));
        for key in gone {
            let id = key.id.clone();
            self.retire(&plan, Some(key), &id);
        }
    }

    /// The key of the record `json` stored as `id`, its limits registered
    /// (none while `pressure.enabled` is false); `None` when the record is
    /// unreadable or its limits cannot be registered (logged).
    fn build(&self, plan: &Plan, id: &str, json: &str) -> Option<RuntimeKey> {
        let record = match KeyRecord::read(id, json) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(id, error = e.as_str(), "unreadable runtime API key ignored");
                return None;
            }
        };
        let limit = match (&record.limits, plan.config().pressure.enabled) {
            (Some(limits), true) => {
                let resource = record.resource();
                let registered = self
                    .broker
                    .set_limits(&resource, limits.clone())
                    .map_err(|e| e.to_string())
                    .and_then(|_| {
                        self.broker
                            .resource(&resource)
                            .ok_or_else(|| "not registered".to_owned())
                    });
                match registered {
                    Ok(h) => Some(h),
                    Err(e) => {
                        tracing::warn!(
                            id,
                            resource,
                            error = e.as_str(),
                            "runtime API key not installed: its limits cannot be registered"
                        );
                        return None;
                    }
                }
            }
            _ => None,
        };
        record.runtime_key(Arc::from(json), limit)
    }

    /// Unregisters the resource of `previous` (the key `id` was) unless the
    /// key `id` is now still charged to it, or the config owns it.
    fn retire(&self, plan: &Plan, previous: Option<Arc<RuntimeKey>>, id: &str) {
        let Some(resource) = previous
            .as_ref()
            .and_then(|k| k.limit.as_ref())
            .map(|h| h.id().to_owned())
        else {
            return;
        };
        let now = self.mirror.get(id);
        let kept = now
            .as_ref()
            .and_then(|k| k.limit.as_ref())
            .is_some_and(|h| h.id() == resource);
        if !kept && !plan.resource_ids().contains(&resource) {
            self.broker.unregister(&resource);
        }
    }
}

/// A key just issued: its record, and the key itself (shown once).
pub(crate) struct Issued {
    /// The record stored.
    pub(crate) record: KeyRecord,
    /// The key.
    pub(crate) secret: String,
}

/// A gateway's runtime keys: the store writes go to, the mirror its plans
/// read, and the watcher (Redis).
#[derive(Debug)]
pub struct Keys {
    installer: Installer,
    store: Arc<dyn KeyStore>,
    /// One write of this instance at a time (held by the write's task).
    writes: Arc<tokio::sync::Mutex<()>>,
    /// The shared hash (Redis), and its watcher once keys are read.
    hash: Option<Arc<SharedHash>>,
    watcher: parking_lot::Mutex<Option<AbortOnDrop>>,
}

impl Keys {
    /// The keys of a gateway on `backend`, mirrored in `mirror` (which
    /// `plan`'s plans read when `gateway.auth.runtimeKeys`). On Redis the
    /// watcher starts when the plan reads runtime keys (now, or at the
    /// reload that turns them on: [`watch`](Self::watch)); Redis down is
    /// not fatal: it reconnects by itself.
    pub(crate) fn start(
        backend: &BackendConfig,
        mirror: Arc<RuntimeKeys>,
        plan: PlanCell,
        broker: Broker,
    ) -> Self {
        let on = plan.load().config().auth.runtime_keys;
        let installer = Installer { mirror, plan, broker };
        let (store, hash): (Arc<dyn KeyStore>, _) = match backend {
            BackendConfig::Memory => (Arc::new(MemoryStore::default()), None),
            BackendConfig::Redis(rc) => {
                let hash = Arc::new(SharedHash::new(rc, HASH_NAME));
                (
                    Arc::new(RedisStore {
                        hash: Arc::clone(&hash),
                    }),
                    Some(hash),
                )
            }
        };
        let keys = Self {
            installer,
            store,
            writes: Arc::new(tokio::sync::Mutex::new(())),
            hash,
            watcher: parking_lot::Mutex::new(None),
        };
        if on {
            keys.watch();
        }
        keys
    }

    /// Starts the watcher of the fleet's keys (Redis), unless it runs:
    /// called when a plan that reads runtime keys is installed. It then
    /// runs as long as the gateway.
    pub(crate) fn watch(&self) {
        let Some(hash) = &self.hash else {
            return;
        };
        let mut watcher = self.watcher.lock();
        if watcher.is_none() {
            *watcher = Some(watch(Arc::clone(hash), self.installer.clone()));
        }
    }

    /// The mirror.
    pub(crate) fn mirror(&self) -> &Arc<RuntimeKeys> {
        &self.installer.mirror
    }

    /// The live key `id` and its record.
    pub(crate) fn get(&self, id: &str) -> Option<(Arc<RuntimeKey>, KeyRecord)> {
        let key = self.mirror().get(id)?;
        let record = KeyRecord::read(id, &key.stored).ok()?;
        Some((key, record))
    }

    /// The rules of the plan serving now, at `now_ms`.
    fn with_rules<T>(&self, now_ms: u64, f: impl FnOnce(&Plan, &Rules<'_>) -> T) -> T {
        let plan = self.installer.plan.load_full();
        let known = |name: &str| {
            plan.llm()
                .is_some_and(|l| l.config().use_cases.contains_key(name))
        };
        let rules = Rules {
            now_ms,
            use_case: plan.llm().is_some().then_some(&known as &dyn Fn(&str) -> bool),
        };
        f(&plan, &rules)
    }

    /// Issues a key for `new`: checked, stored for the fleet and applied
    /// here before this returns.
    pub(crate) async fn create(&self, new: NewKey, now_ms: u64) -> Result<Issued, KeyError> {
        let guard = Arc::clone(&self.writes).lock_owned().await;
        if self.mirror().len() >= MAX_KEYS {
            return Err(KeyError::Full);
        }
        let (record, secret) = self.with_rules(now_ms, |plan, rules| {
            if let Some(name) = &new.name {
                if name_taken(plan, self.mirror(), name) {
                    return Err(KeyError::NameTaken);
                }
            }
            let (secret, sha256) = loop {
                let secret = new_secret();
                let d = digest(secret.as_bytes());
                // A runtime key never shadows a config key (2^-256 odds).
                let config = plan.tenant().api_keys.as_deref();
                if config.and_then(|k| k.find_digest(&d)).is_none() {
                    break (secret, hex(&d));
                }
            };
            let id = loop {
                let id = new_id();
                if self.mirror().get(&id).is_none() {
                    break id;
                }
            };
            let record = rules.new_record(new, id, sha256).map_err(KeyError::Invalid)?;
            if let Some(limits) = &record.limits {
                holdable(&self.installer.broker, &record.resource(), limits)?;
            }
            Ok((record, secret))
        })?;
        self.write(guard, record.id.clone(), Some(record.clone()), false)
            .await?;
        Ok(Issued { record, secret })
    }

    /// Changes the key `id` by `patch` for the fleet (its resource keeps
    /// its usage); its new record.
    pub(crate) async fn update(&self, id: &str, patch: KeyPatch, now_ms: u64) -> Result<KeyRecord, KeyError> {
        let guard = Arc::clone(&self.writes).lock_owned().await;
        let (_, record) = self.get(id).ok_or(KeyError::NotFound)?;
        let record = self.with_rules(now_ms, |_, rules| {
            let record = rules.patched(record, patch).map_err(KeyError::Invalid)?;
            if let Some(limits) = &record.limits {
                holdable(&self.installer.broker, &record.resource(), limits)?;
            }
            Ok(record)
        })?;
        self.write(guard, id.to_owned(), Some(record.clone()), true)
            .await?;
        Ok(record)
    }

    /// Revokes the key `id` for the fleet.
    pub(crate) async fn revoke(&self, id: &str) -> Result<(), KeyError> {
        let guard = Arc::clone(&self.writes).lock_owned().await;
        if self.mirror().get(id).is_none() {
            return Err(KeyError::NotFound);
        }
        self.write(guard, id.to_owned(), None, false).await
    }

    /// Stores `record` as `id`'s (only over an existing one when
    /// `replace`), or removes it, then applies it here; in a task of its
    /// own that holds `guard` (module docs).
    async fn write(
        &self,
        guard: tokio::sync::OwnedMutexGuard<()>,
        id: String,
        record: Option<KeyRecord>,
        replace: bool,
    ) -> Result<(), KeyError> {
        let json = match &record {
            Some(r) => Some(
                serde_json::to_string(r)
                    .map_err(|e| KeyError::Unavailable(BackendError::Protocol(e.to_string())))?,
            ),
            None => None,
        };
        let (store, installer) = (Arc::clone(&self.store), self.installer.clone());
        let task = tokio::spawn(async move {
            let _one_at_a_time = guard;
            let version = match (&json, replace) {
                (Some(j), true) => store
                    .replace(&id, j)
                    .await
                    .map_err(KeyError::Unavailable)?
                    .ok_or(KeyError::NotFound)?,
                (Some(j), false) => store.put(&id, j).await.map_err(KeyError::Unavailable)?,
                (None, _) => store.delete(&id).await.map_err(KeyError::Unavailable)?,
            };
            installer.install(version, &id, json.as_deref());
            Ok(())
        });
        task.await.unwrap_or_else(|e| {
            Err(KeyError::Unavailable(BackendError::Unavailable(format!(
                "the key write failed: {e}"
            ))))
        })
    }
}

/// Whether `name` is a live key's, or a config key's label.
fn name_taken(plan: &Plan, mirror: &RuntimeKeys, name: &str) -> bool {
    mirror.all().iter().any(|k| k.label == name)
        || plan.config().auth.api_keys.iter().any(|k| k.label() == name)
}

/// Whether the backend can hold `limits` on `resource` (Redis refuses a
/// `gcra` rate finer than its clock), so that no stored key fails to
/// install.
fn holdable(broker: &Broker, resource: &str, limits: &pressure_core::Limits) -> Result<(), KeyError> {
    let invalid = |problem: String| KeyError::Invalid(ConfigError::new("limits", problem));
    let spec = limits.compile().map_err(|e| invalid(e.problem.to_string()))?;
    broker
        .backend()
        .attach(resource, Arc::new(spec))
        .map(|_| ())
        .map_err(|e| invalid(e.to_string()))
}

/// Starts the task that applies the fleet's writes to the mirror.
fn watch(hash: Arc<SharedHash>, installer: Installer) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        hash.watch(move |event| match event {
            SharedHashEvent::Snapshot { version, entries } => installer.snapshot(version, entries),
            SharedHashEvent::Set {
                version,
                field,
                value,
            } => {
                installer.install(version, &field, Some(&value));
            }
            SharedHashEvent::Removed { version, field } => {
                installer.install(version, &field, None);
            }
        })
        .await;
    }))
}
