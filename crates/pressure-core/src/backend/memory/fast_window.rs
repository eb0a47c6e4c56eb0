//! The lock-free common case of a `window` resource: one `window` rate
//! dimension, no concurrency limit.
//!
//! The sub-windows that are *closed* live in a [`WindowState`] under a mutex;
//! the *open* sub-window `k` (the newest one) is one atomic word holding
//! its **budget**: the units it may still admit at the full limit,
//! `N − (units of sub-windows k−S ..= k counted so far)`. A demand of `n`
//! units in sub-window `k` fits iff that sum plus `n` stays within `N` (the
//! window's rule, see [`crate::algo::window`]), i.e. iff `n` fits the
//! budget, so the common check is the same as `gcra`'s: one clock read, two
//! loads and one compare-and-swap that takes `n` off the budget. For a
//! caller limited to a share of `N` (batch headroom), the budget must keep
//! the difference as well.
//!
//! Everything else happens under the mutex with the word *closed* (a
//! sentinel no compare-and-swap matches, so no grant slips past): the units
//! the open sub-window admitted (`opened_with − budget`) are folded into its
//! bucket, the operation runs on the exact [`WindowState`] (a denial and its
//! exact wait, a new sub-window, reconcile, usage), and the word is reopened
//! for the sub-window of the time counted with the budget that state leaves.
//! That is once per sub-window (`W/30`) for a resource that is not denied.
//!
//! A lock-free grant records no time: the fold learns only that the open
//! sub-window's units were admitted before it (each grant read its clock
//! before its compare-and-swap, so before the fold's swap, which reads the
//! clock again after it) and inside the sub-window, and counts them as
//! admitted by the earlier of that reading and the sub-window's end (the
//! window's `last`, see [`crate::algo::window`]). A wait decided by such a
//! fold counts from the caller's reading, so it may end up to the few
//! nanoseconds between the two readings early (capped at `W`): never an
//! undercounted grant, which would let the window admit more than `N`.
//! So a denial is answered lock-free only when the word was opened with
//! no budget — nothing was granted lock-free since, and the exact wait of
//! one unit was computed at the reopen from a state that knows every
//! admission's bound; it is still good while `now` is before it. The first
//! denial after lock-free grants takes the lock, which folds them (and
//! reopens with no budget): once per sub-window under saturation, then
//! every denial of the sub-window is lock-free.
//!
//! The word is `tag << 40 | budget`, the tag being the low 24 bits of `k`,
//! so a compare-and-swap prepared in one sub-window cannot land in another
//! (a budget may repeat, a tag only after 2²⁴ sub-windows — for a 1 s window
//! 6.5 days — which a thread would have to spend between one load and its
//! compare-and-swap). Budgets fit 40 bits: limits are at most
//! [`crate::MAX_LIMIT`] = 10¹² < 2⁴⁰.

use super::{State, RETIRED};
use crate::algo::window::WindowState;
use crate::backend::Denial;
use crate::clock::Clock;
use crate::limits::{Demand, RateSpec};
use crate::striped::Tally;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const BUDGET_BITS: u32 = 40;
const BUDGET_MASK: u64 = (1 << BUDGET_BITS) - 1;
const TAG_MASK: u64 = (1 << (64 - BUDGET_BITS)) - 1;

/// The word while the lock holder folds the open sub-window: its budget bits
/// exceed any real budget, and it is not [`RETIRED`].
const CLOSED: u64 = RETIRED - 1;

/// The word before the first acquisition: no sub-window is open yet.
const UNOPENED: u64 = RETIRED - 2;

/// A word: budgets never exceed a limit, so never a sentinel's bits.
#[inline(always)]
fn pack(k: u64, budget: u64) -> u64 {
    ((k & TAG_MASK) << BUDGET_BITS) | budget.min(crate::MAX_LIMIT)
}

/// One `window` dimension counted with a lock-free open sub-window.
#[derive(Debug)]
pub(super) struct FastWindow {
    pub(super) rate: RateSpec,
    /// `pack(open, budget)`, [`CLOSED`] while folded, [`RETIRED`] once the
    /// limits changed.
    word: AtomicU64,
    /// The open sub-window's index; written under the lock before the word
    /// that opens it.
    open: AtomicU64,
    /// When the word was opened with no budget: the time at which one unit
    /// fits again, what [`WindowState::check`] answered for one unit then;
    /// 0 (decide under the lock) when it was opened with a budget. Written
    /// under the lock with the word.
    free_at: AtomicU64,
    /// The time the open sub-window was (re)opened at (the state's count is
    /// for that time): a grant whose clock read is older takes the lock.
    /// Written under the lock before the word that opens it.
    opened_at: AtomicU64,
    settled: Mutex<Settled>,
    /// The backend's clock, read by a fold after it closed the word: later
    /// than every lock-free grant's reading.
    clock: Arc<dyn Clock>,
    /// Grants and denials, one stripe per thread.
    pub(super) tally: Tally,
    /// Where the state went when the limits changed (set under the lock).
    pub(super) moved: OnceLock<Arc<State>>,
}

/// The part of the window kept under the lock: the closed sub-windows and
/// the budget the open one started from.
#[derive(Debug)]
struct Settled {
    /// Every sub-window but the open one's units since it was (re)opened.
    closed: WindowState,
    /// The budget the open sub-window was (re)opened with.
    opened_with: u64,
}

/// What the fast path could not decide.
pub(super) enum Slow {
    /// Denied lock-free (a one-unit demand against a spent budget), counted.
    Denied(Denial),
    /// Decide under the lock.
    Locked,
    /// The limits changed: follow [`FastWindow::moved`].
    Retired,
}

impl FastWindow {
    /// A window counting `closed` (carried over a change of limits, or
    /// empty), on the backend's `clock`.
    pub(super) fn new(rate: RateSpec, closed: WindowState, clock: Arc<dyn Clock>) -> Self {
        // Nothing is open: the first acquisition takes the lock, folds
        // nothing and opens its own sub-window with the budget `closed`
        // leaves.
        Self {
            rate,
            word: AtomicU64::new(UNOPENED),
            open: AtomicU64::new(0),
            free_at: AtomicU64::new(0),
            opened_at: AtomicU64::new(0),
            settled: Mutex::new(Settled {
                closed,
                opened_with: rate.limit,
            }),
            clock,
            tally: Tally::default(),
            moved: OnceLock::new(),
        }
    }

    /// The lock-free grant: `Ok(())` counted at `now`, or what must decide.
    #[inline(always)]
    pub(super) fn try_fast(&self, now: u64, demand: &Demand) -> Result<(), Slow> {
        let rate = &self.rate;
        let units = rate.units(demand);
        // Units the open sub-window must keep beyond this demand: what the
        // caller's share of the limit leaves out.
        let keep = rate.limit - RateSpec::scaled(rate.limit, demand.ceiling_ppm);
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            if w >= UNOPENED {
                return Err(if w == RETIRED { Slow::Retired } else { Slow::Locked });
            }
            let k = self.open.load(Ordering::Acquire);
            let start = k.wrapping_mul(rate.sub_window_ns);
            let budget = w & BUDGET_MASK;
            if w >> BUDGET_BITS != k & TAG_MASK || now.wrapping_sub(start) >= rate.sub_window_ns {
                return Err(Slow::Locked);
            }
            if units.saturating_add(keep) > budget {
                return Err(self.deny_fast(w, now, units, keep, demand));
            }
            if units == 0 {
                break;
            }
            // Counted at an earlier time than the state it takes from: the
            // lock decides, at the state's time.
            if now < self.opened_at.load(Ordering::Relaxed) {
                return Err(Slow::Locked);
            }
            match self
                .word
                .compare_exchange_weak(w, w - units, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        self.tally.allow();
        Ok(())
    }

    /// The common denial without the lock: one unit at the full limit
    /// against a word opened with no budget, whose exact wait was prepared
    /// when it opened, before that wait has passed. Anything else decides
    /// under the lock.
    #[inline(always)]
    fn deny_fast(&self, w: u64, now: u64, units: u64, keep: u64, demand: &Demand) -> Slow {
        if units != 1 || keep != 0 {
            return Slow::Locked;
        }
        let free_at = self.free_at.load(Ordering::Acquire);
        // Written before the word that published it: if the word is still
        // `w`, `free_at` belongs to it.
        if self.word.load(Ordering::Acquire) != w || now >= free_at {
            return Slow::Locked;
        }
        if demand.count_denial {
            self.tally.deny();
        }
        let wait = Duration::from_nanos((free_at - now).min(self.rate.window_ns));
        Slow::Denied(Denial::exhausted(wait, self.rate.dimension))
    }

    /// Runs `op` on the exact state at `now` (clamped into the open
    /// sub-window, so buckets stay in order): the word closed and the open
    /// sub-window folded, then reopened at the sub-window of the time `op`
    /// counted at (passed to it). `None` when the state was retired.
    pub(super) fn with_folded<R>(&self, now: u64, op: impl FnOnce(&mut WindowState, u64) -> R) -> Option<R> {
        let mut settled = self.settled.lock();
        let t = self.fold(&mut settled, now, CLOSED)?;
        let out = op(&mut settled.closed, t);
        self.reopen(&mut settled, t);
        Some(out)
    }

    /// Closes the word (to `to`: [`CLOSED`] or [`RETIRED`]) and folds the
    /// open sub-window into `settled.closed`, evicted at the returned time.
    fn fold(&self, settled: &mut MutexGuard<'_, Settled>, now: u64, to: u64) -> Option<u64> {
        // Retirement happens under this lock, so the word cannot become
        // RETIRED between this load and the swap.
        if self.word.load(Ordering::Acquire) == RETIRED {
            return None;
        }
        let w = self.word.swap(to, Ordering::AcqRel);
        // CLOSED here only if an operation panicked under the lock: what the
        // open sub-window admitted since is lost, never double counted.
        let (start, used) = match w {
            UNOPENED => (0, 0),
            _ => {
                let k = self.open.load(Ordering::Relaxed);
                let used = match w {
                    CLOSED => 0,
                    w => settled.opened_with.saturating_sub(w & BUDGET_MASK),
                };
                (k.wrapping_mul(self.rate.sub_window_ns), used)
            }
        };
        // A caller whose clock read is older than a time the state was
        // already counted at (it raced the lock) counts at that time: the
        // window's sub-windows leave at exact times, and what left by then
        // may still have counted at its reading.
        // (`opened_at` is the time of the last reopen, under this lock.)
        let t = now.max(start).max(self.opened_at.load(Ordering::Relaxed));
        // What left by `t` leaves first (against the admissions known so
        // far); the open sub-window's units were admitted before the clock
        // reads now (a grant racing this fold may have read it after `now`),
        // and inside the sub-window (the fast path grants nothing past its
        // end).
        settled.closed.evict(&self.rate, t);
        if used > 0 {
            let by = t
                .max(self.clock.now_nanos())
                .min(start + (self.rate.sub_window_ns - 1));
            settled.closed.commit_by(&self.rate, start, used, by);
            settled.closed.evict(&self.rate, t);
        }
        Some(t)
    }

    fn reopen(&self, settled: &mut MutexGuard<'_, Settled>, t: u64) {
        let rate = &self.rate;
        settled.closed.evict(rate, t);
        let budget = rate.limit.saturating_sub(settled.closed.sum());
        settled.opened_with = budget;
        let k = t / rate.sub_window_ns;
        // No budget: the state knows every admission, and its exact wait for
        // one unit holds until then. A budget: grants to come keep no time.
        let free_at = match settled.closed.check(rate, t, 1, rate.limit) {
            Err(wait) if budget == 0 => t + wait,
            _ => 0,
        };
        self.open.store(k, Ordering::Relaxed);
        self.free_at.store(free_at, Ordering::Release);
        self.opened_at.store(t, Ordering::Release);
        self.word.store(pack(k, budget), Ordering::Release);
    }

    /// Replaces the closed sub-windows of a state nobody counts on yet (a
    /// cell prepared for a change of limits, before it is published).
    pub(super) fn set_closed(&self, closed: WindowState) {
        self.settled.lock().closed = closed;
    }

    /// Retires the state (the limits changed): the word becomes
    /// [`RETIRED`], and `publish` gets the exact final state to carry while
    /// the lock is held, and returns the cell that continues it, which is
    /// published before the lock is released (so whoever takes it next
    /// finds the successor). `None`: already retired.
    pub(super) fn retire(&self, now: u64, publish: impl FnOnce(WindowState) -> Arc<State>) -> Option<()> {
        let mut settled = self.settled.lock();
        self.fold(&mut settled, now, RETIRED)?;
        let closed = std::mem::take(&mut settled.closed);
        let cell = publish(closed);
        let _ = self.moved.set(cell);
        Some(())
    }

    /// The state this retired one moved to; waits out the few instructions
    /// between the retirement and the publication.
    #[cold]
    pub(super) fn successor(&self) -> &State {
        loop {
            if let Some(next) = self.moved.get() {
                return next;
            }
            // Published under the lock: once it is free, the cell is set.
            drop(self.settled.lock());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::limits::Limits;

    fn rate(n: u64) -> RateSpec {
        Limits::default()
            .requests_per_second(n)
            .compile()
            .expect("valid")
            .rates[0]
    }

    /// The word never takes a sentinel's value.
    #[test]
    fn packed_words_are_never_sentinels() {
        for k in [0, 1, TAG_MASK, u64::MAX] {
            for b in [0, 1, crate::MAX_LIMIT, BUDGET_MASK] {
                let w = pack(k, b);
                assert!(w < UNOPENED, "pack({k}, {b}) = {w:#x}");
                assert!(w & BUDGET_MASK <= crate::MAX_LIMIT);
            }
        }
    }

    /// Lock-free grants, folds and the exact path agree with a plain
    /// [`WindowState`] fed the same admissions — the lock-free ones as the
    /// fold learns them: in their sub-window, admitted by the fold's time
    /// or the sub-window's end —
    /// over many sub-windows and two phases of the sub-window grid, and most
    /// grants take the lock-free path. A lock-free grant is one the exact
    /// state admits; a lock-free denial has the exact state's wait; a locked
    /// decision is the exact state's.
    #[test]
    fn agrees_with_the_plain_window() {
        let r = rate(50);
        // What the fold learns of `n` lock-free grants, the first at `at`.
        let learn = |w: &mut WindowState, (at, n): (u64, u64), now: u64| {
            let end = (at / r.sub_window_ns + 1) * r.sub_window_ns;
            w.evict(&r, now);
            w.commit_by(&r, at, n, now.min(end - 1));
            w.evict(&r, now);
        };
        for phase in [0, r.sub_window_ns / 2] {
            let clock = Arc::new(ManualClock::new(0));
            let f = FastWindow::new(r, WindowState::default(), clock.clone());
            let mut reference = WindowState::default();
            // Lock-free grants not folded yet: when the first was made, and how many.
            let mut unfolded = (0u64, 0u64);
            let mut now = 1_000_000_000u64 + phase;
            let demand = Demand::default();
            let (mut lock_free, mut locked, mut fast_denials) = (0u64, 0u64, 0u64);
            for i in 0..5_000u64 {
                now += (i * 7_919) % (r.sub_window_ns / 3);
                clock.set(now);
                let (ours, plain) = match f.try_fast(now, &demand) {
                    Ok(()) => {
                        lock_free += 1;
                        let mut exact = reference.clone();
                        learn(&mut exact, unfolded, now);
                        if unfolded.1 == 0 {
                            unfolded.0 = now;
                        }
                        unfolded.1 += 1;
                        (Ok(()), exact.check(&r, now, 1, r.limit))
                    }
                    Err(Slow::Locked) => {
                        let ours = f
                            .with_folded(now, |w, t| {
                                let res = w.check(&r, t, 1, r.limit);
                                if res.is_ok() {
                                    w.commit(&r, t, 1);
                                    locked += 1;
                                }
                                res
                            })
                            .expect("not retired");
                        learn(&mut reference, unfolded, now);
                        unfolded = (0, 0);
                        (ours, reference.try_admit(&r, now, 1, r.limit))
                    }
                    Err(Slow::Denied(d)) => {
                        fast_denials += 1;
                        assert_eq!(unfolded.1, 0, "a lock-free denial after lock-free grants");
                        (
                            Err(d.wait.as_nanos() as u64),
                            reference.try_admit(&r, now, 1, r.limit),
                        )
                    }
                    Err(Slow::Retired) => unreachable!("never retired here"),
                };
                assert_eq!(ours, plain, "step {i} at {now}: grant or exact wait");
            }
            assert_eq!(f.tally.allowed(), lock_free, "the fast path counts its grants");
            assert_eq!(f.tally.denied(), fast_denials, "and its denials");
            assert!(fast_denials > 0, "some denials were answered lock-free");
            assert!(
                lock_free > locked,
                "{lock_free} lock-free vs {locked} locked grants"
            );
        }
    }

    /// Issue 21 on the lock-free path: a burst that spends a minute
    /// window's budget early in a sub-window is refused with a wait of at
    /// most the window — the first denial folds the burst, the next ones
    /// answer lock-free — and at that wait one unit is admitted, not a
    /// nanosecond before.
    #[test]
    fn a_burst_waits_at_most_the_window() {
        let r = Limits::default()
            .requests_per_minute(2)
            .compile()
            .expect("valid")
            .rates[0];
        let clock = Arc::new(ManualClock::new(0));
        let f = FastWindow::new(r, WindowState::default(), clock.clone());
        let demand = Demand::default();
        let locked = |now: u64| {
            clock.set(now);
            f.with_folded(now, |w, t| {
                let res = w.check(&r, t, 1, r.limit);
                if res.is_ok() {
                    w.commit(&r, t, 1);
                }
                res
            })
            .expect("not retired")
        };
        let decide = |now: u64| match f.try_fast(now, &demand) {
            Ok(()) => Ok(()),
            Err(Slow::Denied(d)) => Err(d.wait.as_nanos() as u64),
            Err(Slow::Locked) => locked(now),
            Err(Slow::Retired) => unreachable!("never retired here"),
        };
        let t0 = 10 * r.sub_window_ns + 1_000;
        assert_eq!(decide(t0), Ok(()), "opens the word (locked)");
        assert!(matches!(f.try_fast(t0 + 1_000_000, &demand), Ok(())), "lock-free");
        let now = t0 + 300_000_000;
        assert!(
            matches!(f.try_fast(now, &demand), Err(Slow::Locked)),
            "folds first"
        );
        let wait = decide(now).unwrap_err();
        assert_eq!(wait, r.window_ns, "a window after the fold learnt the burst");
        let later = now + 500_000_000;
        match f.try_fast(later, &demand) {
            Err(Slow::Denied(d)) => assert_eq!(d.wait.as_nanos() as u64, now + wait - later),
            _ => panic!("the next denial is lock-free"),
        }
        assert!(decide(now + wait - 1).is_err());
        assert_eq!(decide(now + wait), Ok(()));
    }

    /// A lock-free grant that read the clock after a folding caller did
    /// (and landed before the fold closed the word) is counted from the
    /// fold's own later reading: it is not let go a window after the
    /// caller's older time.
    #[test]
    fn a_grant_racing_a_fold_counts_a_window_from_its_own_time() {
        let r = rate(2);
        let clock = Arc::new(ManualClock::new(0));
        let f = FastWindow::new(r, WindowState::default(), clock.clone());
        let demand = Demand::default();
        let t1 = 40 * r.sub_window_ns + 1_000;
        clock.set(t1);
        f.with_folded(t1, |w, t| w.commit(&r, t, 1))
            .expect("opens the word");
        clock.set(t1 + 500);
        assert!(matches!(f.try_fast(t1 + 500, &demand), Ok(())), "lock-free");
        // A caller that read the clock at t1 + 100 folds after that grant.
        f.with_folded(t1 + 100, |_, _| ()).expect("folds");
        let before_it_leaves = t1 + 500 + r.window_ns - 1;
        clock.set(before_it_leaves);
        let used = f.with_folded(before_it_leaves, |w, _| w.sum()).expect("usage");
        assert_eq!(used, 2, "the grant at t1 + 500 is still in the window");
    }
}
