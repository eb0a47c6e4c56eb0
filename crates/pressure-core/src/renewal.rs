//! The lease renewer: one task per broker keeps every live concurrency lease
//! of this process alive, so `maxConcurrentRequests` holds for a permit of
//! any duration (a long upload, a slow LLM call), not only for the lease TTL.
//!
//! Each resource version ([`Leased`], the broker's entry) keeps a
//! [`LeaseBook`] of its live leases: a permit that takes a lease writes it
//! there (a slot in a vector under a short mutex, no allocation once warm,
//! no clock read) and its release or drop clears the slot. A resource with live leases is *enrolled* with the
//! broker's [`Renewer`] once, when its book stops being empty. The task wakes
//! when the earliest enrolled resource is due — a third of its lease TTL after
//! its last renewal — and renews every lease of each due resource (and of
//! those due within the next sixth of their TTL) in one backend call per
//! resource ([`Backend::renew_many`](crate::Backend::renew_many)): a few
//! wake-ups per TTL however many leases there are. A lease taken just after a renewal waits at most a
//! third of the TTL for its first one, well before it expires.
//!
//! What the TTL still protects against: a process that dies (or a broker
//! that is dropped, which stops the task) renews nothing, so its slots come
//! back one TTL later. A permit leaked inside a live process (`mem::forget`)
//! stays in its book and is renewed as long as the process lives, like any
//! other leaked resource; that is a bug of the holder, not a failure mode the
//! broker hides.
//!
//! The task needs a tokio runtime: it is spawned on the runtime of the first
//! enrollment. Without one (purely synchronous use), leases are not renewed
//! and holders longer than the TTL must call [`crate::Permit::renew`].

use crate::backend::{BackendError, Grant};
use crate::clock::Clock;
use futures::StreamExt;
use parking_lot::Mutex;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;

/// Wait before renewing again after the backend failed (capped by a tenth
/// of the lease TTL, so several retries fit in one TTL).
const RETRY_AFTER_ERROR_NS: u64 = 200_000_000;

/// Resources renewed at once.
const CONCURRENT_BATCHES: usize = 16;

/// The live leases of one resource version. The book is allocated by the
/// first lease: a resource without `maxConcurrentRequests` (most lazily
/// registered tenants) never takes one and carries only this pointer.
#[derive(Debug, Default)]
pub(crate) struct LeaseBook(OnceLock<Box<Mutex<Book>>>);

#[derive(Debug, Default)]
struct Book {
    slots: Vec<Option<Held>>,
    free: Vec<u32>,
    live: usize,
    /// Whether the resource is on the renewer's list.
    enrolled: bool,
    /// Broker-clock nanoseconds at which to renew this resource's leases.
    due: u64,
}

#[derive(Debug)]
struct Held {
    grant: Grant,
    /// False once the backend said the lease was lost (expired before it
    /// could be renewed): nothing left to renew.
    renew: bool,
}

impl LeaseBook {
    /// The book, allocated on first use.
    #[inline]
    fn book(&self) -> &Mutex<Book> {
        self.0.get_or_init(Box::default)
    }

    /// Records a lease; returns its ticket (never 0) and whether the
    /// resource must be enrolled with the renewer.
    #[inline]
    fn insert(&self, grant: Grant) -> (u64, bool) {
        let mut b = self.book().lock();
        let held = Some(Held { grant, renew: true });
        let idx = match b.free.pop() {
            Some(i) => {
                b.slots[i as usize] = held;
                i
            }
            None => {
                b.slots.push(held);
                (b.slots.len() - 1) as u32
            }
        };
        b.live += 1;
        let enroll = !std::mem::replace(&mut b.enrolled, true);
        (u64::from(idx) + 1, enroll)
    }

    /// Forgets the lease of `ticket` (its permit released it).
    #[inline]
    pub(crate) fn remove(&self, ticket: u64) {
        if ticket == 0 {
            return;
        }
        let idx = (ticket - 1) as usize;
        let Some(book) = self.0.get() else {
            return;
        };
        let mut b = book.lock();
        if let Some(slot) = b.slots.get_mut(idx) {
            if slot.take().is_some() {
                b.live -= 1;
                b.free.push(idx as u32);
            }
        }
    }

    /// Live leases.
    fn len(&self) -> usize {
        self.0.get().map_or(0, |b| b.lock().live)
    }
}

/// What the renewer needs of one resource version (the broker's entry):
/// its book of live leases, its TTL, and the backend call that renews a
/// batch of them.
pub(crate) trait Leased: Send + Sync + 'static {
    /// The resource id, for the log.
    fn id(&self) -> &str;

    /// The live leases granted by this version.
    fn leases(&self) -> &LeaseBook;

    /// The lease TTL of this version, in nanoseconds.
    fn lease_ttl_ns(&self) -> u64;

    /// Renews `grants` in one backend call on the newest version of the
    /// resource: that version's lease TTL (nanoseconds) and, per grant in
    /// order, whether its lease was still held.
    fn renew(
        self: &Arc<Self>,
        grants: &[Grant],
    ) -> impl Future<Output = (u64, Result<Vec<bool>, BackendError>)> + Send;
}

/// A resource due for renewal and its leases (book slot, grant).
type Due<E> = (Arc<E>, Vec<(u32, Grant)>);

/// The broker's renewal task and the resources it looks after.
pub(crate) struct Renewer<E: Leased> {
    enrolled: Mutex<Vec<Arc<E>>>,
    clock: Arc<dyn Clock>,
    wake: Notify,
    /// Broker-clock nanoseconds the task sleeps until; `u64::MAX` while it
    /// works (so an enrollment then wakes it once more).
    wake_at: AtomicU64,
    running: AtomicBool,
    stopped: AtomicBool,
}

impl<E: Leased> Renewer<E> {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            enrolled: Mutex::new(Vec::new()),
            clock,
            wake: Notify::new(),
            wake_at: AtomicU64::new(u64::MAX),
            running: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        }
    }

    /// Records the lease of `grant` in `entry`'s book; the returned ticket
    /// (never 0) forgets it again ([`LeaseBook::remove`]).
    #[inline]
    pub(crate) fn register(self: &Arc<Self>, entry: &Arc<E>, grant: Grant) -> u64 {
        let (ticket, enroll) = entry.leases().insert(grant);
        if enroll {
            self.enroll(entry);
        }
        ticket
    }

    /// Puts `entry` on the list, due a third of its TTL from now.
    #[cold]
    fn enroll(self: &Arc<Self>, entry: &Arc<E>) {
        if self.stopped.load(Ordering::Relaxed) {
            return;
        }
        let due = self.clock.now_nanos().saturating_add(entry.lease_ttl_ns() / 3);
        entry.leases().book().lock().due = due;
        self.enrolled.lock().push(Arc::clone(entry));
        if due < self.wake_at.load(Ordering::Acquire) {
            self.wake.notify_one();
        }
        if !self.running.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(run(Arc::clone(self)));
                }
                Err(_) => self.running.store(false, Ordering::Release),
            }
        }
    }

    /// Leases of live permits of this broker.
    pub(crate) fn len(&self) -> usize {
        self.enrolled.lock().iter().map(|e| e.leases().len()).sum()
    }

    /// Stops renewing (the broker was dropped: this process no longer vouches
    /// for its leases) and lets go of the resources on the list.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.enrolled.lock().clear();
        self.wake.notify_one();
    }

    /// One pass: renews the resources that are due (or nearly), drops those
    /// without leases from the list, returns the next due time.
    async fn renew_due(&self) -> u64 {
        self.wake_at.store(u64::MAX, Ordering::Release);
        let now = self.clock.now_nanos();
        let mut next = u64::MAX;
        let mut work: Vec<Due<E>> = Vec::new();
        self.enrolled.lock().retain(|entry| {
            let mut b = entry.leases().book().lock();
            if b.live == 0 {
                b.enrolled = false;
                return false;
            }
            if b.due > now.saturating_add(entry.lease_ttl_ns() / 6) {
                next = next.min(b.due);
                return true;
            }
            let grants = b
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| match s {
                    Some(h) if h.renew => Some((i as u32, h.grant)),
                    _ => None,
                })
                .collect();
            work.push((Arc::clone(entry), grants));
            true
        });
        // Resources renew concurrently (a few at a time), so one slow
        // resource does not hold back the others.
        let mut rounds = futures::stream::iter(work)
            .map(|(entry, items)| async move {
                let grants: Vec<Grant> = items.iter().map(|(_, g)| *g).collect();
                let (ttl, result) = entry.renew(&grants).await;
                (entry, ttl, items, result)
            })
            .buffer_unordered(CONCURRENT_BATCHES);
        while let Some((entry, ttl, items, result)) = rounds.next().await {
            next = next.min(self.settle(&*entry, ttl, &items, result));
        }
        self.wake_at.store(next, Ordering::Release);
        next
    }

    /// Records one resource's renewal (`ttl`: the lease TTL it renewed
    /// under); returns its next due time.
    fn settle(
        &self,
        entry: &E,
        ttl: u64,
        items: &[(u32, Grant)],
        result: Result<Vec<bool>, BackendError>,
    ) -> u64 {
        let now = self.clock.now_nanos();
        let mut b = entry.leases().book().lock();
        match result {
            Ok(kept) => {
                let mut lost = 0usize;
                for ((idx, grant), ok) in items.iter().zip(kept) {
                    if ok {
                        continue;
                    }
                    // Same slot and same lease: not a later permit's.
                    if let Some(Some(h)) = b.slots.get_mut(*idx as usize) {
                        if h.grant.lease == grant.lease && h.renew {
                            h.renew = false;
                            lost += 1;
                        }
                    }
                }
                if lost > 0 {
                    // Expired before they could be renewed (the store was out
                    // longer than the TTL): the slots are gone, the holders
                    // run on without them.
                    tracing::warn!(resource = %entry.id(), leases = lost, "leases lost before renewal; their permits no longer hold a slot");
                }
                b.due = now.saturating_add(ttl / 3);
            }
            Err(e) => {
                tracing::debug!(resource = %entry.id(), error = %e, "lease renewal failed; retrying");
                b.due = now.saturating_add(RETRY_AFTER_ERROR_NS.min(ttl / 10).max(1));
            }
        }
        b.due
    }
}

/// Resets the running flag when the task ends, also when its runtime shuts
/// down, so the next enrollment starts a new one.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

async fn run<E: Leased>(r: Arc<Renewer<E>>) {
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
