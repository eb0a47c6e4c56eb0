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
