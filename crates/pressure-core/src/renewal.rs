//! The lease renewer: one task per broker keeps every live concurrency lease
//! of this process alive, so `maxConcurrentRequests` holds for a permit of
//! any duration (a long upload, a slow LLM call), not only for the lease TTL.
//!
//! A permit that takes a lease registers it here (one map insert) and its
//! release or drop removes it (one map remove); nothing else touches the hot
//! path. The task wakes when the earliest lease is due — a third of its TTL
//! after the last renewal — and renews, in one backend call per resource
//! ([`Backend::renew_many`]), every lease due within the next sixth of its
//! TTL, so a steady stream of grants costs a few wake-ups per TTL, not one
//! per lease.
//!
//! What the TTL still protects against: a process that dies (or a broker
//! that is dropped, which stops the task) renews nothing, so its slots come
//! back one TTL later. A permit leaked inside a live process (`mem::forget`)
//! stays registered and is renewed as long as the process lives, like any
//! other leaked resource; that is a bug of the holder, not a failure mode
//! the broker hides.
//!
//! The task needs a tokio runtime: it is spawned on the runtime of the first
//! lease grant. Without one (purely synchronous use), leases are not renewed
//! and holders longer than the TTL must call [`crate::Permit::renew`].

use crate::backend::{Backend, Grant};
use crate::clock::Clock;
use crate::entry::Entry;
use dashmap::DashMap;
use futures::StreamExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Wait before renewing again after the backend failed (capped by a tenth
/// of the lease TTL, so several retries fit in one TTL).
const RETRY_AFTER_ERROR_NS: u64 = 200_000_000;

/// Resources renewed at once.
const CONCURRENT_BATCHES: usize = 16;

/// The live leases of one broker and the task that renews them.
pub(crate) struct Renewer<B: Backend> {
    live: DashMap<u64, Live<B>, ahash::RandomState>,
    next_ticket: AtomicU64,
    clock: Arc<dyn Clock>,
    wake: Notify,
    /// Broker-clock nanoseconds the task sleeps until; `u64::MAX` while it
    /// scans (so every registration then wakes it once more).
    wake_at: AtomicU64,
    running: AtomicBool,
    stopped: AtomicBool,
}

/// The due leases of one resource: its newest version and (ticket, grant)s.
type Batch<B> = (Arc<Entry<B>>, Vec<(u64, Grant)>);

struct Live<B: Backend> {
    /// The version of the resource that granted the lease.
    entry: Arc<Entry<B>>,
    grant: Grant,
    /// Broker-clock nanoseconds at which to renew.
    due: u64,
}

impl<B: Backend> Renewer<B> {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            live: DashMap::with_hasher(ahash::RandomState::new()),
            next_ticket: AtomicU64::new(0),
            clock,
            wake: Notify::new(),
            wake_at: AtomicU64::new(u64::MAX),
            running: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        }
    }

    /// Registers the lease of `grant`; the returned ticket (never 0) removes
    /// it again. 0 when the broker is gone (nothing will renew it).
    pub(crate) fn register(self: &Arc<Self>, entry: &Arc<Entry<B>>, grant: Grant) -> u64 {
        if self.stopped.load(Ordering::Relaxed) {
            return 0;
        }
        let due = self.clock.now_nanos().saturating_add(entry.spec.lease_ttl_ns / 3);
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed) + 1;
        self.live.insert(
            ticket,
            Live {
                entry: Arc::clone(entry),
                grant,
                due,
            },
        );
        if due < self.wake_at.load(Ordering::Acquire) {
            self.wake.notify_one();
        }
        if !self.running.load(Ordering::Relaxed) {
            self.start();
        }
        ticket
    }

    /// Forgets a lease (its permit released it).
    #[inline]
    pub(crate) fn remove(&self, ticket: u64) {
        if ticket != 0 {
            self.live.remove(&ticket);
        }
    }

    /// Leases registered now.
    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }

    /// Stops renewing (the broker was dropped: this process no longer vouches
    /// for its leases) and lets go of the resources the leases held.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.live.clear();
        self.wake.notify_one();
    }

    #[cold]
    fn start(self: &Arc<Self>) {
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(run(Arc::clone(self)));
            }
            Err(_) => self.running.store(false, Ordering::Release),
        }
    }

    /// Records one resource's renewal; returns its leases' next due time.
    fn settle(
        &self,
        entry: &Entry<B>,
        items: &[(u64, Grant)],
        result: Result<Vec<bool>, crate::BackendError>,
    ) -> u64 {
        let now = self.clock.now_nanos();
        let ttl = entry.spec.lease_ttl_ns;
        let mut next = u64::MAX;
        match result {
            Ok(kept) => {
                let mut lost = 0usize;
                for ((ticket, _), ok) in items.iter().zip(kept) {
                    if ok {
                        if let Some(mut l) = self.live.get_mut(ticket) {
                            l.due = now.saturating_add(ttl / 3);
                            next = next.min(l.due);
                        }
                    } else if self.live.remove(ticket).is_some() {
                        lost += 1;
                    }
                }
                if lost > 0 {
                    // Expired before they could be renewed (the store was out
                    // longer than the TTL): the slots are gone, the holders
                    // run on without them.
                    tracing::warn!(resource = %entry.id, leases = lost, "leases lost before renewal; their permits no longer hold a slot");
                }
            }
            Err(e) => {
                tracing::debug!(resource = %entry.id, error = %e, "lease renewal failed; retrying");
                let retry = now.saturating_add(RETRY_AFTER_ERROR_NS.min(ttl / 10).max(1));
                for (ticket, _) in items {
                    if let Some(mut l) = self.live.get_mut(ticket) {
                        l.due = retry;
                        next = next.min(retry);
                    }
                }
            }
        }
        next
    }

    /// One pass: renews what is due (or nearly), returns the next due time.
    async fn renew_due(&self) -> u64 {
        self.wake_at.store(u64::MAX, Ordering::Release);
        let now = self.clock.now_nanos();
        // Group by the newest version of each resource, so a change of limits
        // renews with the new lease TTL.
        let mut batches: Vec<Batch<B>> = Vec::new();
        let mut next = u64::MAX;
        for item in self.live.iter() {
            let early = item.entry.spec.lease_ttl_ns / 6;
            if item.due > now.saturating_add(early) {
                next = next.min(item.due);
                continue;
            }
            let current = item.entry.current();
            match batches.iter_mut().find(|(e, _)| Arc::ptr_eq(e, current)) {
                Some((_, v)) => v.push((*item.key(), item.grant)),
                None => batches.push((Arc::clone(current), vec![(*item.key(), item.grant)])),
            }
        }
        // Resources renew concurrently (a few at a time), so one slow
        // resource does not hold back the others.
        let mut rounds = futures::stream::iter(batches)
            .map(|(entry, items)| async move {
                let grants: Vec<Grant> = items.iter().map(|(_, g)| *g).collect();
                let result = entry.backend.renew_many(&entry.handle, &grants).await;
                (entry, items, result)
            })
            .buffer_unordered(CONCURRENT_BATCHES);
        while let Some((entry, items, result)) = rounds.next().await {
            next = next.min(self.settle(&entry, &items, result));
        }
        self.wake_at.store(next, Ordering::Release);
        next
    }
}

/// Resets the running flag when the task ends, also when its runtime shuts
/// down, so the next grant starts a new one.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

async fn run<B: Backend>(r: Arc<Renewer<B>>) {
    let _running = Running(&r.running);
    while !r.stopped.load(Ordering::Relaxed) {
        let next = r.renew_due().await;
        let notified = r.wake.notified();
        if next == u64::MAX {
            notified.await;
        } else {
            let wait = Duration::from_nanos(next.saturating_sub(r.clock.now_nanos()));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = notified => {}
            }
        }
    }
}
