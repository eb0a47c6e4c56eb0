//! Exact grant/denial counters that cost no locked instruction on the hot
//! path: one stripe per thread, summed on read.
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
//! Reads sum the stripes. The total is exact for every increment that
//! happened before the read (a joined thread, a `Mutex`, a channel): nothing
//! is batched or sampled, an in-flight increment is simply not yet counted.
//! No `unsafe`: every stripe is an atomic, only the access pattern differs.

use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

/// Stripes owned by one thread each; a [`Tally`] has one more, shared.
pub(crate) const OWNED: usize = 8;

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

/// Exact allowed/denied counts of one resource (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    stripes: [Stripe; OWNED + 1],
}

impl Tally {
    /// Adds the counts of `old` (a state the limits moved away from) to
    /// this one's, on the shared stripe.
    pub(crate) fn carry(&self, old: &Tally) {
        let shared = &self.stripes[SHARED as usize];
        shared.allowed.fetch_add(old.allowed(), Ordering::Relaxed);
        shared.denied.fetch_add(old.denied(), Ordering::Relaxed);
    }

    #[inline(always)]
    fn bump(counter: fn(&Stripe) -> &AtomicU64, stripes: &[Stripe; OWNED + 1]) {
        let s = slot();
        let c = counter(&stripes[s]);
        if s < OWNED {
            // Only this thread writes this stripe (module docs): a plain
            // read and write cannot lose an update.
            c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        } else {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one grant.
    #[inline(always)]
    pub(crate) fn allow(&self) {
        Self::bump(|s| &s.allowed, &self.stripes);
    }

    /// Counts one denial.
    #[inline(always)]
    pub(crate) fn deny(&self) {
        Self::bump(|s| &s.denied, &self.stripes);
    }

    /// Grants counted so far.
    pub(crate) fn allowed(&self) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |a, s| a.wrapping_add(s.allowed.load(Ordering::Relaxed)))
    }

    /// Denials counted so far.
    pub(crate) fn denied(&self) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |a, s| a.wrapping_add(s.denied.load(Ordering::Relaxed)))
    }
}

/// A count that goes up and down (live permits), striped like [`Tally`]:
/// each thread adds its increments and decrements to its own stripe (a
/// permit may be released on another thread than it was taken on), and the
/// wrapping sum of the stripes is the exact count.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    stripes: [AtomicU64; OWNED + 1],
}

impl Gauge {
    #[inline(always)]
    fn add(&self, delta: u64) {
        let s = slot();
        let c = &self.stripes[s];
        if s < OWNED {
            // Only this thread writes this stripe (module docs).
            c.store(c.load(Ordering::Relaxed).wrapping_add(delta), Ordering::Relaxed);
        } else {
            c.fetch_add(delta, Ordering::Relaxed);
        }
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
        self.stripes
            .iter()
            .fold(0u64, |a, c| a.wrapping_add(c.load(Ordering::Relaxed)))
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
}
