//! Where live overrides are kept ([`OverrideStore`]: in this process, or in
//! the backend's Redis so the fleet agrees) and [`Overrides`], a gateway's
//! side of them: writes, its mirror ([`LiveOverrides`]) and, on Redis, the
//! watcher that keeps the mirror in step with the other instances.
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

use super::{compile, LiveOverrides};
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

/// Keeps live overrides for the fleet; every write gets a version larger
/// than every earlier one.
pub(crate) trait OverrideStore: Send + Sync + std::fmt::Debug {
    /// Stores `limits` as `tenant`'s live override; the write's version.
    fn put<'a>(&'a self, tenant: &'a str, limits: &'a Limits) -> BoxFuture<'a, Result<u64, BackendError>>;
    /// Removes `tenant`'s live override (also when absent); the write's
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
    fn put<'a>(&'a self, _: &'a str, _: &'a Limits) -> BoxFuture<'a, Result<u64, BackendError>> {
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
    fn put<'a>(&'a self, tenant: &'a str, limits: &'a Limits) -> BoxFuture<'a, Result<u64, BackendError>> {
        Box::pin(async move {
            let json = serde_json::to_string(limits).map_err(|e| BackendError::Protocol(e.to_string()))?;
            self.hash.set(tenant, &json).await
        })
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
    plan: PlanCell,
    broker: Broker,
    _watcher: Option<AbortOnDrop>,
}

impl Overrides {
    /// The overrides of a gateway on `backend`, mirrored in `live` (which
    /// `plan`'s plans read); on Redis the watcher starts now (Redis down is
    /// not fatal: it reconnects by itself).
    pub(crate) fn start(
        backend: &BackendConfig,
        live: Arc<LiveOverrides>,
        plan: PlanCell,
        broker: Broker,
    ) -> Self {
        let (store, watcher): (Arc<dyn OverrideStore>, _) = match backend {
            BackendConfig::Memory => (Arc::new(MemoryStore::default()), None),
            BackendConfig::Redis(rc) => {
                let hash = Arc::new(SharedHash::new(rc, HASH_NAME));
                let watcher = watch(Arc::clone(&hash), Arc::clone(&live), plan.clone(), broker.clone());
                (Arc::new(RedisStore { hash }), Some(watcher))
            }
        };
        Self {
            live,
            store,
            plan,
            broker,
            _watcher: watcher,
        }
    }

    /// The mirror.
    pub(crate) fn live(&self) -> &Arc<LiveOverrides> {
        &self.live
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
                Some((l, t)) => (store.put(&tenant, &l).await?, Some(t)),
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
            let touched = match event {
                SharedHashEvent::Snapshot { version, entries } => {
                    let all: HashMap<String, LimitTemplate> = entries
                        .into_iter()
                        .filter_map(|(tenant, json)| parse(&key, &tenant, &json).map(|t| (tenant, t)))
                        .collect();
                    live.replace(version, all)
                }
                SharedHashEvent::Set {
                    version,
                    field,
                    value,
                } => match parse(&key, &field, &value) {
                    Some(t) if live.apply(version, &field, Some(t.clone())) => vec![field],
                    _ => Vec::new(),
                },
                SharedHashEvent::Removed { version, field } => {
                    if live.apply(version, &field, None) {
                        vec![field]
                    } else {
                        Vec::new()
                    }
                }
            };
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
