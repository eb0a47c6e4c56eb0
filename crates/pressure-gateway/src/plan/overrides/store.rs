//! Where live overrides are kept ([`OverrideStore`]: in this process, or in
//! the backend's Redis so the fleet agrees) and [`Overrides`], a gateway's
//! side of them: writes, its mirror ([`LiveOverrides`]) and, on Redis, the
//! watcher that keeps the mirror in step with the other instances. The
//! live tenant parents (nested budgets, `crate::plan::hierarchy`) are kept
//! the same way beside them ([`LiveParents`], the hash `tenant-parents`:
//! tenant id → parent id, `""` for "no parent").
//!
//! * **Memory**: the mirror is the store; the store only numbers the
//!   writes. One process, nothing to propagate.
//! * **Redis**: a `pressure_redis::SharedHash` named `tenant-overrides` —
//!   the hash `<keyPrefix>:{config}:tenant-overrides` (tenant id → limits
//!   JSON), persistent on purpose (it is configuration; `pressure redis gc`
//!   leaves `{config}` keys alone), each write announced on a pub/sub
//!   channel. Every instance subscribes and reads the whole hash on each
//!   (re)subscription. **Bound**: the writing instance applies a change as
//!   soon as Redis has it; the others one pub/sub delivery later
//!   (milliseconds); an instance whose subscription broke catches up within
//!   `PING_EVERY + PING_TIMEOUT` (3 s) plus its reconnect (backoff up to
//!   2 s) after Redis answers again.
//! * **Cancellation**: a write runs in a task of its own, so a client that
//!   goes away mid-request leaves it either done everywhere (store, mirror,
//!   registered tenant) or not done.

use super::{compile, LiveMap, LiveOverrides, LiveParents};
use crate::backend::Broker;
use crate::plan::PlanCell;
use crate::settings::BackendConfig;
use futures::future::BoxFuture;
use pressure_core::{BackendError, LimitTemplate, Limits};
use pressure_redis::{SharedHash, SharedHashEvent};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The name of the shared hash of live tenant overrides in Redis.
pub(crate) const HASH_NAME: &str = "tenant-overrides";

/// The name of the shared hash of live tenant parents in Redis.
pub(crate) const PARENTS_HASH_NAME: &str = "tenant-parents";

/// Keeps live overrides for the fleet; every write gets a version larger
/// than every earlier one.
pub(crate) trait OverrideStore: Send + Sync + std::fmt::Debug {
    /// Stores `value` as `tenant`'s live entry; the write's version.
    fn put<'a>(&'a self, tenant: &'a str, value: String) -> BoxFuture<'a, Result<u64, BackendError>>;
    /// Removes `tenant`'s live entry (also when absent); the write's
    /// version.
    fn delete<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, Result<u64, BackendError>>;
}

/// One process: the mirror holds the overrides, this numbers the writes.
#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    version: AtomicU64,
}

impl MemoryStore {
    fn next(&self) -> Result<u64, BackendError> {
        Ok(self.version.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

impl OverrideStore for MemoryStore {
    fn put<'a>(&'a self, _: &'a str, _: String) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(async move { self.next() })
    }

    fn delete<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(async move { self.next() })
    }
}

/// The fleet: the shared hash in the backend's Redis.
#[derive(Debug)]
pub(crate) struct RedisStore {
    hash: Arc<SharedHash>,
}

impl OverrideStore for RedisStore {
    fn put<'a>(&'a self, tenant: &'a str, value: String) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(async move { self.hash.set(tenant, &value).await })
    }

    fn delete<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(self.hash.remove(tenant))
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

/// A gateway's live overrides: the store writes go to, the mirror its plans
/// read, and the watcher (Redis).
#[derive(Debug)]
pub(crate) struct Overrides {
    live: Arc<LiveOverrides>,
    store: Arc<dyn OverrideStore>,
    parents: Arc<LiveParents>,
    parent_store: Arc<dyn OverrideStore>,
    plan: PlanCell,
    broker: Broker,
    _watchers: Vec<AbortOnDrop>,
}

impl Overrides {
    /// The overrides of a gateway on `backend`, mirrored in `live` (which
    /// `plan`'s plans read); on Redis the watcher starts now (Redis down is
    /// not fatal: it reconnects by itself).
    pub(crate) fn start(
        backend: &BackendConfig,
        live: Arc<LiveOverrides>,
        parents: Arc<LiveParents>,
        plan: PlanCell,
        broker: Broker,
    ) -> Self {
        let mut watchers = Vec::new();
        let (store, parent_store): (Arc<dyn OverrideStore>, Arc<dyn OverrideStore>) = match backend {
            BackendConfig::Memory => (Arc::new(MemoryStore::default()), Arc::new(MemoryStore::default())),
            BackendConfig::Redis(rc) => {
                let hash = Arc::new(SharedHash::new(rc, HASH_NAME));
                watchers.push(watch(
                    Arc::clone(&hash),
                    Arc::clone(&live),
                    plan.clone(),
                    broker.clone(),
                ));
                let parent_hash = Arc::new(SharedHash::new(rc, PARENTS_HASH_NAME));
                watchers.push(watch_parents(Arc::clone(&parent_hash), Arc::clone(&parents)));
                (
                    Arc::new(RedisStore { hash }),
                    Arc::new(RedisStore { hash: parent_hash }),
                )
            }
        };
        Self {
            live,
            store,
            parents,
            parent_store,
            plan,
            broker,
            _watchers: watchers,
        }
    }

    /// The mirror.
    pub(crate) fn live(&self) -> &Arc<LiveOverrides> {
        &self.live
    }

    /// The mirror of the live parents.
    pub(crate) fn parents(&self) -> &Arc<LiveParents> {
        &self.parents
    }

    /// Sets (`Some`; `""` for "no parent") or removes (`None`: back to the
    /// config's) `tenant`'s live parent for the fleet, applied here at once
    /// (settled even if the caller goes away). The next request of the
    /// tenant (or of a descendant) is charged along the new chain.
    pub(crate) async fn write_parent(
        &self,
        tenant: String,
        parent: Option<String>,
    ) -> Result<(), BackendError> {
        let (store, live) = (Arc::clone(&self.parent_store), Arc::clone(&self.parents));
        let task = tokio::spawn(async move {
            let version = match &parent {
                Some(p) => store.put(&tenant, p.clone()).await?,
                None => store.delete(&tenant).await?,
            };
            live.apply(version, &tenant, parent);
            Ok(())
        });
        task.await
            .unwrap_or_else(|e| Err(BackendError::Unavailable(format!("the parent write failed: {e}"))))
    }

    /// Sets (`Some`) or removes `tenant`'s live override for the fleet and
    /// applies it here at once (module docs: settled even if the caller
    /// goes away).
    pub(crate) async fn write(
        &self,
        tenant: String,
        limits: Option<(Limits, LimitTemplate)>,
    ) -> Result<(), BackendError> {
        let (store, live, plan, broker) = (
            Arc::clone(&self.store),
            Arc::clone(&self.live),
            self.plan.clone(),
            self.broker.clone(),
        );
        let task = tokio::spawn(async move {
            let (version, template) = match limits {
                Some((l, t)) => {
                    let json =
                        serde_json::to_string(&l).map_err(|e| BackendError::Protocol(e.to_string()))?;
                    (store.put(&tenant, json).await?, Some(t))
                }
                None => (store.delete(&tenant).await?, None),
            };
            if live.apply(version, &tenant, template) {
                plan.load().refresh_tenant(&broker, &tenant);
            }
            Ok(())
        });
        task.await.unwrap_or_else(|e| {
            Err(BackendError::Unavailable(format!(
                "the override write failed: {e}"
            )))
        })
    }
}

/// Starts the task that applies the fleet's writes to `live` and the
/// registered tenants.
fn watch(hash: Arc<SharedHash>, live: Arc<LiveOverrides>, plan: PlanCell, broker: Broker) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let key = hash.key().to_owned();
        hash.watch(move |event| {
            let touched = apply_event(&live, event, |tenant, json| parse(&key, tenant, &json));
            if !touched.is_empty() {
                let plan = plan.load();
                for tenant in &touched {
                    plan.refresh_tenant(&broker, tenant);
                }
            }
        })
        .await;
    }))
}

/// Starts the task that applies the fleet's parent writes to `live` (the
/// next request walks the new chain: nothing registered needs refreshing).
fn watch_parents(hash: Arc<SharedHash>, live: Arc<LiveParents>) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        hash.watch(move |event| {
            apply_event(&live, event, |_, v| {
                (v.is_empty() || super::check_tenant(&v, "").is_ok()).then_some(v)
            });
        })
        .await;
    }))
}

/// Applies one announcement of a shared hash to `live`, each value read by
/// `parse` (one it cannot read is skipped); the tenants it changed.
fn apply_event<V: Clone>(
    live: &LiveMap<V>,
    event: SharedHashEvent,
    parse: impl Fn(&str, String) -> Option<V>,
) -> Vec<String> {
    match event {
        SharedHashEvent::Snapshot { version, entries } => {
            let all: HashMap<String, V> = entries
                .into_iter()
                .filter_map(|(tenant, value)| parse(&tenant, value).map(|v| (tenant, v)))
                .collect();
            live.replace(version, all)
        }
        SharedHashEvent::Set {
            version,
            field,
            value,
        } => match parse(&field, value) {
            Some(v) => {
                if live.apply(version, &field, Some(v)) {
                    vec![field]
                } else {
                    Vec::new()
                }
            }
            None => Vec::new(),
        },
        SharedHashEvent::Removed { version, field } => {
            if live.apply(version, &field, None) {
                vec![field]
            } else {
                Vec::new()
            }
        }
    }
}

/// The limits stored for `tenant`, if they parse and compile (anything
/// else was not written by a gateway: logged and ignored).
fn parse(key: &str, tenant: &str, json: &str) -> Option<LimitTemplate> {
    let parsed = serde_json::from_str::<Limits>(json)
        .map_err(|e| e.to_string())
        .and_then(|l| compile(&l, "").map_err(|e| e.to_string()));
    match parsed {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(
                key,
                tenant,
                error = e.as_str(),
                "unreadable live tenant override ignored"
            );
            None
        }
    }
}
