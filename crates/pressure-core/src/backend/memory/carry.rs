//! Carrying a resource's state across a change of its limits
//! ([`Backend::reattach`](crate::Backend::reattach), see the module docs of
//! `memory`): dimension by dimension, window sub-windows as they are, a
//! bucket by the units it holds; a lock-free state is retired and moved to
//! a new cell.

use super::fast::RETIRED;
use super::locked::{DimState, LockedState};
use super::{MemoryBackend, State};
use crate::algo::{calendar::CalendarCount, gcra, window::WindowState};
use crate::limits::{Algorithm, LimitSpec, RateSpec};
use crate::striped::Tally;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A `gcra` TAT counted with `from` re-expressed for `to`, keeping the units
/// the bucket holds (rounded up, so a change never frees capacity).
fn rescale_tat(from: &RateSpec, to: &RateSpec, tat: u64, now: u64) -> u64 {
    if tat <= now {
        return tat;
    }
    now.saturating_add(gcra::used(from, tat, now).saturating_mul(to.emission_ns))
        .min(RETIRED - 1)
}

/// One dimension's state carried from `from` to `to` (same dimension):
/// window sub-windows as they are (a dimension's sub-window grid depends only
/// on its window length, which limits do not change), a bucket by its
/// units, and across algorithms by the units counted now.
fn carry_dim(from: &RateSpec, st: DimState, to: &RateSpec, now: u64) -> DimState {
    match (st, to.algorithm) {
        (DimState::Window(w), Algorithm::Window) if from.sub_window_ns == to.sub_window_ns => {
            DimState::Window(w)
        }
        (DimState::Gcra { tat, .. }, Algorithm::Gcra) => DimState::gcra(to, rescale_tat(from, to, tat, now)),
        (st, algorithm) => {
            let units = match st {
                DimState::Gcra { tat, .. } => gcra::used(from, tat, now),
                DimState::Window(mut w) => {
                    w.evict(from, now);
                    w.sum()
                }
            };
            match algorithm {
                Algorithm::Gcra if units == 0 => DimState::gcra(to, 0),
                Algorithm::Gcra => DimState::gcra(
                    to,
                    now.saturating_add(units.saturating_mul(to.emission_ns))
                        .min(RETIRED - 1),
                ),
                Algorithm::Window => {
                    let mut w = WindowState::default();
                    w.commit(to, now, units);
                    DimState::Window(w)
                }
            }
        }
    }
}

impl LockedState {
    /// Takes over the final state `st` of a retired lock-free dimension
    /// counted with `from`, and its counts, on the dimension they share.
    pub(super) fn absorb(&mut self, from: &RateSpec, st: DimState, tally: &Tally, now: u64) {
        if let Some(i) = self.spec.rates.iter().position(|r| r.dimension == from.dimension) {
            let to = self.spec.rates[i];
            self.dims[i] = carry_dim(from, st, &to, now);
        }
        self.allowed = tally.allowed();
        self.denied = tally.denied();
    }

    /// Re-lays the state out for `spec`, dimension by dimension; leases and
    /// counters stay as they are.
    pub(super) fn reshape(&mut self, spec: Arc<LimitSpec>, now: u64) {
        let mut old: Vec<(RateSpec, Option<DimState>)> = self
            .spec
            .rates
            .iter()
            .copied()
            .zip(self.dims.drain(..).map(Some))
            .collect();
        self.dims = spec
            .rates
            .iter()
            .map(|to| {
                let carried = old
                    .iter_mut()
                    .find(|(from, _)| from.dimension == to.dimension)
                    .and_then(|(from, st)| st.take().map(|st| carry_dim(from, st, to, now)));
                carried.unwrap_or(match to.algorithm {
                    Algorithm::Gcra => DimState::gcra(to, 0),
                    Algorithm::Window => DimState::Window(WindowState::default()),
                })
            })
            .collect();
        self.cals = spec
            .calendars
            .iter()
            .map(|to| {
                self.spec
                    .calendars
                    .iter()
                    .position(|from| from.dimension == to.dimension)
                    .map_or_else(CalendarCount::default, |i| self.cals[i])
            })
            .collect();
        self.spec = spec;
    }
}

impl MemoryBackend {
    /// The state of a resource whose limits change to `spec`, continuing
    /// `state` (see the module docs).
    pub(super) fn carry(&self, state: &State, spec: Arc<LimitSpec>, now: u64) -> State {
        match state {
            State::Locked(m) => {
                m.lock().reshape(spec, now);
                State::Locked(Arc::clone(m))
            }
            State::Moved(next) => self.carry(next, spec, now),
            State::Fast(f) => {
                if let Some(next) = f.moved.get() {
                    return self.carry(next, spec, now);
                }
                // Prepare the new cell, retire the word, carry its final
                // value, then publish: nothing reads the cell before it holds
                // the carried state.
                // Everything that allocates happens before the retirement,
                // so racers meeting the sentinel wait only for arithmetic.
                let cell = Arc::new(State::fresh(&spec, &self.clock));
                let tat = f.tat.swap(RETIRED, Ordering::AcqRel);
                if tat == RETIRED {
                    // Retired by a concurrent change: follow it.
                    return self.carry(f.successor(), spec, now);
                }
                carry_into(&cell, &f.rate, DimState::gcra(&f.rate, tat), &f.tally, now);
                // Only this call retired the word, so the cell is unset.
                let _ = f.moved.set(Arc::clone(&cell));
                State::continued_by(&cell)
            }
            State::FastWindow(f) => {
                if let Some(next) = f.moved.get() {
                    return self.carry(next, spec, now);
                }
                let cell = Arc::new(State::fresh(&spec, &self.clock));
                let retired = f.retire(now, |closed| {
                    carry_into(&cell, &f.rate, DimState::Window(closed), &f.tally, now);
                    Arc::clone(&cell)
                });
                match retired {
                    Some(()) => State::continued_by(&cell),
                    // Retired by a concurrent change: follow it.
                    None => self.carry(f.successor(), spec, now),
                }
            }
        }
    }
}

/// Carries the final state `st` of a retired lock-free dimension (counted
/// with `from`) and its counts into `cell`, a fresh state for the new
/// limits that nobody counts on yet.
pub(super) fn carry_into(cell: &State, from: &RateSpec, st: DimState, tally: &Tally, now: u64) {
    match cell {
        State::Locked(m) => m.lock().absorb(from, st, tally, now),
        State::Fast(nf) => {
            // A bucket carries into a bucket whatever its dimension (as it
            // always has); a window only into its own dimension.
            if nf.rate.dimension == from.dimension || matches!(st, DimState::Gcra { .. }) {
                if let DimState::Gcra { tat: t, .. } = carry_dim(from, st, &nf.rate, now) {
                    nf.tat.store(t, Ordering::Release);
                }
            }
            nf.tally.carry(tally);
        }
        State::FastWindow(nw) => {
            if nw.rate.dimension == from.dimension {
                if let DimState::Window(w) = carry_dim(from, st, &nw.rate, now) {
                    nw.set_closed(w);
                }
            }
            nw.tally.carry(tally);
        }
        // `State::fresh` never makes one.
        State::Moved(_) => {}
    }
}
