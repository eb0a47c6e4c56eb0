//! Nested acquisitions in memory ([`Backend::acquire_nested`]): one
//! decision over several resources, all charged or none.
//!
//! Every level is counted under its resource's lock. A lock-free resource
//! (one `gcra` or one `window` dimension) met by a nest of more than one
//! level is first *pinned*: its state moves into a locked cell, exactly as
//! a change of limits moves it (the word is retired, older handles follow
//! the move), so from then on every acquisition of that resource — plain
//! or nested — takes the same lock. The nest then takes the locks of all
//! its levels in one global order (by address, each lock once), decides
//! and commits level after level, and on a refusal puts every level it
//! charged back exactly as it was (the dimensions, the calendar counts, the
//! counts and the leases it took) before any lock is released: nobody
//! ever sees a partial charge, so nothing else is refused because of it.
//!
//! [`Backend::acquire_nested`]: crate::Backend::acquire_nested

use super::carry::carry_into;
use super::fast::RETIRED;
use super::locked::{DimState, LockedState, Verdict};
use super::{MemoryBackend, MemoryHandle, State};
use crate::algo::calendar::CalendarCount;
use crate::backend::{Grant, LeaseId, NestedDecision, Reserved};
use crate::limits::{Demand, LimitSpec, Limits, RateSpec, DEFAULT_LEASE_TTL};
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a nest puts back into one locked state when a later level refuses.
struct Snapshot {
    dims: Vec<DimState>,
    cals: Vec<CalendarCount>,
    allowed: u64,
    denied: u64,
}

impl Snapshot {
    fn of(c: &LockedState) -> Self {
        Self {
            dims: c.dims.clone(),
            cals: c.cals.clone(),
            allowed: c.allowed,
            denied: c.denied,
        }
    }

    fn restore(self, c: &mut LockedState) {
        c.dims = self.dims;
        c.cals = self.cals;
        c.allowed = self.allowed;
        c.denied = self.denied;
    }
}

/// The limits of a lock-free resource as a locked state counts them: its
/// one rate (the lock-free layouts have no concurrency and no calendar).
/// A later change of limits reshapes the cell to the real new limits.
fn solo_spec(rate: &RateSpec) -> Arc<LimitSpec> {
    Arc::new(LimitSpec {
        limits: Limits {
            algorithm: rate.algorithm,
            ..Limits::default()
        },
        rates: vec![*rate],
        calendars: Vec::new(),
        concurrency: None,
        lease_ttl_ns: u64::try_from(DEFAULT_LEASE_TTL.as_nanos()).unwrap_or(u64::MAX),
    })
}

impl MemoryBackend {
    /// The locked cell that counts `state`, moving a lock-free state into
    /// one first (see the module docs).
    fn pinned(&self, state: &State, now: u64) -> Arc<Mutex<LockedState>> {
        if let Some(m) = state.locked() {
            return Arc::clone(m);
        }
        match state {
            State::Locked(m) => Arc::clone(m),
            State::Moved(next) => self.pinned(next, now),
            State::Fast(f) => {
                let m = Arc::new(Mutex::new(LockedState::new(
                    solo_spec(&f.rate),
                    Arc::clone(&self.clock),
                )));
                let cell = Arc::new(State::Locked(Arc::clone(&m)));
                let tat = f.tat.swap(RETIRED, Ordering::AcqRel);
                if tat == RETIRED {
                    // Retired by a change of limits or another pin.
                    return self.pinned(f.successor(), now);
                }
                carry_into(&cell, &f.rate, DimState::gcra(&f.rate, tat), &f.tally, now);
                let _ = f.moved.set(cell);
                m
            }
            State::FastWindow(f) => {
                let m = Arc::new(Mutex::new(LockedState::new(
                    solo_spec(&f.rate),
                    Arc::clone(&self.clock),
                )));
                let cell = Arc::new(State::Locked(Arc::clone(&m)));
                let retired = f.retire(now, |closed| {
                    carry_into(&cell, &f.rate, DimState::Window(closed), &f.tally, now);
                    Arc::clone(&cell)
                });
                match retired {
                    Some(()) => m,
                    None => self.pinned(f.successor(), now),
                }
            }
        }
    }

    /// One nested decision now (see the module docs).
    pub(super) fn acquire_nested_now(&self, levels: &[(&MemoryHandle, &Demand)]) -> NestedDecision {
        let now = self.now();
        let cells: Vec<Arc<Mutex<LockedState>>> =
            levels.iter().map(|(h, _)| self.pinned(&h.state, now)).collect();
        // Each lock once, in one global order (by address): two nests over
        // shared resources never wait for each other in a cycle.
        let mut distinct: Vec<&Arc<Mutex<LockedState>>> = cells.iter().collect();
        distinct.sort_by_key(|m| Arc::as_ptr(m));
        distinct.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let slot: Vec<usize> = cells
            .iter()
            .map(|c| distinct.iter().position(|d| Arc::ptr_eq(d, c)).unwrap_or(0))
            .collect();
        let mut guards: Vec<MutexGuard<'_, LockedState>> = distinct.iter().map(|m| m.lock()).collect();
        let snapshots: Vec<Snapshot> = guards.iter().map(|g| Snapshot::of(g)).collect();
        let mut grants = Vec::with_capacity(levels.len());
        let mut taken: Vec<(usize, u64)> = Vec::new();
        for (i, (_, demand)) in levels.iter().enumerate() {
            let demand = Demand {
                book_within_ns: 0,
                ..**demand
            };
            let g = &mut guards[slot[i]];
            let t = g.monotonic(now);
            match g.decide(t, &demand) {
                Verdict::Plain => {
                    g.allowed += 1;
                    grants.push(granted_of(t, None, &demand));
                }
                Verdict::Granted { lease, .. } => {
                    g.allowed += 1;
                    if let Some(l) = lease {
                        taken.push((slot[i], l.0));
                    }
                    grants.push(granted_of(t, lease, &demand));
                }
                Verdict::Denied(denial) => {
                    for (g, s) in guards.iter_mut().zip(snapshots) {
                        s.restore(g);
                    }
                    for (s, lease) in taken {
                        guards[s].leases.remove(lease);
                    }
                    if demand.count_denial {
                        guards[slot[i]].denied += 1;
                    }
                    return NestedDecision::Denied { level: i, denial };
                }
            }
        }
        NestedDecision::Granted(grants)
    }
}

/// The grant of a level counted at `t` (never a booked slot: a nest books
/// none).
fn granted_of(t: u64, lease: Option<LeaseId>, demand: &Demand) -> Grant {
    Grant {
        at_ns: t,
        delay_ns: 0,
        lease,
        reserved: Reserved::from(demand),
        fallback: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, Decision, LocalBackend};
    use crate::clock::ManualClock;
    use crate::limits::Algorithm;

    fn spec(limits: Limits) -> Arc<LimitSpec> {
        Arc::new(limits.compile().expect("valid"))
    }

    /// A backend on a clock that does not move: no refill, no window
    /// sliding, whatever the machine's speed.
    fn still() -> MemoryBackend {
        MemoryBackend::with_clock(Arc::new(ManualClock::new(1_000_000_000)))
    }

    fn lock_free_shapes() -> [Limits; 2] {
        [
            Limits::default().requests_per_minute(10),
            Limits {
                algorithm: Algorithm::Gcra,
                ..Limits::default().requests_per_minute(10)
            },
        ]
    }

    /// A lock-free resource charged by a nest moves to the locked layout
    /// with its usage and its counts, and plain and nested acquisitions
    /// then count on the same state.
    #[test]
    fn pinning_carries_usage_and_counts() {
        for limits in lock_free_shapes() {
            let b = still();
            let x = b.attach("x", spec(limits.clone())).expect("attach");
            let y = b
                .attach("y", spec(Limits::default().requests_per_minute(100)))
                .expect("attach");
            assert!(x.state.locked().is_none(), "{limits:?}: starts lock-free");
            let d = Demand::default();
            for _ in 0..4 {
                assert!(matches!(b.acquire_now(&x, &d), Decision::Granted(_)));
            }
            assert!(matches!(
                b.acquire_nested_now(&[(&x, &d), (&y, &d)]),
                NestedDecision::Granted(g) if g.len() == 2
            ));
            assert!(x.state.locked().is_some(), "{limits:?}: pinned");
            for i in 0..5 {
                if i % 2 == 0 {
                    assert!(
                        matches!(b.acquire_now(&x, &d), Decision::Granted(_)),
                        "{limits:?} {i}"
                    );
                } else {
                    assert!(
                        matches!(
                            b.acquire_nested_now(&[(&x, &d), (&y, &d)]),
                            NestedDecision::Granted(_)
                        ),
                        "{limits:?} {i}"
                    );
                }
            }
            assert!(matches!(b.acquire_now(&x, &d), Decision::Denied(_)));
            assert!(matches!(
                b.acquire_nested_now(&[(&y, &d), (&x, &d)]),
                NestedDecision::Denied { level: 1, .. }
            ));
            let c = b.counts(&x);
            assert_eq!((c.allowed, c.denied), (10, 2), "{limits:?}");
            // The refused nest charged nothing on `y`: 3 nests granted.
            assert_eq!(b.counts(&y).allowed, 3);
            let used = MemoryBackend::usage_of(&y.state, 1_000_000_000);
            assert_eq!(used.dimensions[0].1, 3, "{limits:?}");
        }
    }

    /// Plain acquisitions on a resource racing with nests over it that are
    /// always refused by a later level are never refused: a nest's charge
    /// is never seen by anyone before it is undone. The resource is kept
    /// one unit below its limit (each plain grant is refunded at once), so
    /// a visible transient charge would refuse the plain acquisition.
    #[test]
    fn plain_acquisitions_never_see_a_refused_nests_charge() {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        const NOW: u64 = 1_000_000_000;
        for limits in lock_free_shapes() {
            let b = Arc::new(still());
            let x = Arc::new(b.attach("x", spec(limits.clone())).expect("attach"));
            let full = Arc::new(
                b.attach("full", spec(Limits::default().requests_per_minute(1)))
                    .expect("attach"),
            );
            let d = Demand::default();
            assert!(matches!(b.acquire_now(&full, &d), Decision::Granted(_)));
            for _ in 0..9 {
                assert!(matches!(b.acquire_now(&x, &d), Decision::Granted(_)));
            }
            let done = Arc::new(AtomicBool::new(false));
            let count = Arc::new(AtomicU64::new(0));
            let nests = {
                let (b, x, full, done, count) = (
                    Arc::clone(&b),
                    Arc::clone(&x),
                    Arc::clone(&full),
                    Arc::clone(&done),
                    Arc::clone(&count),
                );
                std::thread::spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        let out = b.acquire_nested_now(&[(&x, &d), (&full, &d)]);
                        // Refused by `full`, or by `x` while a plain grant
                        // holds its last unit: never granted.
                        assert!(matches!(out, NestedDecision::Denied { .. }), "{out:?}");
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                })
            };
            // Plain acquisitions for as long as 5 000 nests take (and at
            // least 5 000 of them).
            let mut i = 0u64;
            while i < 5_000 || count.load(Ordering::Relaxed) < 5_000 {
                i += 1;
                match b.acquire_now(&x, &d) {
                    Decision::Granted(g) => {
                        MemoryBackend::reconcile_state(&x.state, NOW, &g, &Reserved::default())
                    }
                    Decision::Denied(denial) => {
                        done.store(true, Ordering::Relaxed);
                        panic!("{limits:?}: plain acquisition {i} refused with room: {denial:?}");
                    }
                }
            }
            done.store(true, Ordering::Relaxed);
            nests.join().expect("nests");
            assert!(
                matches!(b.acquire_now(&x, &d), Decision::Granted(_)),
                "{limits:?}: the tenth fits"
            );
            assert!(
                matches!(b.acquire_now(&x, &d), Decision::Denied(_)),
                "{limits:?}: exactly 10"
            );
        }
    }

    /// Two nests over the same resources in opposite orders never deadlock
    /// (each lock is taken in one global order) and never overspend.
    #[test]
    fn nests_in_opposite_orders_share_exactly() {
        let b = Arc::new(still());
        let l = Limits::default()
            .requests_per_minute(1_000)
            .max_concurrent_requests(1_000);
        let p = Arc::new(b.attach("p", spec(l.clone())).expect("attach"));
        let q = Arc::new(
            b.attach("q", spec(Limits::default().requests_per_minute(500)))
                .expect("attach"),
        );
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (b, p, q) = (Arc::clone(&b), Arc::clone(&p), Arc::clone(&q));
                std::thread::spawn(move || {
                    let d = Demand {
                        lease: false,
                        ..Demand::default()
                    };
                    let mut granted = 0u64;
                    for _ in 0..200 {
                        let out = if t % 2 == 0 {
                            b.acquire_nested_now(&[(&p, &d), (&q, &d)])
                        } else {
                            b.acquire_nested_now(&[(&q, &d), (&p, &d)])
                        };
                        if matches!(out, NestedDecision::Granted(_)) {
                            granted += 1;
                        }
                    }
                    granted
                })
            })
            .collect();
        let total: u64 = threads.into_iter().map(|t| t.join().expect("thread")).sum();
        assert_eq!(total, 500);
        let used = MemoryBackend::usage_of(&p.state, 1_000_000_000);
        assert_eq!(used.dimensions[0].1, 500);
    }
}
