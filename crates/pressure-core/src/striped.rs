//! Exact grant/denial counters that cost no locked instruction on the hot
//! path of a busy resource: one stripe per thread, summed on read — and no
//! stripes at all for a resource that never gets busy.
//!
//! A shared `fetch_add` is a locked read-modify-write (~20 cycles even
//! uncontended, as much as the compare-and-swap that decides), and under two
//! threads it bounces its cache line. Instead each of the first
//! [`OWNED`] threads that count anything *owns* one stripe index, process
//! wide, for as long as it lives: only the owner ever writes that stripe (of
//! every [`Tally`]), so its increment is a plain load and store — no lock
//! prefix, no lost update. Threads beyond those (or a thread counting while
//! its thread-locals are torn down) add to one shared stripe with
//! `fetch_add`, as before. A thread that exits gives its index back; the
//! hand-over goes through a mutex, so the next owner continues from the
//! value the last one stored.
//!
//! # Stripes only for hot resources
//! The owned stripes cost 16 bytes per thread slot (144 bytes with the
//! shared one), which is most of what a lazily registered tenant that sends
//! one request would otherwise weigh. So a counter starts *cold*: the shared
//! stripe, inline, and a pointer-sized [`OnceLock`] for the owned ones,
//! which stays empty. Every update of a cold counter is a `fetch_add` on the
//! shared stripe (what any counter costs); once a [`Tally`] has counted
//! [`PROMOTE_AT`] grants (or as many denials) — or a [`Gauge`] has seen
//! about as many updates —
//! the owned stripes are allocated (once, zeroed) and published, and from
//! then on owners count on them with plain stores as above. The trade-off:
//! a resource's first [`PROMOTE_AT`] events pay one locked add each
//! (nanoseconds, once per resource), and a hot resource pays one extra load
//! (the `OnceLock`, beside the counts) and one pointer hop per event; a
//! resource that never gets there — most tenants of a gateway — saves 112
//! bytes per [`Tally`] and 56 per [`Gauge`].
//!
//! Reads sum the shared stripe and the owned ones, if any. The total is
//! exact for every increment that happened before the read (a joined
//! thread, a `Mutex`, a channel): nothing is batched or sampled, an
//! in-flight increment is simply not yet counted. An increment on an owned
//! stripe was made after its writer saw the stripes published, so a read
//! that happens after it sees them too. No `unsafe`: every stripe is an
//! atomic, only the access pattern differs.

use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Stripes owned by one thread each; a counter has one more, shared.
pub(crate) const OWNED: usize = 8;

/// Events a counter takes on its shared stripe before it gets owned ones
/// (see the module docs).
pub(crate) const PROMOTE_AT: u64 = 1_024;

/// The shared stripe's index.
const SHARED: u8 = OWNED as u8;

/// This thread has not asked for a stripe yet.
const UNCLAIMED: u8 = u8::MAX;

thread_local! {
    /// This thread's stripe: `< OWNED` owned, [`SHARED`], or [`UNCLAIMED`].
    /// A const `Cell` without a destructor: reading it is one load.
    static SLOT: Cell<u8> = const { Cell::new(UNCLAIMED) };
    /// Gives the owned stripe back when the thread exits.
    static OWNER: RefCell<Option<Owner>> = const { RefCell::new(None) };
}

/// Stripe indices not owned by a live thread.
struct Pool {
    /// Indices below this were handed out at least once.
    next: u8,
    /// Indices given back by exited threads.
    free: Vec<u8>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    next: 0,
    free: Vec::new(),
});

/// The owned stripe of a live thread.
struct Owner(u8);

impl Drop for Owner {
    fn drop(&mut self) {
        // Count on the shared stripe from now on (other thread-local
        // destructors may still count), then hand the index over.
        let _ = SLOT.try_with(|s| s.set(SHARED));
        POOL.lock().free.push(self.0);
    }
}

/// This thread's stripe index (`SHARED` when it owns none).
#[inline(always)]
fn slot() -> usize {
    let s = SLOT.try_with(Cell::get).unwrap_or(SHARED);
    if s < SHARED {
        s as usize
    } else {
        claim(s)
    }
}

#[cold]
#[inline(never)]
fn claim(s: u8) -> usize {
    if s != UNCLAIMED {
        return SHARED as usize;
    }
    let mine = {
        let mut pool = POOL.lock();
        match pool.free.pop() {
            Some(i) => Some(i),
            None if (pool.next as usize) < OWNED => {
                pool.next += 1;
                Some(pool.next - 1)
            }
            None => None,
        }
    };
    let got = match mine {
        // Own it only if the index is sure to come back when the thread exits.
        Some(i) => match OWNER.try_with(|o| *o.borrow_mut() = Some(Owner(i))) {
            Ok(()) => i,
            Err(_) => {
                POOL.lock().free.push(i);
                SHARED
            }
        },
        None => SHARED,
    };
    let _ = SLOT.try_with(|s| s.set(got));
    got as usize
}

/// One stripe: grants and denials of the thread that owns it.
#[derive(Debug, Default)]
struct Stripe {
    allowed: AtomicU64,
    denied: AtomicU64,
}

/// Exact allowed/denied counts of one resource (see the module docs): the
/// shared stripe inline, the owned ones once the resource is hot.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Every count while cold; afterwards those of threads without a stripe
    /// (and carried counts).
    shared: Stripe,
    owned: OnceLock<Box<[Stripe; OWNED]>>,
}

impl Tally {
    /// Adds the counts of `old` (a state the limits moved away from) to
    /// this one's, on the shared stripe.
    pub(crate) fn carry(&self, old: &Tally) {
        self.shared.allowed.fetch_add(old.allowed(), Ordering::Relaxed);
        self.shared.denied.fetch_add(old.denied(), Ordering::Relaxed);
    }

    #[inline(always)]
    fn bump(&self, counter: fn(&Stripe) -> &AtomicU64) {
        if let Some(owned) = self.owned.get() {
            let s = slot();
            if s < OWNED {
                // Only this thread writes this stripe (module docs): a plain
                // read and write cannot lose an update.
                let c = counter(&owned[s]);
                c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
                return;
            }
            counter(&self.shared).fetch_add(1, Ordering::Relaxed);
            return;
        }
        if counter(&self.shared).fetch_add(1, Ordering::Relaxed) >= PROMOTE_AT - 1 {
            self.promote();
        }
    }

    /// Gives the tally its owned stripes (it proved hot).
    #[cold]
    #[inline(never)]
    fn promote(&self) {
        self.owned.get_or_init(Box::default);
    }

    /// Whether the owned stripes exist.
    #[cfg(test)]
    pub(crate) fn is_hot(&self) -> bool {
        self.owned.get().is_some()
    }

    /// Counts one grant.
    #[inline(always)]
    pub(crate) fn allow(&self) {
        self.bump(|s| &s.allowed);
    }

    /// Counts one denial.
    #[inline(always)]
    pub(crate) fn deny(&self) {
        self.bump(|s| &s.denied);
    }

    fn sum(&self, counter: fn(&Stripe) -> &AtomicU64) -> u64 {
        let shared = counter(&self.shared).load(Ordering::Relaxed);
        self.owned.get().map_or(shared, |owned| {
            owned
                .iter()
                .fold(shared, |a, s| a.wrapping_add(counter(s).load(Ordering::Relaxed)))
        })
    }

    /// Grants counted so far.
    pub(crate) fn allowed(&self) -> u64 {
        self.sum(|s| &s.allowed)
    }

    /// Denials counted so far.
    pub(crate) fn denied(&self) -> u64 {
        self.sum(|s| &s.denied)
    }
}

/// A count that goes up and down (live permits), striped like [`Tally`]:
/// each thread adds its increments and decrements to its own stripe (a
/// permit may be released on another thread than it was taken on), and the
/// wrapping sum of the stripes is the exact count. Cold until about
/// [`PROMOTE_AT`] updates (counted without a locked instruction, so the
/// count may miss a few racing ones: it only decides when to promote).
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    shared: AtomicU64,
    /// Updates seen while cold, approximately.
    updates: AtomicU32,
    owned: OnceLock<Box<[AtomicU64; OWNED]>>,
}

impl Gauge {
    #[inline(always)]
    fn add(&self, delta: u64) {
        if let Some(owned) = self.owned.get() {
            let s = slot();
            if s < OWNED {
                // Only this thread writes this stripe (module docs).
                let c = &owned[s];
                c.store(c.load(Ordering::Relaxed).wrapping_add(delta), Ordering::Relaxed);
                return;
            }
        } else {
            let n = self.updates.load(Ordering::Relaxed).wrapping_add(1);
            self.updates.store(n, Ordering::Relaxed);
            if u64::from(n) >= PROMOTE_AT {
                self.owned.get_or_init(Box::default);
            }
        }
        self.shared.fetch_add(delta, Ordering::Relaxed);
    }

    /// One more.
    #[inline(always)]
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    /// One less.
    #[inline(always)]
    pub(crate) fn dec(&self) {
        self.add(u64::MAX);
    }

    /// The count now.
    pub(crate) fn get(&self) -> u64 {
        let shared = self.shared.load(Ordering::Relaxed);
        self.owned.get().map_or(shared, |owned| {
            owned
                .iter()
                .fold(shared, |a, c| a.wrapping_add(c.load(Ordering::Relaxed)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// More threads than stripes, several generations of them (indices are
    /// handed over), all counting on the same tallies at once: the sums are
    /// exact once they are joined.
    #[test]
    fn exact_under_many_threads_and_handovers() {
        const THREADS: usize = 3 * OWNED;
        const EACH: u64 = 20_000;
        let start = Tally::default();
        for _ in 0..7 {
            start.allow();
        }
        for _ in 0..3 {
            start.deny();
        }
        let tallies: Arc<Vec<Tally>> = Arc::new(
            (0..3)
                .map(|_| {
                    let t = Tally::default();
                    t.carry(&start);
                    t
                })
                .collect(),
        );
        for _generation in 0..3 {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let tallies = Arc::clone(&tallies);
                    std::thread::spawn(move || {
                        for i in 0..EACH {
                            let tally = &tallies[(i as usize + t) % tallies.len()];
                            if i % 4 == 0 {
                                tally.deny();
                            } else {
                                tally.allow();
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().expect("counting thread");
            }
        }
        let allowed: u64 = tallies.iter().map(Tally::allowed).sum();
        let denied: u64 = tallies.iter().map(Tally::denied).sum();
        let total = 3 * THREADS as u64 * EACH;
        assert_eq!(allowed + denied, total + 3 * 10);
        assert_eq!(denied, total / 4 + 3 * 3);
    }

    /// Increments on some threads, decrements of the same items on others
    /// (more threads than stripes): the gauge ends exactly where it should.
    #[test]
    fn gauge_is_exact_across_threads() {
        let g = Gauge::default();
        std::thread::scope(|s| {
            for t in 0..2 * OWNED {
                let g = &g;
                s.spawn(move || {
                    for _ in 0..10_000 {
                        if t % 2 == 0 {
                            g.inc();
                        } else {
                            g.dec();
                        }
                    }
                    g.inc();
                });
            }
        });
        assert_eq!(g.get(), 2 * OWNED as u64);
    }

    #[test]
    fn a_thread_keeps_its_stripe_and_gives_it_back() {
        let owned = std::thread::spawn(|| {
            let first = slot();
            (first, slot())
        })
        .join()
        .expect("thread");
        assert_eq!(owned.0, owned.1, "a thread keeps its stripe");
        // Whatever index it had is free again (or was never owned): a new
        // generation of OWNED threads all get owned stripes or share.
        let t = Tally::default();
        std::thread::scope(|s| {
            for _ in 0..OWNED {
                s.spawn(|| t.allow());
            }
        });
        assert_eq!(t.allowed(), OWNED as u64);
    }

    /// A cold tally counts on its shared stripe only; the grant that
    /// reaches [`PROMOTE_AT`] gives it owned stripes, and the counts carry
    /// on exactly across the promotion.
    #[test]
    fn a_tally_turns_hot_at_the_threshold_and_stays_exact() {
        let t = Tally::default();
        for _ in 0..PROMOTE_AT - 1 {
            t.allow();
        }
        t.deny();
        assert!(!t.is_hot(), "cold below the threshold");
        t.allow();
        assert!(t.is_hot(), "hot once {PROMOTE_AT} grants were counted");
        t.allow();
        t.deny();
        assert_eq!((t.allowed(), t.denied()), (PROMOTE_AT + 1, 2));
    }

    /// Many threads cross the threshold of the same fresh tallies at once
    /// (the promotion races with owned-stripe and shared-stripe counts):
    /// every tally is hot and exact once they are joined.
    #[test]
    fn racing_promotions_lose_no_count() {
        const THREADS: usize = OWNED + 2;
        const EACH: u64 = PROMOTE_AT / 2 + 7;
        for _round in 0..20 {
            let tallies: Vec<Tally> = (0..4).map(|_| Tally::default()).collect();
            let gauge = Gauge::default();
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (tallies, gauge) = (&tallies, &gauge);
                    s.spawn(move || {
                        for i in 0..EACH {
                            for tally in tallies {
                                if (i + t as u64).is_multiple_of(3) {
                                    tally.deny();
                                } else {
                                    tally.allow();
                                }
                            }
                            gauge.inc();
                            if i % 2 == 0 {
                                gauge.dec();
                            }
                        }
                    });
                }
            });
            let total = THREADS as u64 * EACH;
            for tally in &tallies {
                assert!(tally.is_hot());
                assert_eq!(tally.allowed() + tally.denied(), total);
            }
            assert_eq!(gauge.get(), THREADS as u64 * (EACH / 2));
        }
    }

    /// The cold layouts the module docs promise: two counts and a pointer's
    /// worth of `OnceLock`, not a stripe per thread.
    #[test]
    fn cold_counters_are_small() {
        println!(
            "size_of: Tally {} (hot +{}), Gauge {} (hot +{})",
            std::mem::size_of::<Tally>(),
            std::mem::size_of::<[Stripe; OWNED]>(),
            std::mem::size_of::<Gauge>(),
            std::mem::size_of::<[AtomicU64; OWNED]>(),
        );
        assert!(std::mem::size_of::<Tally>() <= 32);
        assert!(std::mem::size_of::<Gauge>() <= 32);
    }
}
