//! [`MemoryBackend`]: limiter state in this process.
//!
//! A resource with a single `gcra` rate dimension and no concurrency limit
//! (the common "N per second" case) is one atomic word updated with a
//! compare-and-swap, plus its grant and denial counters (per-thread
//! stripes once it has counted a thousand events, see `striped`): no lock,
//! no allocation, no locked instruction but the compare-and-swap. Each
//! layout's state is behind the handle's one pointer (`State`), so a
//! resource weighs what its layout needs. A single `window` dimension without
//! concurrency is the same in the common case: the open sub-window's budget
//! is one word, and the lock is taken once per sub-window and per denial
//! (`fast_window`). Every other resource keeps its dimensions and counters
//! behind one short mutex, which is what makes a multi-dimension
//! acquisition all-or-nothing. A resource with a calendar dimension
//! (`requestsPerDay`, ...) is always counted under the lock, with its
//! period taken from the clock's wall time ([`Clock::unix_nanos_at`]): a
//! count of an ended period reads as zero and is replaced by the next
//! period's, so nothing outlives its period.
//!
//! # Changing limits ([`Backend::reattach`])
//! The state carries over into the new limits, matched by dimension (not by
//! position): window sub-windows as they are, a `gcra` bucket by the units it
//! holds, leases untouched. A locked resource keeps its mutex, now holding
//! the new limits, so old and new handles are the same state. A lock-free
//! resource is *retired*: its word is swapped to a sentinel that no
//! compare-and-swap can match, the state moves to a new cell, and an
//! acquisition through an old handle that meets the sentinel follows the
//! move. Nothing is ever counted against a layout it does not match.
//!
//! # Files, by layout
//! - `mod.rs`: [`MemoryBackend`], [`MemoryHandle`] and the layout tag
//!   (`State`); the [`Backend`] and [`LocalBackend`] impls, which dispatch
//!   on the layout (the lock-free words in line, the rest out of line).
//! - `fast.rs`: the lock-free `gcra` word, with its twins `fast_plain`
//!   (measured hot path) and `fast_acquire` (any demand).
//! - `fast_window.rs`: the lock-free `window` budget word and its locked
//!   closed sub-windows.
//! - `locked.rs`: every other shape under one mutex, with its twins
//!   `grant_at_once` (the common demand) and `decide_generic` (any).
//! - `carry.rs`: the state carried across a change of limits.
//!
//! Each pair of twins is held to the same decisions by a test next to it
//! (`fast::tests`, `shape_tests`, `fast_window::tests`).

use super::{
    Backend, BackendError, CompactDecision, Counts, Decision, Denial, Grant, LeaseId, LocalBackend,
    NestedDecision, Reserved, Usage,
};
use crate::algo::{gcra, window::WindowState};
use crate::clock::{Clock, MonotonicClock};
use crate::limits::{Algorithm, Demand, LimitSpec, RateSpec};
use crate::units::UnitsDelta;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

mod carry;
mod fast;
mod fast_window;
mod locked;
mod nested;
use fast::{fast_acquire, fast_plain, Fast, RETIRED};
use fast_window::{FastWindow, Slow};
use locked::LockedState;

/// In-process backend; the default. Cheap to clone (shares its clock).
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    clock: Arc<dyn Clock>,
    /// The same clock as `clock` when it is the production one, read
    /// without a virtual call on the hot path (a copy: same origin).
    monotonic: Option<MonotonicClock>,
}

impl MemoryBackend {
    /// A backend on the production monotonic clock.
    pub fn new() -> Self {
        let clock = MonotonicClock::new();
        Self {
            clock: Arc::new(clock.clone()),
            monotonic: Some(clock),
        }
    }

    /// A backend on the given clock (tests use `TokioClock` or `ManualClock`).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            monotonic: None,
        }
    }

    /// The clock this backend counts with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The backend's time: a direct read of the production clock, a virtual
    /// call only for an injected one.
    #[inline(always)]
    fn now(&self) -> u64 {
        match &self.monotonic {
            Some(c) => c.now_nanos(),
            None => self.clock.now_nanos(),
        }
    }

    #[inline]
    fn release_now(&self, h: &MemoryHandle, grant: &Grant) {
        if let Some(lease) = grant.lease {
            // A locked state directly (the only one with leases), moves
            // followed otherwise.
            let m = match &h.state {
                State::Locked(m) => m,
                other => match other.locked() {
                    Some(m) => m,
                    None => return,
                },
            };
            m.lock().leases.remove(lease.0);
        }
    }

    /// Renews every live lease of `h`'s resource by its lease TTL now, in
    /// one short lock: the broker's renewal task, which keeps no book of
    /// its own for this backend (the leases *are* the book, see
    /// `renewal`). (leases renewed, leases lost — expired before this
    /// renewal —, the TTL renewed with).
    pub(crate) fn renew_held(&self, h: &MemoryHandle) -> (usize, usize, u64) {
        let now = self.now();
        match h.state.locked() {
            Some(m) => {
                let mut c = m.lock();
                let now = c.monotonic(now);
                let ttl = c.spec.lease_ttl_ns;
                let (renewed, lost) = c.leases.renew_all(now, now.saturating_add(ttl));
                (renewed, lost, ttl)
            }
            None => (0, 0, 0),
        }
    }

    /// The live leases of `h`'s resource (none swept), and the identity of
    /// the state they are counted in (every version of a resource shares
    /// it): for the broker's count of its live leases.
    pub(crate) fn held_leases(&self, h: &MemoryHandle) -> (usize, usize) {
        match h.state.locked() {
            Some(m) => (Arc::as_ptr(m) as usize, m.lock().leases.len()),
            None => (0, 0),
        }
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Per-resource state of the [`MemoryBackend`]: a tag and a pointer to the
/// state of the resource's layout, so a handle costs 16 bytes whatever the
/// layout and the state only what its layout needs (see `State`).
#[derive(Debug)]
pub struct MemoryHandle {
    state: State,
}

/// Every variant is one pointer, to a state sized for its layout. The
/// lock-free `gcra` state used to be inline (232 bytes in every handle, also
/// of the `window` and locked resources that never use it); boxed, its hot
/// path follows one more pointer before the compare-and-swap — a load from
/// a line the same acquisition touches anyway, measured in the `acquire`
/// bench (docs/benchmarks.md) — and a lazily registered tenant does not pay
/// for a layout it does not have.
#[derive(Debug)]
enum State {
    /// One `gcra` dimension, no concurrency: the TAT in a lock-free word,
    /// next to its per-thread counters.
    Fast(Box<Fast>),
    /// One `window` dimension, no concurrency: the open sub-window's budget
    /// in a lock-free word, the closed ones under a lock (see
    /// `fast_window`).
    FastWindow(Box<FastWindow>),
    /// Anything else: all dimensions under one lock, with the limits they
    /// are counted against (shared by every handle of the resource).
    Locked(Arc<Mutex<LockedState>>),
    /// A lock-free resource whose limits changed: its state lives in a cell
    /// that older, retired handles forward to as well.
    Moved(Arc<State>),
}

impl State {
    /// The locked counters, following moves; `None` for a lock-free state.
    #[inline]
    fn locked(&self) -> Option<&Arc<Mutex<LockedState>>> {
        match self {
            State::Locked(m) => Some(m),
            State::Moved(next) => next.locked(),
            State::Fast(f) => f.moved.get().and_then(|next| next.locked()),
            State::FastWindow(f) => f.moved.get().and_then(|next| next.locked()),
        }
    }

    /// The state of a resource attached with `spec`, nothing counted, on
    /// the backend's `clock`.
    fn fresh(spec: &Arc<LimitSpec>, clock: &Arc<dyn Clock>) -> Self {
        if let Some(rate) = lock_free_rate(spec, Algorithm::Gcra) {
            return State::Fast(Box::new(Fast::new(rate)));
        }
        if let Some(rate) = lock_free_rate(spec, Algorithm::Window) {
            return State::FastWindow(Box::new(FastWindow::new(
                rate,
                WindowState::default(),
                Arc::clone(clock),
            )));
        }
        State::Locked(Arc::new(Mutex::new(LockedState::new(
            Arc::clone(spec),
            Arc::clone(clock),
        ))))
    }

    /// The handle's view of a cell that continues a retired state: a locked
    /// cell directly (all its handles share the lock), a lock-free one
    /// through the move.
    fn continued_by(cell: &Arc<State>) -> Self {
        match &**cell {
            State::Locked(m) => State::Locked(Arc::clone(m)),
            _ => State::Moved(Arc::clone(cell)),
        }
    }
}

/// Whether `spec` can be counted lock-free with `algorithm`'s state (the
/// atomic GCRA, or the window's lock-free open sub-window): one rate of that
/// algorithm, no concurrency, no calendar dimension.
fn lock_free_rate(spec: &LimitSpec, algorithm: Algorithm) -> Option<RateSpec> {
    match spec.rates.as_slice() {
        [rate] if rate.algorithm == algorithm && spec.concurrency.is_none() && spec.calendars.is_empty() => {
            Some(*rate)
        }
        _ => None,
    }
}

/// The exact decision of a [`FastWindow`] under its lock (a denial, a new
/// sub-window, a batch caller near the limit): `Ok(at_ns)` granted, or the
/// denial; `None` when the state was retired.
fn window_locked(f: &FastWindow, now: u64, demand: &Demand) -> Option<Result<u64, Denial>> {
    let r = f.rate;
    f.with_folded(now, |w, t| {
        let units = r.units(demand);
        match w.check(&r, t, units, RateSpec::scaled(r.limit, demand.ceiling_ppm)) {
            Ok(()) => {
                w.commit(&r, t, units);
                f.tally.allow();
                Ok(t)
            }
            Err(wait) => {
                if demand.count_denial {
                    f.tally.deny();
                }
                let wait = Duration::from_nanos(wait.saturating_add(t - now).min(r.window_ns));
                Err(Denial::exhausted(wait, r.dimension))
            }
        }
    })
}

/// A grant of exactly `demand` counted at `now`, after `delay_ns` (a booked
/// slot) and with `lease`: what every layout answers when it admits.
#[inline(always)]
fn granted(now: u64, delay_ns: u64, lease: Option<LeaseId>, demand: &Demand) -> Decision {
    Decision::Granted(Grant {
        at_ns: now,
        delay_ns,
        lease,
        reserved: Reserved::from(demand),
        fallback: false,
    })
}

impl MemoryBackend {
    /// What the lock-free words did not answer: a locked resource (in a
    /// small function of its own), or anything else.
    #[inline(never)]
    fn acquire_held_slow(state: &State, now: u64, demand: &Demand) -> Held {
        match state {
            State::Locked(m) => Self::locked_held(m, now, demand),
            _ => Self::acquire_held_other(state, now, demand),
        }
    }

    #[inline(never)]
    fn acquire_held_other(state: &State, now: u64, demand: &Demand) -> Held {
        match state {
            State::Locked(m) => Self::locked_held(m, now, demand),
            State::Moved(next) => Self::acquire_held_slow(next, now, demand),
            State::FastWindow(f) => match Self::window_slow(f, now, demand) {
                Some(Ok(at_ns)) => Held::Plain { at_ns },
                Some(Err(denial)) => Held::Full(Decision::Denied(denial)),
                None => Self::acquire_held_slow(f.successor(), now, demand),
            },
            State::Fast(_) => match CompactDecision::of(Self::acquire_slow(state, now, demand), demand) {
                CompactDecision::Granted { at_ns } => Held::Plain { at_ns },
                CompactDecision::Full(d) => Held::Full(d),
            },
        }
    }

    /// A locked resource's acquisition: a small function for the
    /// specialised grant, which calls out for anything else.
    #[inline(never)]
    fn locked_held(m: &Mutex<LockedState>, now: u64, demand: &Demand) -> Held {
        m.lock().acquire_held(now, demand)
    }

    #[inline(never)]
    fn acquire_slow(state: &State, now: u64, demand: &Demand) -> Decision {
        match state {
            State::Fast(f) => match fast_acquire(f, now, demand) {
                Some(d) => d,
                None => Self::acquire_slow(f.successor(), now, demand),
            },
            State::Locked(m) => m.lock().acquire(now, demand),
            State::Moved(next) => Self::acquire_slow(next, now, demand),
            State::FastWindow(f) => match Self::window_slow(f, now, demand) {
                Some(Ok(at_ns)) => granted(at_ns, 0, None, demand),
                Some(Err(denial)) => Decision::Denied(denial),
                None => Self::acquire_slow(f.successor(), now, demand),
            },
        }
    }

    /// A [`FastWindow`] acquisition the lock-free path left: tried again
    /// lock-free (it may have raced with a fold), then decided exactly under
    /// the lock. `None`: retired.
    fn window_slow(f: &FastWindow, now: u64, demand: &Demand) -> Option<Result<u64, Denial>> {
        match f.try_fast(now, demand) {
            Ok(()) => Some(Ok(now)),
            Err(Slow::Denied(d)) => Some(Err(d)),
            Err(Slow::Retired) => None,
            Err(Slow::Locked) => window_locked(f, now, demand),
        }
    }

    fn counts_of(state: &State) -> Counts {
        match state {
            State::Fast(f) => match f.moved.get() {
                Some(next) => Self::counts_of(next),
                None => Counts {
                    allowed: f.tally.allowed(),
                    denied: f.tally.denied(),
                },
            },
            State::Locked(m) => {
                let c = m.lock();
                Counts {
                    allowed: c.allowed,
                    denied: c.denied,
                }
            }
            State::Moved(next) => Self::counts_of(next),
            State::FastWindow(f) => match f.moved.get() {
                Some(next) => Self::counts_of(next),
                None => Counts {
                    allowed: f.tally.allowed(),
                    denied: f.tally.denied(),
                },
            },
        }
    }

    fn reconcile_state(state: &State, now: u64, grant: &Grant, actual: &Reserved) {
        match state {
            State::Fast(f) => {
                let rate = &f.rate;
                let delta = UnitsDelta::between(
                    rate.units(&Demand::from(&grant.reserved)),
                    rate.units(&Demand::from(actual)),
                );
                if delta.is_zero() {
                    return;
                }
                let moved = f
                    .tat
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                        (t != RETIRED).then(|| gcra::adjust(rate, t, grant.at_ns, delta).min(RETIRED - 1))
                    })
                    .is_err();
                if moved {
                    Self::reconcile_state(f.successor(), now, grant, actual);
                }
            }
            State::Locked(m) => m.lock().reconcile(now, grant, actual),
            State::Moved(next) => Self::reconcile_state(next, now, grant, actual),
            State::FastWindow(f) => {
                let r = f.rate;
                let delta = UnitsDelta::between(
                    r.units(&Demand::from(&grant.reserved)),
                    r.units(&Demand::from(actual)),
                );
                if delta.is_zero() {
                    return;
                }
                if f.with_folded(now, |w, t| w.adjust(&r, t, grant.at_ns, delta))
                    .is_none()
                {
                    Self::reconcile_state(f.successor(), now, grant, actual);
                }
            }
        }
    }

    fn usage_of(state: &State, now: u64) -> Usage {
        match state {
            State::Fast(f) => match f.tat.load(Ordering::Acquire) {
                RETIRED => Self::usage_of(f.successor(), now),
                tat => Usage {
                    dimensions: vec![(f.rate.dimension, gcra::used(&f.rate, tat, now))],
                    leases: 0,
                    resets: Vec::new(),
                },
            },
            State::Locked(m) => m.lock().usage(now),
            State::Moved(next) => Self::usage_of(next, now),
            State::FastWindow(f) => match f.with_folded(now, |w, _| w.sum()) {
                Some(used) => Usage {
                    dimensions: vec![(f.rate.dimension, used)],
                    leases: 0,
                    resets: Vec::new(),
                },
                None => Self::usage_of(f.successor(), now),
            },
        }
    }

    fn at_rest_of(state: &State, now: u64) -> bool {
        match state {
            State::Fast(f) => match f.tat.load(Ordering::Acquire) {
                RETIRED => Self::at_rest_of(f.successor(), now),
                tat => tat <= now,
            },
            State::Locked(m) => m.try_lock().is_some_and(|mut c| c.at_rest(now)),
            State::Moved(next) => Self::at_rest_of(next, now),
            State::FastWindow(f) => match f.with_folded(now, |w, _| w.is_empty()) {
                Some(empty) => empty,
                None => Self::at_rest_of(f.successor(), now),
            },
        }
    }
}

impl Backend for MemoryBackend {
    type Handle = MemoryHandle;

    fn attach(&self, _resource: &str, spec: Arc<LimitSpec>) -> Result<MemoryHandle, BackendError> {
        let state = State::fresh(&spec, &self.clock);
        Ok(MemoryHandle { state })
    }

    fn reattach(
        &self,
        _resource: &str,
        old: &MemoryHandle,
        spec: Arc<LimitSpec>,
    ) -> Result<MemoryHandle, BackendError> {
        let now = self.now();
        Ok(MemoryHandle {
            state: self.carry(&old.state, spec, now),
        })
    }

    #[inline]
    fn acquire_now_if_local(
        &self,
        handle: &MemoryHandle,
        demand: &Demand,
    ) -> Option<Result<Decision, BackendError>> {
        Some(Ok(self.acquire_now(handle, demand)))
    }

    #[inline(always)]
    fn acquire_now_compact_if_local(
        &self,
        handle: &MemoryHandle,
        demand: &Demand,
    ) -> Option<Result<CompactDecision, BackendError>> {
        Some(Ok(self.acquire_now_compact(handle, demand)))
    }

    fn counts(&self, handle: &MemoryHandle) -> Counts {
        Self::counts_of(&handle.state)
    }

    #[inline]
    fn acquire(
        &self,
        handle: &MemoryHandle,
        demand: &Demand,
    ) -> impl std::future::Future<Output = Result<Decision, BackendError>> + Send {
        std::future::ready(Ok(self.acquire_now(handle, demand)))
    }

    fn release(
        &self,
        handle: &MemoryHandle,
        grant: &Grant,
    ) -> impl std::future::Future<Output = Result<(), BackendError>> + Send {
        self.release_now(handle, grant);
        std::future::ready(Ok(()))
    }

    #[inline]
    fn release_detached(&self, handle: &MemoryHandle, grant: Grant) {
        self.release_now(handle, &grant);
    }

    fn renew(
        &self,
        handle: &MemoryHandle,
        grant: &Grant,
    ) -> impl std::future::Future<Output = Result<bool, BackendError>> + Send {
        let now = self.now();
        let ok = match (handle.state.locked(), grant.lease) {
            (Some(m), Some(lease)) => {
                let mut c = m.lock();
                let ttl = c.spec.lease_ttl_ns;
                c.leases.renew(lease.0, now, now + ttl)
            }
            _ => false,
        };
        std::future::ready(Ok(ok))
    }

    fn renew_many(
        &self,
        handle: &MemoryHandle,
        grants: &[Grant],
    ) -> impl std::future::Future<Output = Result<Vec<bool>, BackendError>> + Send {
        let now = self.now();
        let out = match handle.state.locked() {
            Some(m) => {
                let mut c = m.lock();
                let until = now + c.spec.lease_ttl_ns;
                grants
                    .iter()
                    .map(|g| g.lease.is_some_and(|l| c.leases.renew(l.0, now, until)))
                    .collect()
            }
            None => vec![false; grants.len()],
        };
        std::future::ready(Ok(out))
    }

    fn reconcile(
        &self,
        handle: &MemoryHandle,
        grant: &Grant,
        actual: &Reserved,
    ) -> impl std::future::Future<Output = Result<(), BackendError>> + Send {
        let now = self.now();
        Self::reconcile_state(&handle.state, now, grant, actual);
        std::future::ready(Ok(()))
    }

    fn usage(
        &self,
        handle: &MemoryHandle,
    ) -> impl std::future::Future<Output = Result<Usage, BackendError>> + Send {
        let now = self.now();
        std::future::ready(Ok(Self::usage_of(&handle.state, now)))
    }

    fn at_rest(&self, handle: &MemoryHandle) -> bool {
        Self::at_rest_of(&handle.state, self.now())
    }

    fn acquire_nested(
        &self,
        levels: &[(&MemoryHandle, &Demand)],
    ) -> impl std::future::Future<Output = Result<NestedDecision, BackendError>> + Send {
        std::future::ready(Ok(self.acquire_nested_now(levels)))
    }

    #[inline(always)]
    fn in_process<'a>(&'a self, handle: &'a MemoryHandle) -> Option<(&'a MemoryBackend, &'a MemoryHandle)> {
        Some((self, handle))
    }
}

impl LocalBackend for MemoryBackend {
    /// Inlined into the caller, so the decision is built where the caller
    /// keeps it (a copy through memory stalls on store forwarding).
    #[inline(always)]
    fn acquire_now(&self, h: &MemoryHandle, demand: &Demand) -> Decision {
        self.acquire_now_compact(h, demand).into_decision(demand)
    }

    /// The lock-free word answers in place; everything else (a retired
    /// word, a locked resource, a booking) goes out of line.
    #[inline(always)]
    fn acquire_now_compact(&self, h: &MemoryHandle, demand: &Demand) -> CompactDecision {
        let now = self.now();
        match &h.state {
            State::Fast(f) if demand.book_within_ns == 0 => match fast_plain(f, now, demand) {
                Some(Ok(())) => return CompactDecision::Granted { at_ns: now },
                Some(Err(denial)) => return CompactDecision::Full(Decision::Denied(denial)),
                None => {}
            },
            State::FastWindow(f) => match f.try_fast(now, demand) {
                Ok(()) => return CompactDecision::Granted { at_ns: now },
                Err(Slow::Denied(d)) => return CompactDecision::Full(Decision::Denied(d)),
                Err(_) => {}
            },
            _ => {}
        }
        // Converted here, in line: the caller reads the two words of a
        // leased grant straight from the slow path's answer.
        Self::acquire_held_slow(&h.state, now, demand).into_compact(demand)
    }
}

/// What a locked state's acquisition answers ([`LockedState::acquire_held`]):
/// [`CompactDecision`] with the common leased grant as a case of its own, so
/// the small function that decides it writes two words, not a [`Grant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// Granted, plainly ([`CompactDecision::Granted`]).
    Plain {
        /// Backend time at which the units were counted.
        at_ns: u64,
    },
    /// Granted at once, exactly the demand, with a concurrency lease this
    /// backend keeps: the grant is `Grant { at_ns, delay_ns: 0, lease:
    /// Some(lease), reserved: Reserved::from(demand), fallback: false }`.
    Leased {
        /// Backend time at which the units were counted.
        at_ns: u64,
        /// The lease taken.
        lease: LeaseId,
    },
    /// Any other decision (a denial, a booked slot).
    Full(Decision),
}

impl Held {
    /// The same answer as a [`CompactDecision`].
    #[inline(always)]
    pub(crate) fn into_compact(self, demand: &Demand) -> CompactDecision {
        match self {
            Held::Plain { at_ns } => CompactDecision::Granted { at_ns },
            Held::Leased { at_ns, lease } => CompactDecision::Full(granted(at_ns, 0, Some(lease), demand)),
            Held::Full(d) => CompactDecision::Full(d),
        }
    }
}

#[cfg(test)]
mod calendar_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod shape_tests;

#[cfg(test)]
mod reconcile_tests;
