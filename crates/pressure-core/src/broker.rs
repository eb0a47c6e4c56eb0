//! [`ResourceBroker`]: the registry of resources and the two strategies on
//! top of one [`Backend`].

use crate::acquisition::{AcquireOptions, Acquisition};
use crate::backend::{Backend, Denial, LocalBackend};
use crate::clock::{Clock, MonotonicClock};
use crate::entry::{Counters, Entry, Fits, Permit, WaitingLine};
use crate::error::{Error, QueueError};
use crate::handle::ResourceHandle;
use crate::limits::{LimitSpec, Limits};
use crate::ppm::PPM;
use crate::queue::{self, Attempt, Request, Response, TaskError};
use crate::queue_config::QueueConfig;
use crate::renewal::{LeaseBook, Renewer};
use crate::stats::{ResourceKind, ResourceStats, WaitTimes};
use crate::MemoryBackend;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Default bound on lazily registered resources.
pub const DEFAULT_MAX_LAZY_RESOURCES: usize = 100_000;

/// Limits plus queue settings of a `queue` resource (`register`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceConfig {
    /// What the resource admits.
    pub limits: Limits,
    /// How callers wait.
    #[serde(default)]
    pub queue: QueueConfig,
}

impl ResourceConfig {
    /// Limits with the default queue settings.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            queue: QueueConfig::default(),
        }
    }

    /// Replaces the queue settings.
    pub fn queue(mut self, queue: QueueConfig) -> Self {
        self.queue = queue;
        self
    }
}

/// Limits compiled once for many lazily registered resources (one per
/// tenant), so registering a tenant costs no parsing or validation.
#[derive(Debug, Clone)]
pub struct LimitTemplate(Arc<LimitSpec>);

impl LimitTemplate {
    /// Validates `limits` for use as a template.
    pub fn new(limits: &Limits) -> Result<Self, crate::LimitsError> {
        Ok(Self(Arc::new(limits.compile()?)))
    }

    /// The template's limits.
    pub fn limits(&self) -> &Limits {
        &self.0.limits
    }
}

/// Builds a [`ResourceBroker`] with a chosen backend and options.
#[derive(Debug)]
pub struct BrokerBuilder<B: Backend> {
    backend: B,
    clock: Arc<dyn Clock>,
    max_lazy: usize,
}

impl<B: Backend> BrokerBuilder<B> {
    /// The clock used for idle tracking of lazy resources.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Most lazily registered resources kept at once (default 100 000).
    pub fn max_lazy_resources(mut self, n: usize) -> Self {
        self.max_lazy = n.max(1);
        self
    }

    /// Builds the broker.
    pub fn build(self) -> ResourceBroker<B> {
        ResourceBroker {
            shared: Arc::new(Shared {
                backend: Arc::new(self.backend),
                resources: DashMap::with_hasher(ahash::RandomState::new()),
                lazy_count: AtomicUsize::new(0),
                evicted: AtomicU64::new(0),
                max_lazy: self.max_lazy,
                renewer: Arc::new(Renewer::new(Arc::clone(&self.clock))),
                clock: self.clock,
                evicting: parking_lot::Mutex::new(()),
                reconfiguring: parking_lot::Mutex::new(()),
            }),
        }
    }
}

struct Shared<B: Backend> {
    backend: Arc<B>,
    resources: DashMap<Arc<str>, Arc<Entry<B>>, ahash::RandomState>,
    lazy_count: AtomicUsize,
    evicted: AtomicU64,
    max_lazy: usize,
    clock: Arc<dyn Clock>,
    evicting: parking_lot::Mutex<()>,
    /// Serializes `set_limits`, so each change continues the latest state.
    reconfiguring: parking_lot::Mutex<()>,
    /// Renews the leases of every live permit (see `renewal`).
    renewer: Arc<Renewer<Entry<B>>>,
}

impl<B: Backend> Drop for Shared<B> {
    /// The broker is gone: nothing vouches for its leases any more, so they
    /// expire after their TTL like those of a process that died.
    fn drop(&mut self) {
        self.renewer.stop();
    }
}

/// What [`ResourceBroker::set_limits`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitChange {
    /// The resource was absent and is now registered as a `limit` resource.
    Registered,
    /// The resource already had exactly these limits: nothing changed, its
    /// handles, permits and counters are untouched.
    Unchanged,
    /// The limits changed: new acquisitions (also through handles obtained
    /// before) count against them, current usage and counters carry over.
    Changed,
}

/// One broker, two strategies on exhaustion over the same counters:
/// queue+execute (`register` + `enqueue`) and check+reject
/// (`register_limit` + `try_acquire`). Cheap to clone; clones share state.
pub struct ResourceBroker<B: Backend = MemoryBackend> {
    shared: Arc<Shared<B>>,
}

impl<B: Backend> Clone for ResourceBroker<B> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B: Backend> std::fmt::Debug for ResourceBroker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceBroker")
            .field("resources", &self.shared.resources.len())
            .finish_non_exhaustive()
    }
}

impl ResourceBroker<MemoryBackend> {
    /// A broker on the in-memory backend.
    pub fn new() -> Self {
        Self::builder(MemoryBackend::new()).build()
    }
}

impl Default for ResourceBroker<MemoryBackend> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Backend> ResourceBroker<B> {
    /// Starts building a broker on `backend`.
    pub fn builder(backend: B) -> BrokerBuilder<B> {
        BrokerBuilder {
            backend,
            clock: Arc::new(MonotonicClock::new()),
            max_lazy: DEFAULT_MAX_LAZY_RESOURCES,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// Registers a `queue` resource (usable by `enqueue` and `try_acquire`).
    pub fn register(&self, resource: impl Into<String>, config: ResourceConfig) -> Result<(), Error> {
        let resource = resource.into();
        config.queue.validate().map_err(|e| Error::InvalidQueue {
            resource: resource.clone(),
            field: e.path,
            problem: e.problem,
        })?;
        let spec = compile(&resource, &config.limits)?;
        let ceiling = ((1.0 - config.queue.batch_headroom) * f64::from(PPM)) as u32;
        let queue = Some(Arc::new(WaitingLine::new(config.queue)));
        self.insert(resource, spec, ResourceKind::Queue, queue, ceiling, false)
            .map(drop)
    }

    /// Registers a `limit` resource (`try_acquire` only).
    pub fn register_limit(&self, resource: impl Into<String>, limits: Limits) -> Result<(), Error> {
        let resource = resource.into();
        let spec = compile(&resource, &limits)?;
        self.insert(resource, spec, ResourceKind::Limit, None, PPM, false)
            .map(drop)
    }

    /// Sets the limits of `resource` live, for a configuration reload:
    ///
    /// * absent: registers it as a `limit` resource ([`LimitChange::Registered`]);
    /// * present with equal limits: does nothing ([`LimitChange::Unchanged`]);
    /// * present with other limits ([`LimitChange::Changed`]): every new
    ///   acquisition — also through [`ResourceHandle`]s obtained earlier —
    ///   counts against `limits`, while current usage is kept: window
    ///   sub-windows, `gcra` bucket levels (by the units they hold), and live
    ///   leases, which still release correctly and count against the new
    ///   `maxConcurrentRequests`. Allowed/denied counters continue; a
    ///   dimension that is added starts empty, one that is removed stops
    ///   counting. The resource keeps its kind (a `queue` resource keeps its
    ///   queue and waiters, which are served under the new limits).
    ///
    /// Invalid limits change nothing and return [`Error::InvalidLimits`].
    pub fn set_limits(&self, resource: &str, limits: Limits) -> Result<LimitChange, Error> {
        let spec = compile(resource, &limits)?;
        let _serial = self.shared.reconfiguring.lock();
        loop {
            let Some(found) = self.shared.resources.get(resource).map(|e| Arc::clone(e.value())) else {
                match self.insert(
                    resource.to_owned(),
                    Arc::clone(&spec),
                    ResourceKind::Limit,
                    None,
                    PPM,
                    false,
                ) {
                    Ok(_) => return Ok(LimitChange::Registered),
                    // Registered meanwhile by another caller: change that one.
                    Err(Error::AlreadyRegistered(_)) => continue,
                    Err(e) => return Err(e),
                }
            };
            let current = Arc::clone(found.current());
            if current.spec.limits == limits {
                return Ok(LimitChange::Unchanged);
            }
            let handle = self
                .shared
                .backend
                .reattach(resource, &current.handle, Arc::clone(&spec))?;
            self.link_next(resource, &found, &current, handle, spec);
            if let Some(q) = current.queue.as_deref() {
                // Waiters may fit under the new limits.
                q.wake();
            }
            return Ok(LimitChange::Changed);
        }
    }

    /// Removes `resource` from the broker (a reload dropped it); `false` if
    /// it was not registered. Permits granted on it still release (their
    /// state lives as long as they do); handles obtained earlier keep
    /// counting on that unregistered state, so callers should drop them.
    pub fn unregister(&self, resource: &str) -> bool {
        match self.shared.resources.remove(resource) {
            Some((_, entry)) => {
                if entry.lazy {
                    self.shared.lazy_count.fetch_sub(1, Ordering::Relaxed);
                }
                true
            }
            None => false,
        }
    }

    /// The handle of a registered resource, to acquire without a lookup.
    pub fn resource(&self, resource: &str) -> Option<ResourceHandle<B>> {
        self.shared.resources.get(resource).map(|e| ResourceHandle {
            entry: Arc::clone(e.value()),
        })
    }

    /// The registered entry of `resource`, marked as used now when it was
    /// registered lazily (what keeps it from eviction).
    fn touched(&self, resource: &str) -> Option<Arc<Entry<B>>> {
        let entry = Arc::clone(self.shared.resources.get(resource)?.value());
        if entry.lazy {
            entry
                .last_used
                .store(self.shared.clock.now_nanos(), Ordering::Relaxed);
        }
        Some(entry)
    }

    /// The handle of `resource`, registering it on first use as a `limit`
    /// resource with `template` (e.g. one per tenant). Lazily registered
    /// resources are bounded: past the bound, resources at rest are evicted
    /// first, then the least recently used idle ones (see the crate docs).
    pub fn lazy_limit(&self, resource: &str, template: &LimitTemplate) -> Result<ResourceHandle<B>, Error> {
        if let Some(entry) = self.touched(resource) {
            return Ok(ResourceHandle { entry });
        }
        match self.insert(
            resource.to_owned(),
            Arc::clone(&template.0),
            ResourceKind::Limit,
            None,
            PPM,
            true,
        ) {
            Ok(entry) => Ok(ResourceHandle { entry }),
            // Lost a race with another registration of the same id.
            Err(Error::AlreadyRegistered(_)) => self
                .resource(resource)
                .ok_or_else(|| Error::UnknownResource(resource.to_owned())),
            Err(e) => Err(e),
        }
    }

    /// The handle of `resource` in `group`, registering it on first use as
    /// a `limit` resource with `template`, like [`ResourceBroker::lazy_limit`]:
    /// for the levels of a [`crate::Nest`] (a tenant, its team, its
    /// organisation), registered with the id of the hierarchy's root as
    /// `group`. A store that shards by key keeps every resource of a group
    /// together, so a nest over them is one atomic step (on Redis Cluster,
    /// one hash slot — the slot of the resource whose id is `group`, so the
    /// root itself may be registered without a group, or in its own). A
    /// resource already registered in another group (or
    /// in none) — a tenant moved to another parent — moves to `group`: new
    /// acquisitions, also through handles obtained before, count there, on
    /// state that starts empty in a store that shards by key (permits
    /// already granted release where they were granted).
    pub fn lazy_limit_in_group(
        &self,
        resource: &str,
        group: &str,
        template: &LimitTemplate,
    ) -> Result<ResourceHandle<B>, Error> {
        if let Some(entry) = self.touched(resource) {
            if self.shared.backend.in_group(&entry.current().handle, group) {
                return Ok(ResourceHandle { entry });
            }
            return self.regroup(resource, group);
        }
        match self.insert_in(
            resource.to_owned(),
            Arc::clone(&template.0),
            ResourceKind::Limit,
            None,
            PPM,
            true,
            Some(group),
        ) {
            Ok(entry) => Ok(ResourceHandle { entry }),
            Err(Error::AlreadyRegistered(_)) => self.lazy_limit_in_group(resource, group, template),
            Err(e) => Err(e),
        }
    }

    /// Registers a `limit` resource in `group` (see
    /// [`ResourceBroker::lazy_limit_in_group`]).
    pub fn register_limit_in_group(
        &self,
        resource: impl Into<String>,
        group: &str,
        limits: Limits,
    ) -> Result<(), Error> {
        let resource = resource.into();
        let spec = compile(&resource, &limits)?;
        self.insert_in(resource, spec, ResourceKind::Limit, None, PPM, false, Some(group))
            .map(drop)
    }

    /// Moves a registered resource to `group`: a new version attached
    /// there, with the same limits, that every older version forwards to.
    fn regroup(&self, resource: &str, group: &str) -> Result<ResourceHandle<B>, Error> {
        let _serial = self.shared.reconfiguring.lock();
        let Some(found) = self.shared.resources.get(resource).map(|e| Arc::clone(e.value())) else {
            return Err(Error::UnknownResource(resource.to_owned()));
        };
        let current = Arc::clone(found.current());
        if !self.shared.backend.in_group(&current.handle, group) {
            let spec = Arc::clone(&current.spec);
            let handle = self
                .shared
                .backend
                .attach_grouped(resource, group, Arc::clone(&spec))?;
            self.link_next(resource, &found, &current, handle, spec);
        }
        Ok(ResourceHandle { entry: found })
    }

    /// Makes the version of `resource` that follows `current` (the newest
    /// version of `found`, the one in the map), with `handle` and `spec`,
    /// and links it: old versions forward to the new one first, then the
    /// map serves it. Under `reconfiguring`, so nobody else links `current`.
    fn link_next(
        &self,
        resource: &str,
        found: &Arc<Entry<B>>,
        current: &Arc<Entry<B>>,
        handle: B::Handle,
        spec: Arc<LimitSpec>,
    ) {
        let stateful = spec.permits_hold_state();
        let next = Arc::new(Entry {
            id: Arc::clone(&current.id),
            kind: current.kind,
            fits: Fits::of(&spec),
            spec,
            backend: Arc::clone(&self.shared.backend),
            handle,
            counters: OnceLock::from(Arc::clone(current.shared_counters())),
            queue: current.queue.clone(),
            batch_ceiling_ppm: current.batch_ceiling_ppm,
            lazy: current.lazy,
            stateful,
            last_used: AtomicU64::new(current.last_used.load(Ordering::Relaxed)),
            next: OnceLock::new(),
            renewer: Arc::clone(&self.shared.renewer),
            leases: LeaseBook::default(),
        });
        let _ = current.next.set(Arc::clone(&next));
        if let Some(mut slot) = self.shared.resources.get_mut(resource) {
            if Arc::ptr_eq(slot.value(), found) {
                *slot.value_mut() = next;
            }
        }
    }

    fn insert(
        &self,
        resource: String,
        spec: Arc<LimitSpec>,
        kind: ResourceKind,
        queue: Option<Arc<WaitingLine<B>>>,
        batch_ceiling_ppm: u32,
        lazy: bool,
    ) -> Result<Arc<Entry<B>>, Error> {
        self.insert_in(resource, spec, kind, queue, batch_ceiling_ppm, lazy, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_in(
        &self,
        resource: String,
        spec: Arc<LimitSpec>,
        kind: ResourceKind,
        queue: Option<Arc<WaitingLine<B>>>,
        batch_ceiling_ppm: u32,
        lazy: bool,
        group: Option<&str>,
    ) -> Result<Arc<Entry<B>>, Error> {
        let handle = match group {
            Some(group) => self
                .shared
                .backend
                .attach_grouped(&resource, group, Arc::clone(&spec))?,
            None => self.shared.backend.attach(&resource, Arc::clone(&spec))?,
        };
        let stateful = spec.permits_hold_state();
        let id: Arc<str> = Arc::from(resource);
        let entry = Arc::new(Entry {
            id: Arc::clone(&id),
            kind,
            fits: Fits::of(&spec),
            spec,
            backend: Arc::clone(&self.shared.backend),
            handle,
            counters: OnceLock::new(),
            queue,
            batch_ceiling_ppm,
            lazy,
            stateful,
            last_used: AtomicU64::new(self.shared.clock.now_nanos()),
            next: OnceLock::new(),
            renewer: Arc::clone(&self.shared.renewer),
            leases: LeaseBook::default(),
        });
        match self.shared.resources.entry(id) {
            dashmap::Entry::Occupied(o) => return Err(Error::AlreadyRegistered(o.key().to_string())),
            dashmap::Entry::Vacant(v) => {
                v.insert(Arc::clone(&entry));
            }
        }
        if lazy && self.shared.lazy_count.fetch_add(1, Ordering::Relaxed) + 1 > self.shared.max_lazy {
            self.evict_lazy();
        }
        Ok(entry)
    }

    /// Evicts lazily registered resources until the count is back under the
    /// bound with some slack: first those at rest (no loss of accuracy), then
    /// the least recently used ones that no permit or handle holds.
    fn evict_lazy(&self) {
        let Some(_guard) = self.shared.evicting.try_lock() else {
            return;
        };
        let target = self.shared.max_lazy - self.shared.max_lazy / 8;
        let count = |s: &Self| s.shared.lazy_count.load(Ordering::Relaxed);
        if count(self) <= self.shared.max_lazy {
            return;
        }
        let mut idle: Vec<(u64, Arc<str>)> = Vec::new();
        let mut rest: Vec<Arc<str>> = Vec::new();
        for e in self.shared.resources.iter() {
            let entry = e.value();
            if !entry.lazy || Arc::strong_count(entry) > 1 {
                continue;
            }
            if self.shared.backend.at_rest(&entry.handle) {
                rest.push(Arc::clone(e.key()));
            } else {
                idle.push((entry.last_used.load(Ordering::Relaxed), Arc::clone(e.key())));
            }
        }
        let excess = count(self).saturating_sub(target);
        idle.sort_unstable_by_key(|(t, _)| *t);
        let order = rest.into_iter().chain(idle.into_iter().map(|(_, k)| k));
        let mut removed = 0;
        for key in order {
            if removed >= excess {
                break;
            }
            let gone = self
                .shared
                .resources
                .remove_if(&key, |_, e| e.lazy && Arc::strong_count(e) == 1);
            if gone.is_some() {
                removed += 1;
                self.shared.lazy_count.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.shared.evicted.fetch_add(removed as u64, Ordering::Relaxed);
    }

    /// Concurrency leases of this broker's live permits, all kept alive by
    /// its one renewal task.
    pub fn live_leases(&self) -> usize {
        self.shared.renewer.len()
    }

    /// Lazily registered resources held now.
    pub fn lazy_resources(&self) -> usize {
        self.shared.lazy_count.load(Ordering::Relaxed)
    }

    /// Lazily registered resources evicted so far.
    pub fn evicted_resources(&self) -> u64 {
        self.shared.evicted.load(Ordering::Relaxed)
    }

    /// Registered resources.
    pub fn len(&self) -> usize {
        self.shared.resources.len()
    }

    /// Whether no resource is registered.
    pub fn is_empty(&self) -> bool {
        self.shared.resources.is_empty()
    }

    fn entry(&self, resource: &str) -> Result<Arc<Entry<B>>, Error> {
        self.lookup(resource).map(|e| Arc::clone(e.value()))
    }

    /// Check+reject: reserve now, or get a denial carrying the earliest time
    /// the same demand could fit. A denial consumes nothing.
    #[inline]
    pub async fn try_acquire(&self, resource: &str, opts: AcquireOptions) -> Result<Acquisition<B>, Error> {
        {
            // A backend that answers at once is asked under the map's read
            // guard, so a grant that holds nothing costs no reference count.
            let e = self.lookup(resource)?;
            if let Some(out) = e.value().try_acquire_now_if_local(&opts) {
                return out;
            }
        }
        let entry = self.entry(resource)?;
        entry.try_acquire_awaited(&opts).await
    }

    /// Check+reject without a future, on a backend whose state is in this
    /// process (the in-memory backend).
    #[inline]
    pub fn try_acquire_now(&self, resource: &str, opts: AcquireOptions) -> Result<Acquisition<B>, Error>
    where
        B: LocalBackend,
    {
        self.lookup(resource)?.value().try_acquire_now(&opts)
    }

    /// [`ResourceBroker::try_acquire_now`] as a yes/no, without building a
    /// permit: see [`ResourceHandle::check_now`].
    #[inline]
    pub fn check_now(&self, resource: &str, opts: AcquireOptions) -> Result<Result<(), Denial>, Error>
    where
        B: LocalBackend,
    {
        self.lookup(resource)?.value().check_now(&opts)
    }

    #[inline]
    fn lookup(
        &self,
        resource: &str,
    ) -> Result<dashmap::mapref::one::Ref<'_, Arc<str>, Arc<Entry<B>>>, Error> {
        let e = self
            .shared
            .resources
            .get(resource)
            .ok_or_else(|| Error::UnknownResource(resource.to_owned()))?;
        if e.value().lazy {
            e.value()
                .last_used
                .store(self.shared.clock.now_nanos(), Ordering::Relaxed);
        }
        Ok(e)
    }

    /// "Wait up to `max_wait`, then reject", built on `try_acquire`: retries
    /// at each denial's wait time while that stays within the bound, and
    /// fails ([`Error::WaitExceeded`]) as soon as a rate limit shows it
    /// cannot, or when the bound passes. Counted as one denial if it fails.
    pub async fn acquire_within(
        &self,
        resource: &str,
        opts: AcquireOptions,
        max_wait: Duration,
    ) -> Result<Permit<B>, Error> {
        let entry = self.entry(resource)?;
        let mut demand = entry.current().demand(&opts);
        demand.count_denial = false;
        entry.current().check_size(&demand)?;
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            match entry.attempt(&demand).await? {
                Acquisition::Granted(p) => return Ok(p),
                Acquisition::Denied(d) => {
                    let now = tokio::time::Instant::now();
                    // A rate wait is a lower bound: fail at once when it is
                    // past the deadline. A concurrency wait is an estimate:
                    // keep trying until the deadline itself.
                    if (d.is_exact() && now + d.wait > deadline) || now >= deadline {
                        entry.counters().rejected.fetch_add(1, Ordering::Relaxed);
                        return Err(Error::WaitExceeded {
                            resource: resource.to_owned(),
                            max_wait,
                            wait: d.wait,
                            last: d,
                        });
                    }
                    tokio::time::sleep_until((now + d.wait).min(deadline)).await;
                }
            }
        }
    }

    /// Queue+execute: waits (by priority, within the bounds of the resource's
    /// queue) until capacity frees, runs `task`, reconciles the usage it
    /// reports, and runs it again when it reports a rate limit. Dropping the
    /// returned future abandons the request and leaves nothing behind.
    pub async fn enqueue<T, E, F, Fut>(&self, request: Request<F>) -> Result<Response<T>, QueueError<E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, TaskError<E>>>,
    {
        let entry = self.entry(&request.resource)?;
        queue::enqueue(entry, request).await
    }

    /// A snapshot of every resource, sorted by id. Usage is read from the
    /// backend, up to 64 resources at a time (one round trip each on Redis).
    pub async fn stats(&self) -> Vec<ResourceStats> {
        use futures::StreamExt;
        let mut out: Vec<ResourceStats> = futures::stream::iter(self.entries())
            .map(|e| async move { stats_of(&e).await })
            .buffer_unordered(64)
            .collect()
            .await;
        out.sort_by(|a, b| a.resource.cmp(&b.resource));
        out
    }

    /// The same snapshot without asking the backend for usage (`usage` is
    /// empty): only this process's counters, no store round trip — for
    /// frequent scrapes such as `/metrics`, whatever the number of tenants.
    pub fn local_stats(&self) -> Vec<ResourceStats> {
        let mut out: Vec<ResourceStats> = self.entries().iter().map(|e| local_stats_of(e)).collect();
        out.sort_by(|a, b| a.resource.cmp(&b.resource));
        out
    }

    fn entries(&self) -> Vec<Arc<Entry<B>>> {
        self.shared
            .resources
            .iter()
            .map(|e| Arc::clone(e.value()))
            .collect()
    }

    /// A snapshot of one resource.
    pub async fn resource_stats(&self, resource: &str) -> Result<ResourceStats, Error> {
        let e = self
            .shared
            .resources
            .get(resource)
            .map(|e| Arc::clone(e.value()))
            .ok_or_else(|| Error::UnknownResource(resource.to_owned()))?;
        Ok(stats_of(&e).await)
    }
}

async fn stats_of<B: Backend>(e: &Entry<B>) -> ResourceStats {
    let mut stats = local_stats_of(e);
    match e.backend.usage(&e.handle).await {
        Ok(u) => {
            for (d, v) in u.dimensions {
                stats.usage.insert(d.as_str().to_owned(), v);
            }
            if e.spec.concurrency.is_some() {
                stats.usage.insert("maxConcurrentRequests".to_owned(), u.leases);
            }
            for (d, at) in u.resets {
                stats.resets_at.insert(d.as_str().to_owned(), at);
            }
        }
        Err(_) => {
            stats.backend_errors = e.counters().backend_errors.fetch_add(1, Ordering::Relaxed) + 1;
        }
    }
    stats
}

/// The snapshot of this process's counters, without usage.
fn local_stats_of<B: Backend>(e: &Entry<B>) -> ResourceStats {
    let usage = std::collections::BTreeMap::new();
    let none = Counters::default();
    let c = e.counted().unwrap_or(&none);
    let counts = e.backend.counts(&e.handle);
    let (queued, wait_time_ms) = match e.queue.as_deref() {
        Some(q) => (
            Some(q.len() as u64),
            q.wait_percentiles()
                .map(|[p50, p90, p99, max]| WaitTimes { p50, p90, p99, max }),
        ),
        None => (None, None),
    };
    ResourceStats {
        resource: e.id.to_string(),
        kind: e.kind,
        limits: e.spec.limits.clone(),
        usage,
        resets_at: std::collections::BTreeMap::new(),
        active: e.spec.concurrency.map(|_| c.active.get()),
        allowed: counts.allowed,
        denied: counts.denied + c.rejected.load(Ordering::Relaxed),
        backend_errors: c.backend_errors.load(Ordering::Relaxed),
        shadow_denied: c.shadow_denied.load(Ordering::Relaxed),
        queued,
        wait_time_ms,
        lazy: e.lazy,
    }
}

fn compile(resource: &str, limits: &Limits) -> Result<Arc<LimitSpec>, Error> {
    limits
        .compile()
        .map(Arc::new)
        .map_err(|source| Error::InvalidLimits {
            resource: resource.to_owned(),
            source,
        })
}
