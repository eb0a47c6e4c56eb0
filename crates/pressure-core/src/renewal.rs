//! The lease renewer: one task per broker keeps every live concurrency lease
//! of this process alive, so `maxConcurrentRequests` holds for a permit of
//! any duration (a long upload, a slow LLM call), not only for the lease TTL.
//!
//! Each resource version ([`Leased`], the broker's entry) has a
//! [`LeaseBook`] of its live leases. For a backend whose state is elsewhere
//! (Redis) the broker keeps it: a permit that takes a lease writes it there
//! (a slot in a vector under a short mutex, no allocation once warm, no
//! clock read) and its release or drop clears the slot. The in-process
//! backend keeps its leases as slots under the resource's own lock, which
//! the acquisition and the release take anyway; those slots are the book,
//! and the broker records nothing per lease. A resource with live leases is
//! *enrolled* with the broker's [`Renewer`] once, when it takes its first
//! lease. The task wakes when the earliest enrolled resource is due — a
//! third of its lease TTL after its last renewal — and renews every lease of
//! each due resource (and of those due within the next sixth of their TTL)
//! at once: one backend call per resource
//! ([`Backend::renew_many`](crate::Backend::renew_many)), or one pass over
//! the in-process slots. A few wake-ups per TTL however many leases there
//! are. A lease taken just after a renewal waits at most a third of the TTL
//! for its first one, well before it expires. A resource without leases
//! leaves the list at its next due time.
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

/// The live leases of one resource version. Allocated by the first lease:
/// a resource without `maxConcurrentRequests` (most lazily registered
/// tenants) never takes one and carries only this pointer.
///
/// Two ways to keep it. A backend whose state is elsewhere (Redis) grants
/// leases the broker must remember to renew them: the broker writes each
/// in its [`Book`] (a slot under a short mutex) and renews them in batches
/// ([`Leased::renew`]). The in-process backend's own lease records are the
/// book ([`Leased::renew_held`]): one slot per lease under the resource's
/// one lock, which the acquisition and the release take anyway, so the
/// broker records nothing per lease and only keeps the resource on the
/// renewer's list.
#[derive(Debug, Default)]
pub(crate) struct LeaseBook(OnceLock<Box<Cell>>);

#[derive(Debug, Default)]
struct Cell {
    /// Whether the resource is on the renewer's list. Changed under the
    /// book's lock when the broker keeps the book; otherwise see
    /// [`Renewer::hold`].
    enrolled: AtomicBool,
    /// Broker-clock nanoseconds at which to renew this resource's leases.
    due: AtomicU64,
    /// The leases, when the broker keeps them.
    book: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    slots: Vec<Option<Held>>,
    free: Vec<u32>,
    live: usize,
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
    fn cell(&self) -> &Cell {
        self.0.get_or_init(Box::default)
    }

    /// Records a lease; returns its ticket (never 0) and whether the
    /// resource must be enrolled with the renewer.
    #[inline]
    fn insert(&self, grant: Grant) -> (u64, bool) {
        let cell = self.cell();
        let mut b = cell.book.lock();
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
        // Under the book's lock, like every change of the flag for a book
        // the broker keeps.
        let enroll = !cell.enrolled.load(Ordering::Relaxed);
        if enroll {
            cell.enrolled.store(true, Ordering::Relaxed);
        }
        (u64::from(idx) + 1, enroll)
    }

    /// Forgets the lease of `ticket` (its permit released it); 0 (a lease
    /// the backend keeps, or none) is a no-op.
    #[inline]
    pub(crate) fn remove(&self, ticket: u64) {
        if ticket == 0 {
            return;
        }
        let idx = (ticket - 1) as usize;
        let Some(cell) = self.0.get() else {
            return;
        };
        let mut b = cell.book.lock();
        if let Some(slot) = b.slots.get_mut(idx) {
            if slot.take().is_some() {
                b.live -= 1;
                b.free.push(idx as u32);
            }
        }
    }

    /// Live leases in the broker's book.
    fn len(&self) -> usize {
        self.0.get().map_or(0, |c| c.book.lock().live)
    }
}

/// What [`Leased::renew_held`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Renewed {
    /// Leases renewed (live now).
    pub(crate) live: usize,
    /// Leases that had expired before this renewal (and are gone).
    pub(crate) lost: usize,
    /// The lease TTL they were renewed with, nanoseconds.
    pub(crate) ttl_ns: u64,
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

    /// Whether the backend keeps the resource's leases in this process, as
    /// the book the renewer reads ([`Leased::renew_held`],
    /// [`Leased::held_leases`]); `false`: the broker keeps a [`Book`].
    fn backend_keeps_leases(&self) -> bool;

    /// Renews at once every live lease the backend holds for the resource
    /// (on its newest version), when it keeps them
    /// ([`Leased::backend_keeps_leases`]); `None` otherwise.
    fn renew_held(&self) -> Option<Renewed>;

    /// The live leases the backend holds for the resource and the identity
    /// of the state holding them (shared by the versions of a resource),
    /// when it keeps them; `None` otherwise.
    fn held_leases(&self) -> Option<(usize, usize)>;
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

    /// Keeps `entry` on the list after its backend, which keeps the
    /// resource's leases itself ([`Leased::backend_keeps_leases`]), granted
    /// one: nothing is recorded per lease, and once the resource is
    /// enrolled this is one load (no lock, no locked instruction).
    ///
    /// Why a relaxed load is enough: the backend recorded the lease under
    /// the resource's lock before this call. The renewal task takes a
    /// resource off the list only after clearing the flag *and then*
    /// finding no lease under that same lock ([`Renewer::renew_due`]). If
    /// its look came after our lease was recorded, it sees the lease and
    /// keeps the resource; if it came before, its clearing happened before
    /// our load (through the lock), so we see the flag cleared and enroll.
    #[inline]
    pub(crate) fn hold(self: &Arc<Self>, entry: &Arc<E>) {
        if !entry.leases().cell().enrolled.load(Ordering::Relaxed) {
            self.hold_cold(entry);
        }
    }

    #[cold]
    #[inline(never)]
    fn hold_cold(self: &Arc<Self>, entry: &Arc<E>) {
        if !entry.leases().cell().enrolled.swap(true, Ordering::Relaxed) {
            self.enroll(entry);
        }
    }

    /// Puts `entry` on the list, due a third of its TTL from now.
    #[cold]
    fn enroll(self: &Arc<Self>, entry: &Arc<E>) {
        if self.stopped.load(Ordering::Relaxed) {
            return;
        }
        let due = self.clock.now_nanos().saturating_add(entry.lease_ttl_ns() / 3);
        entry.leases().cell().due.store(due, Ordering::Relaxed);
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
        let list = self.enrolled.lock();
        // Versions of one resource share the backend's state: counted once.
        let mut held: Vec<(usize, usize)> = list.iter().filter_map(|e| e.held_leases()).collect();
        held.sort_unstable();
        held.dedup_by_key(|(state, _)| *state);
        let in_books: usize = list.iter().map(|e| e.leases().len()).sum();
        in_books + held.iter().map(|(_, n)| n).sum::<usize>()
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
            let cell = entry.leases().cell();
            if entry.backend_keeps_leases() {
                return Self::renew_held(entry, cell, now, &mut next);
            }
            let b = cell.book.lock();
            if b.live == 0 {
                cell.enrolled.store(false, Ordering::Relaxed);
                return false;
            }
            let due = cell.due.load(Ordering::Relaxed);
            if due > now.saturating_add(entry.lease_ttl_ns() / 6) {
                next = next.min(due);
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

    /// [`Renewer::renew_due`] for a resource whose backend keeps its leases:
    /// renews them in place when due (or nearly); whether the resource
    /// stays on the list. It leaves when it has no lease left — after the
    /// flag is cleared and a second look still finds none, which is what
    /// makes [`Renewer::hold`] race-free.
    fn renew_held(entry: &E, cell: &Cell, now: u64, next: &mut u64) -> bool {
        let due = cell.due.load(Ordering::Relaxed);
        if due > now.saturating_add(entry.lease_ttl_ns() / 6) {
            *next = (*next).min(due);
            return true;
        }
        let Some(r) = entry.renew_held() else {
            return false;
        };
        if r.lost > 0 {
            tracing::warn!(resource = %entry.id(), leases = r.lost, "leases lost before renewal; their permits no longer hold a slot");
        }
        if r.live == 0 {
            cell.enrolled.store(false, Ordering::Relaxed);
            if entry.held_leases().is_none_or(|(_, n)| n == 0) {
                return false;
            }
            // A lease came in between. If its holder saw the flag cleared,
            // it enrolled the resource again (its copy joins the list after
            // this pass): this one leaves.
            if cell.enrolled.swap(true, Ordering::Relaxed) {
                return false;
            }
        }
        let due = now.saturating_add(r.ttl_ns / 3);
        cell.due.store(due, Ordering::Relaxed);
        *next = (*next).min(due);
        true
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
        let cell = entry.leases().cell();
        let mut b = cell.book.lock();
        let due = match result {
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
                now.saturating_add(ttl / 3)
            }
            Err(e) => {
                tracing::debug!(resource = %entry.id(), error = %e, "lease renewal failed; retrying");
                now.saturating_add(RETRY_AFTER_ERROR_NS.min(ttl / 10).max(1))
            }
        };
        cell.due.store(due, Ordering::Relaxed);
        due
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

#[cfg(test)]
mod tests {
    //! The enrollment protocol of a book the backend keeps
    //! ([`Renewer::hold`] against [`Renewer::renew_held`]), with the two
    //! interleavings of a first lease and the renewal task's look forced
    //! step by step.

    use super::*;
    use crate::clock::ManualClock;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Weak;

    const TTL: u64 = 300_000_000;

    /// Where the fake "acquirer" steps in during the renewal task's pass.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Inject {
        Nowhere,
        /// Between the task's first look (no lease) and its clearing of
        /// the flag.
        BeforeClear,
        /// After the task cleared the flag, before its second look.
        AfterClear,
    }

    /// A resource whose "backend" keeps its lease count in `live`.
    struct Fake {
        leases: LeaseBook,
        live: AtomicUsize,
        inject: Mutex<Inject>,
        me: OnceLock<Weak<Fake>>,
        renewer: OnceLock<Weak<Renewer<Fake>>>,
        acquirer: Mutex<Option<std::thread::JoinHandle<()>>>,
    }

    impl Fake {
        /// The acquirer's side: a lease recorded, then [`Renewer::hold`].
        fn take_lease(&self) {
            self.live.fetch_add(1, Ordering::SeqCst);
            let me = self.me.get().and_then(Weak::upgrade).expect("alive");
            let r = self.renewer.get().and_then(Weak::upgrade).expect("alive");
            r.hold(&me);
        }
    }

    impl Leased for Fake {
        fn id(&self) -> &str {
            "fake"
        }
        fn leases(&self) -> &LeaseBook {
            &self.leases
        }
        fn lease_ttl_ns(&self) -> u64 {
            TTL
        }
        async fn renew(self: &Arc<Self>, _: &[Grant]) -> (u64, Result<Vec<bool>, BackendError>) {
            unreachable!("the backend keeps the book")
        }
        fn backend_keeps_leases(&self) -> bool {
            true
        }
        fn renew_held(&self) -> Option<Renewed> {
            let live = self.live.load(Ordering::SeqCst);
            if *self.inject.lock() == Inject::BeforeClear {
                // The flag is still set: the acquirer does not enroll.
                self.take_lease();
            }
            Some(Renewed {
                live,
                lost: 0,
                ttl_ns: TTL,
            })
        }
        fn held_leases(&self) -> Option<(usize, usize)> {
            if *self.inject.lock() == Inject::AfterClear && self.acquirer.lock().is_none() {
                // The lease is recorded before this look; the acquirer's
                // flag check races with the task's (it enrolls on a
                // thread of its own: the task holds the list).
                let me = self.me.get().and_then(Weak::upgrade).expect("alive");
                *self.acquirer.lock() = Some(std::thread::spawn(move || me.take_lease()));
                // Wait until the lease is recorded (the thread's first step).
                while self.live.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
            }
            Some((self as *const Self as usize, self.live.load(Ordering::SeqCst)))
        }
    }

    /// A renewer with one enrolled resource whose lease just went.
    fn setup(inject: Inject) -> (Arc<Renewer<Fake>>, Arc<Fake>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_000));
        let r = Arc::new(Renewer::new(clock.clone()));
        let f = Arc::new(Fake {
            leases: LeaseBook::default(),
            live: AtomicUsize::new(0),
            inject: Mutex::new(Inject::Nowhere),
            me: OnceLock::new(),
            renewer: OnceLock::new(),
            acquirer: Mutex::new(None),
        });
        let _ = f.me.set(Arc::downgrade(&f));
        let _ = f.renewer.set(Arc::downgrade(&r));
        f.take_lease();
        assert_eq!(r.enrolled.lock().len(), 1, "enrolled by its first lease");
        f.take_lease();
        assert_eq!(r.enrolled.lock().len(), 1, "once");
        f.live.store(0, Ordering::SeqCst);
        *f.inject.lock() = inject;
        clock.advance(Duration::from_nanos(TTL));
        (r, f, clock)
    }

    fn pass(r: &Renewer<Fake>) {
        futures::executor::block_on(r.renew_due());
    }

    #[test]
    fn a_resource_without_leases_leaves_the_list_and_comes_back() {
        let (r, f, _) = setup(Inject::Nowhere);
        pass(&r);
        assert_eq!(r.enrolled.lock().len(), 0);
        f.take_lease();
        assert_eq!(r.enrolled.lock().len(), 1, "its next first lease enrolls it");
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_lease_taken_before_the_flag_is_cleared_keeps_the_resource_listed() {
        let (r, f, _) = setup(Inject::BeforeClear);
        pass(&r);
        assert_eq!(f.live.load(Ordering::SeqCst), 1);
        assert_eq!(
            r.enrolled.lock().len(),
            1,
            "the task saw the lease on its second look"
        );
        assert!(f.leases.cell().enrolled.load(Ordering::SeqCst));
    }

    #[test]
    fn a_lease_taken_after_the_flag_is_cleared_enrolls_once() {
        for _ in 0..50 {
            let (r, f, _) = setup(Inject::AfterClear);
            pass(&r);
            let acquirer = f.acquirer.lock().take().expect("stepped in");
            acquirer.join().expect("acquirer");
            assert_eq!(r.enrolled.lock().len(), 1, "listed exactly once");
            assert!(f.leases.cell().enrolled.load(Ordering::SeqCst));
        }
    }
}
