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

use super::{
    Backend, BackendError, CompactDecision, Counts, Decision, Denial, Grant, LeaseId, LocalBackend, Reserved,
    Usage,
};
use crate::algo::{calendar::CalendarCount, gcra, leases::LeaseSet, window::WindowState};
use crate::clock::{Clock, MonotonicClock};
use crate::limits::{Algorithm, Demand, Dimension, LimitSpec, RateSpec, PPM};
use crate::striped::Tally;
use crate::units::UnitsDelta;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod fast_window;
use fast_window::{FastWindow, Slow};

/// The TAT word of a retired lock-free state: larger than any real TAT
/// (those are clamped below it), so every compare-and-swap against a value
/// read before the retirement fails.
const RETIRED: u64 = u64::MAX;

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

#[derive(Debug)]
struct Fast {
    rate: RateSpec,
    /// `gcra::tolerance` at the full capacity, computed once.
    tolerance: u64,
    /// Whether the dimension counts requests (the units of most demands).
    per_request: bool,
    tat: AtomicU64,
    /// Grants and denials, one stripe per thread once the resource is hot
    /// (no locked increment; see `striped`).
    tally: Tally,
    /// Where the state went when the limits changed; published after the
    /// new cell holds the carried state, read by whoever meets [`RETIRED`].
    moved: OnceLock<Arc<State>>,
}

impl Fast {
    fn new(rate: RateSpec) -> Self {
        Self {
            rate,
            tolerance: gcra::tolerance(&rate, rate.capacity),
            per_request: rate.dimension.counts_requests(),
            tat: AtomicU64::new(0),
            tally: Tally::default(),
            moved: OnceLock::new(),
        }
    }

    /// The state this retired word moved to; waits out the few instructions
    /// between the retirement and the publication of the new cell.
    #[cold]
    fn successor(&self) -> &State {
        let mut spins = 0u32;
        loop {
            if let Some(next) = self.moved.get() {
                return next;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
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

/// A resource counted under one lock: every dimension, the leases and the
/// allowed/denied counts.
#[derive(Debug)]
struct LockedState {
    /// The limits this state is counted against now.
    spec: Arc<LimitSpec>,
    dims: Vec<DimState>,
    /// One count per calendar dimension, in the order of `spec.calendars`.
    cals: Vec<CalendarCount>,
    /// The backend's clock, for the wall time of calendar periods (read
    /// only when the resource has a calendar dimension).
    clock: Arc<dyn Clock>,
    leases: LeaseSet,
    allowed: u64,
    denied: u64,
    /// The latest time this state was counted at: a caller whose clock read
    /// is older (it raced one that got the lock first) is counted at this
    /// time instead, since a window's sub-windows leave at exact times and
    /// the state may already have let go of what still counted then.
    high: u64,
}

/// What [`LockedState::decide`] did, before it is dressed as a [`Decision`].
enum Verdict {
    /// Immediate, no lease: [`CompactDecision::Granted`].
    Plain,
    /// Granted with a booked delay or a lease.
    Granted {
        delay: u64,
        lease: Option<LeaseId>,
    },
    Denied(Denial),
}

/// Puts back the TATs `keep` held of the buckets among the first
/// dimensions, which a later dimension's refusal undoes
/// ([`LockedState::grant_at_once`]).
#[cold]
#[inline(never)]
fn put_back(dims: &mut [DimState], keep: &[u64]) {
    for (st, &before) in dims.iter_mut().zip(keep) {
        if let DimState::Gcra { tat, .. } = st {
            *tat = before;
        }
    }
}

/// The most rate dimensions a resource can have (one per rate
/// [`Dimension`]); [`LockedState::grant_at_once`] keeps one word per
/// dimension on the stack.
const MAX_RATES: usize = 8;

/// A demand's units by kind of unit, so a dimension's units are one table
/// read ([`UnitsByKind::of`]) instead of a match on the dimension.
struct UnitsByKind([u64; 8]);

impl UnitsByKind {
    /// The kind of unit of each dimension, by its index: requests, input
    /// plus output tokens, input tokens, output tokens, cost, none.
    const KIND: [u8; 12] = {
        let mut kind = [0u8; 12];
        let mut i = 0;
        while i < 12 {
            let d = Dimension::ALL[i];
            kind[d as usize] = match d {
                Dimension::RequestsPerSecond
                | Dimension::RequestsPerMinute
                | Dimension::RequestsPerHour
                | Dimension::RequestsPer24Hours
                | Dimension::RequestsPerDay => 0,
                Dimension::TokensPerMinute | Dimension::TokensPerDay => 1,
                Dimension::InputTokensPerMinute => 2,
                Dimension::OutputTokensPerMinute => 3,
                Dimension::CostMicroUsdPerDay | Dimension::CostMicroUsdPerMonth => 4,
                Dimension::MaxConcurrentRequests => 5,
            };
            i += 1;
        }
        kind
    };

    #[inline(always)]
    fn new(demand: &Demand) -> Self {
        Self([
            demand.requests,
            demand.input_tokens.saturating_add(demand.output_tokens),
            demand.input_tokens,
            demand.output_tokens,
            demand.cost_micro_usd,
            0,
            0,
            0,
        ])
    }

    /// [`Dimension::units`] of the demand.
    #[inline(always)]
    fn of(&self, dimension: Dimension) -> u64 {
        self.by_kind(Self::KIND[dimension as usize])
    }

    /// The units of a kind of [`UnitsByKind::KIND`].
    #[inline(always)]
    fn by_kind(&self, kind: u8) -> u64 {
        // Masked to the table's length: no bounds check (every kind is
        // below 6).
        self.0[usize::from(kind) & 7]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum DimState {
    /// A bucket: its TAT, and what the specialised grant
    /// ([`LockedState::grant_at_once`]) reads of its rate, precomputed
    /// (the variant is as large as a window's state anyway, so this costs
    /// no byte).
    Gcra {
        tat: u64,
        /// `gcra::increment` of one unit (the emission interval).
        inc: u64,
        /// `gcra::tolerance` at the full capacity.
        tol: u64,
        /// The dimension's kind of unit ([`UnitsByKind::KIND`]).
        kind: u8,
    },
    Window(WindowState),
}

impl DimState {
    /// A bucket of `rate` at `tat`.
    fn gcra(rate: &RateSpec, tat: u64) -> Self {
        DimState::Gcra {
            tat,
            inc: rate.emission_ns,
            tol: gcra::tolerance(rate, rate.capacity),
            kind: UnitsByKind::KIND[rate.dimension as usize],
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

/// The lock-free acquisition; `None` when the word was retired (the limits
/// changed) and the caller must follow [`Fast::moved`].
#[inline(always)]
fn fast_acquire(f: &Fast, now: u64, demand: &Demand) -> Option<Decision> {
    let rate = &f.rate;
    let units = rate.units(demand);
    let cap = RateSpec::scaled(rate.capacity, demand.ceiling_ppm);
    let mut cur = f.tat.load(Ordering::Acquire);
    loop {
        if cur == RETIRED {
            return None;
        }
        let (next, delay) = match gcra::check(rate, cur, now, units, cap) {
            Ok(next) => (next.min(RETIRED - 1), 0),
            Err(wait) if demand.book_within_ns > 0 && wait <= demand.book_within_ns => {
                (gcra::book(rate, cur, now + wait, units).min(RETIRED - 1), wait)
            }
            Err(wait) => {
                if demand.count_denial {
                    f.tally.deny();
                }
                return Some(Decision::Denied(Denial::exhausted(
                    Duration::from_nanos(wait),
                    rate.dimension,
                )));
            }
        };
        if next == cur
            || f.tat
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            f.tally.allow();
            return Some(granted(now, delay, None, demand));
        }
        cur = f.tat.load(Ordering::Acquire);
    }
}

/// [`fast_acquire`] without booking (`demand.book_within_ns == 0`): the
/// grant is plain, so only the verdict comes back. `None`: retired.
#[inline(always)]
fn fast_plain(f: &Fast, now: u64, demand: &Demand) -> Option<Result<(), Denial>> {
    let rate = &f.rate;
    let units = if f.per_request {
        demand.requests
    } else {
        rate.units(demand)
    };
    // `gcra::check` with its increment and tolerance hoisted out of the loop
    // (the tolerance precomputed for the full limit).
    let tol = if demand.ceiling_ppm >= PPM {
        f.tolerance
    } else {
        gcra::tolerance(rate, RateSpec::scaled(rate.capacity, demand.ceiling_ppm))
    };
    let inc = gcra::increment(rate, units);
    let mut cur = f.tat.load(Ordering::Acquire);
    loop {
        if cur == RETIRED {
            return None;
        }
        let new_tat = cur.max(now).saturating_add(inc);
        let next = if units == 0 {
            cur
        } else if new_tat - now <= tol {
            new_tat.min(RETIRED - 1)
        } else {
            if demand.count_denial {
                f.tally.deny();
            }
            let wait = new_tat - tol - now;
            return Some(Err(Denial::exhausted(Duration::from_nanos(wait), rate.dimension)));
        };
        if next == cur {
            f.tally.allow();
            return Some(Ok(()));
        }
        match f
            .tat
            .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                f.tally.allow();
                return Some(Ok(()));
            }
            Err(actual) => cur = actual,
        }
    }
}

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

/// The start time of a booked future slot, when booking is possible and
/// within the caller's horizon.
fn bookable_start(
    spec: &LimitSpec,
    dims: &[DimState],
    now: u64,
    demand: &Demand,
    lease: bool,
) -> Option<u64> {
    if demand.book_within_ns == 0 || lease || !spec.all_gcra() {
        return None;
    }
    let mut start = now;
    for (r, st) in spec.rates.iter().zip(dims.iter()) {
        if let DimState::Gcra { tat, .. } = st {
            let units = r.units(demand);
            if units == 0 {
                continue;
            }
            let cap = RateSpec::scaled(r.capacity, demand.ceiling_ppm);
            start = start.max(gcra::earliest(
                *tat,
                now,
                gcra::increment(r, units),
                gcra::tolerance(r, cap),
            ));
        }
    }
    (start - now <= demand.book_within_ns).then_some(start)
}

impl LockedState {
    fn new(spec: Arc<LimitSpec>, clock: Arc<dyn Clock>) -> Self {
        let cals = vec![CalendarCount::default(); spec.calendars.len()];
        let dims = spec
            .rates
            .iter()
            .map(|r| match r.algorithm {
                Algorithm::Gcra => DimState::gcra(r, 0),
                Algorithm::Window => DimState::Window(WindowState::default()),
            })
            .collect();
        Self {
            spec,
            dims,
            cals,
            clock,
            leases: LeaseSet::default(),
            allowed: 0,
            denied: 0,
            high: 0,
        }
    }

    /// `now`, never before a time this state was already counted at.
    #[inline(always)]
    fn monotonic(&mut self, now: u64) -> u64 {
        self.high = self.high.max(now);
        self.high
    }

    /// Takes over the final state `st` of a retired lock-free dimension
    /// counted with `from`, and its counts, on the dimension they share.
    fn absorb(&mut self, from: &RateSpec, st: DimState, tally: &Tally, now: u64) {
        if let Some(i) = self.spec.rates.iter().position(|r| r.dimension == from.dimension) {
            let to = self.spec.rates[i];
            self.dims[i] = carry_dim(from, st, &to, now);
        }
        self.allowed = tally.allowed();
        self.denied = tally.denied();
    }

    /// Re-lays the state out for `spec`, dimension by dimension; leases and
    /// counters stay as they are.
    fn reshape(&mut self, spec: Arc<LimitSpec>, now: u64) {
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

    /// The wall time (Unix ns) of the backend time `at`.
    #[inline]
    fn wall(&self, at: u64) -> u64 {
        self.clock.unix_nanos_at(at)
    }

    fn acquire(&mut self, now: u64, demand: &Demand) -> Decision {
        let now = self.monotonic(now);
        match self.acquire_verdict(now, demand) {
            Verdict::Plain => granted(now, 0, None, demand),
            Verdict::Granted { delay, lease } => granted(now, delay, lease, demand),
            Verdict::Denied(d) => Decision::Denied(d),
        }
    }

    /// [`LockedState::acquire`] for [`LocalBackend::acquire_now_compact`]: the
    /// specialised grant ([`LockedState::grant_at_once`]) in line, every
    /// other decision out of line.
    #[inline(always)]
    fn acquire_held(&mut self, now: u64, demand: &Demand) -> Held {
        let now = self.monotonic(now);
        match self.grant_at_once(now, demand) {
            Some(lease) => {
                self.allowed += 1;
                match lease {
                    None => Held::Plain { at_ns: now },
                    Some(lease) => Held::Leased { at_ns: now, lease },
                }
            }
            None => self.acquire_held_generic(now, demand),
        }
    }

    /// [`LockedState::acquire_held`] by the generic decision (`now`
    /// already monotonic).
    #[inline(never)]
    fn acquire_held_generic(&mut self, now: u64, demand: &Demand) -> Held {
        let verdict = self.decide_generic(now, demand);
        match self.counted(verdict, demand) {
            Verdict::Plain => Held::Plain { at_ns: now },
            Verdict::Granted {
                delay: 0,
                lease: Some(lease),
            } => Held::Leased { at_ns: now, lease },
            Verdict::Granted { delay, lease } => Held::Full(granted(now, delay, lease, demand)),
            Verdict::Denied(d) => Held::Full(Decision::Denied(d)),
        }
    }

    /// [`LockedState::acquire`] for [`LocalBackend::acquire_now_compact`].
    #[cfg(test)]
    fn acquire_compact(&mut self, now: u64, demand: &Demand) -> CompactDecision {
        self.acquire_held(now, demand).into_compact(demand)
    }

    #[inline(always)]
    fn acquire_verdict(&mut self, now: u64, demand: &Demand) -> Verdict {
        let verdict = self.decide(now, demand);
        self.counted(verdict, demand)
    }

    /// `verdict`, counted as a grant or a denial.
    #[inline(always)]
    fn counted(&mut self, verdict: Verdict, demand: &Demand) -> Verdict {
        match verdict {
            Verdict::Plain | Verdict::Granted { .. } => self.allowed += 1,
            Verdict::Denied(_) if demand.count_denial => self.denied += 1,
            Verdict::Denied(_) => {}
        }
        verdict
    }

    #[inline(always)]
    fn decide(&mut self, now: u64, demand: &Demand) -> Verdict {
        match self.grant_at_once(now, demand) {
            Some(None) => return Verdict::Plain,
            Some(lease @ Some(_)) => return Verdict::Granted { delay: 0, lease },
            None => {}
        }
        self.decide_generic(now, demand)
    }

    /// The common decision, specialised: a demand at the full limit that
    /// every rate dimension and the concurrency limit admit now, on a
    /// resource without calendar dimensions. Granted and committed exactly
    /// as [`LockedState::decide_generic`] would (same checks, same
    /// commits). Buckets (`gcra` limits): one pass that stores each new
    /// TAT at once, put back if a later bucket refuses. Windows: one pass
    /// that checks each dimension and keeps its units, one that counts
    /// them (a window's commit cannot be taken back). The units of
    /// each dimension are read from a table by unit kind instead of
    /// matched per dimension.
    /// `Some(lease)`: granted (the lease taken, if any); `None`: not
    /// answered here — a denial, a booking, a batch caller, a full
    /// concurrency limit (whose expired leases the generic path sweeps),
    /// calendar dimensions — and nothing was counted (a window dimension
    /// may have let go of sub-windows that no longer count at `now`, which
    /// the generic path does first as well).
    #[inline(always)]
    fn grant_at_once(&mut self, now: u64, demand: &Demand) -> Option<Option<LeaseId>> {
        let LockedState {
            spec, dims, leases, ..
        } = self;
        let lease_limit = match (demand.lease, spec.concurrency) {
            (true, Some(limit)) => Some(limit),
            _ => None,
        };
        if demand.ceiling_ppm < PPM
            || !spec.calendars.is_empty()
            || spec.rates.len() > MAX_RATES
            || spec.rates.len() != dims.len()
            || lease_limit.is_some_and(|limit| leases.len() as u64 >= limit)
        {
            return None;
        }
        let units = UnitsByKind::new(demand);
        if spec.limits.algorithm == Algorithm::Gcra {
            // Buckets only (as compiled from these limits): one pass that
            // stores each new TAT at once, put back if a later bucket
            // refuses. A window among them (a spec built by hand) goes to
            // the generic path. `before`: each bucket's TAT before this
            // demand.
            let mut before = [0u64; MAX_RATES];
            for i in 0..spec.rates.len() {
                let DimState::Gcra { tat, inc, tol, kind } = &mut dims[i] else {
                    put_back(&mut dims[..i], &before[..i]);
                    return None;
                };
                // `gcra::check` at the full capacity.
                let n = units.by_kind(*kind);
                before[i] = *tat;
                if n != 0 {
                    let next = (*tat).max(now).saturating_add(n.saturating_mul(*inc));
                    if next - now > *tol {
                        put_back(&mut dims[..i], &before[..i]);
                        return None;
                    }
                    *tat = next;
                }
            }
        } else {
            // Windows only (as compiled from these limits): one pass that
            // checks each dimension and keeps its units, one that counts
            // them (a window's commit cannot be taken back). A bucket among
            // them (a spec built by hand) goes to the generic path; nothing
            // was stored yet.
            let mut keep = [0u64; MAX_RATES];
            for ((r, st), keep) in spec.rates.iter().zip(dims.iter_mut()).zip(keep.iter_mut()) {
                let DimState::Window(w) = st else {
                    return None;
                };
                // `WindowState::check` at the full limit.
                let n = units.of(r.dimension);
                w.evict(r, now);
                if n != 0 && w.sum().saturating_add(n) > r.limit {
                    return None;
                }
                *keep = n;
            }
            for ((r, st), &keep) in spec.rates.iter().zip(dims.iter_mut()).zip(keep.iter()) {
                if let DimState::Window(w) = st {
                    w.commit(r, now, keep);
                }
            }
        }
        Some(lease_limit.map(|_| LeaseId(leases.insert(now + spec.lease_ttl_ns))))
    }

    /// Every decision: any shape, any demand.
    #[inline(always)]
    fn decide_generic(&mut self, now: u64, demand: &Demand) -> Verdict {
        // Disjoint borrows of the fields: the limits are read while the
        // dimensions are updated, with no reference count touched.
        let wall = if self.spec.calendars.is_empty() {
            0
        } else {
            self.wall(now)
        };
        let LockedState {
            spec,
            dims,
            cals,
            leases,
            ..
        } = self;
        let lease = match (demand.lease, spec.concurrency) {
            (true, Some(limit)) => Some(limit),
            _ => None,
        };
        let mut worst: Option<(u64, Dimension)> = None;
        let mut note = |wait: u64, dim: Dimension| {
            if worst.is_none_or(|(w, _)| wait > w) {
                worst = Some((wait, dim));
            }
        };
        for (r, st) in spec.rates.iter().zip(dims.iter_mut()) {
            let units = r.units(demand);
            let res = match st {
                DimState::Gcra { tat, .. } => {
                    let cap = RateSpec::scaled(r.capacity, demand.ceiling_ppm);
                    gcra::check(r, *tat, now, units, cap).map(|_| ())
                }
                DimState::Window(w) => {
                    w.evict(r, now);
                    w.check(r, now, units, RateSpec::scaled(r.limit, demand.ceiling_ppm))
                }
            };
            if let Err(wait) = res {
                note(wait, r.dimension);
            }
        }
        for (c, count) in spec.calendars.iter().zip(cals.iter()) {
            let limit = RateSpec::scaled(c.limit, demand.ceiling_ppm);
            if let Err(wait) = count.check(c.calendar, wall, c.units(demand), limit) {
                note(wait, c.dimension);
            }
        }
        if let Some(limit) = lease {
            if let Err(wait) = leases.check(now, RateSpec::scaled(limit, demand.ceiling_ppm)) {
                note(wait, Dimension::MaxConcurrentRequests);
            }
        }
        let delay = match worst {
            None => 0,
            Some((wait, dimension)) => match bookable_start(spec, dims, now, demand, lease.is_some()) {
                Some(start) => start - now,
                None => return Verdict::Denied(Denial::exhausted(Duration::from_nanos(wait), dimension)),
            },
        };
        let start = now + delay;
        for (r, st) in spec.rates.iter().zip(dims.iter_mut()) {
            let units = r.units(demand);
            match st {
                DimState::Gcra { tat, .. } => *tat = gcra::book(r, *tat, start, units),
                DimState::Window(w) => w.commit(r, now, units),
            }
        }
        for (c, count) in spec.calendars.iter().zip(cals.iter_mut()) {
            count.commit(c.calendar, wall, c.units(demand));
        }
        let lease = lease.map(|_| LeaseId(leases.insert(now + spec.lease_ttl_ns)));
        match (delay, lease) {
            (0, None) => Verdict::Plain,
            (delay, lease) => Verdict::Granted { delay, lease },
        }
    }

    /// Corrects by dimension, against the limits counted now (a grant made
    /// before a change of limits reconciles on the dimensions that remain).
    fn reconcile(&mut self, now: u64, grant: &Grant, actual: &Reserved) {
        let now = self.monotonic(now);
        let before = Demand::from(&grant.reserved);
        let after = Demand::from(actual);
        for (r, st) in self.spec.rates.iter().zip(self.dims.iter_mut()) {
            let delta = UnitsDelta::between(r.units(&before), r.units(&after));
            if delta.is_zero() {
                continue;
            }
            match st {
                DimState::Gcra { tat, .. } => *tat = gcra::adjust(r, *tat, grant.at_ns, delta),
                DimState::Window(w) => w.adjust(r, now, grant.at_ns, delta),
            }
        }
        if self.spec.calendars.is_empty() {
            return;
        }
        // The grant's own period: a grant of an ended period is not counted
        // any more, and its correction must not touch the current one.
        let granted = self.wall(grant.at_ns);
        for (c, count) in self.spec.calendars.iter().zip(self.cals.iter_mut()) {
            let delta = UnitsDelta::between(c.units(&before), c.units(&after));
            if !delta.is_zero() {
                count.adjust(c.calendar, granted, delta);
            }
        }
    }

    fn usage(&mut self, now: u64) -> Usage {
        let now = self.monotonic(now);
        self.leases.sweep(now);
        let mut dimensions = self
            .spec
            .rates
            .iter()
            .zip(self.dims.iter_mut())
            .map(|(r, st)| {
                let used = match st {
                    DimState::Gcra { tat, .. } => gcra::used(r, *tat, now),
                    DimState::Window(w) => {
                        w.evict(r, now);
                        w.sum()
                    }
                };
                (r.dimension, used)
            })
            .collect::<Vec<_>>();
        let wall = self.wall(now);
        let mut resets = Vec::with_capacity(self.cals.len());
        for (c, count) in self.spec.calendars.iter().zip(self.cals.iter()) {
            dimensions.push((c.dimension, count.used(c.calendar, wall)));
            resets.push((c.dimension, c.calendar.next_reset(wall / 1_000_000)));
        }
        Usage {
            dimensions,
            leases: self.leases.len() as u64,
            resets,
        }
    }

    fn at_rest(&mut self, now: u64) -> bool {
        let now = self.monotonic(now);
        self.leases.sweep(now);
        let wall = if self.spec.calendars.is_empty() {
            0
        } else {
            self.wall(now)
        };
        self.leases.is_empty()
            && self
                .spec
                .calendars
                .iter()
                .zip(self.cals.iter())
                .all(|(c, count)| count.is_empty(c.calendar, wall))
            && self
                .spec
                .rates
                .iter()
                .zip(self.dims.iter_mut())
                .all(|(r, st)| match st {
                    DimState::Gcra { tat, .. } => *tat <= now,
                    DimState::Window(w) => {
                        w.evict(r, now);
                        w.is_empty()
                    }
                })
    }
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

    /// The state of a resource whose limits change to `spec`, continuing
    /// `state` (see the module docs).
    fn carry(&self, state: &State, spec: Arc<LimitSpec>, now: u64) -> State {
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
fn carry_into(cell: &State, from: &RateSpec, st: DimState, tally: &Tally, now: u64) {
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
mod tests {
    use super::*;

    /// A caller whose clock read is older than a time the locked state was
    /// already counted at is counted at that time: the window let go of
    /// units at an exact time (its last admission + W), and counting the
    /// late caller at its own reading would put three grants of a limit of
    /// two into one window.
    #[test]
    fn a_stale_clock_read_is_counted_at_the_states_time() {
        let spec = Limits::default().requests_per_minute(2).compile().unwrap();
        let w = spec.rates[0].window_ns;
        let mut st = LockedState::new(Arc::new(spec), Arc::new(MonotonicClock::new()));
        let one = Demand::default();
        let granted_at = |q: CompactDecision| match q {
            CompactDecision::Granted { at_ns } => Some(at_ns),
            _ => None,
        };
        assert_eq!(granted_at(st.acquire_compact(20, &one)), Some(20));
        assert_eq!(granted_at(st.acquire_compact(20, &one)), Some(20));
        assert_eq!(st.usage(20 + w).dimensions[0].1, 0, "both left at last + W");
        // Read its clock just before that, got the lock just after.
        let stale = 20 + w - 1;
        assert_eq!(granted_at(st.acquire_compact(stale, &one)), Some(20 + w));
    }
    use crate::clock::ManualClock;
    use crate::limits::Limits;
    use futures::FutureExt;

    fn backend() -> (MemoryBackend, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        (MemoryBackend::with_clock(clock.clone()), clock)
    }

    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        f.now_or_never().expect("memory backend is synchronous")
    }

    #[test]
    fn denial_on_one_dimension_consumes_nothing_on_others() {
        let (b, _) = backend();
        let spec = Arc::new(
            Limits::default()
                .requests_per_minute(100)
                .tokens_per_minute(1_000)
                .max_concurrent_requests(10)
                .compile()
                .unwrap(),
        );
        let h = b.attach("r", spec).unwrap();
        let big = Demand {
            input_tokens: 900,
            ..Demand::default()
        };
        assert!(matches!(now(b.acquire(&h, &big)).unwrap(), Decision::Granted(_)));
        let too_much = Demand {
            input_tokens: 200,
            ..Demand::default()
        };
        let d = now(b.acquire(&h, &too_much)).unwrap();
        assert!(matches!(
            d,
            Decision::Denied(Denial {
                dimension: Dimension::TokensPerMinute,
                ..
            })
        ));
        let u = now(b.usage(&h)).unwrap();
        assert_eq!(
            u.dimensions,
            vec![
                (Dimension::RequestsPerMinute, 1),
                (Dimension::TokensPerMinute, 900)
            ]
        );
        assert_eq!(u.leases, 1);
    }

    /// Threads racing on the lock-free layouts (`gcra` word, `window`
    /// budget word) at one instant: exactly the limit is admitted, and the
    /// striped counts and the usage are exact.
    #[test]
    fn lock_free_layouts_count_exactly_under_threads() {
        const LIMIT: u64 = 5_000;
        const THREADS: u64 = 4;
        const EACH: u64 = 3_000;
        for limits in [
            Limits::default().requests_per_minute(LIMIT),
            Limits::default().requests_per_minute(LIMIT).gcra(None),
        ] {
            let (b, _) = backend();
            let h = b.attach("r", Arc::new(limits.compile().unwrap())).unwrap();
            let granted: u64 = std::thread::scope(|s| {
                let run = || {
                    s.spawn(|| {
                        (0..EACH)
                            .filter(|_| matches!(b.acquire_now(&h, &Demand::default()), Decision::Granted(_)))
                            .count() as u64
                    })
                };
                let threads: Vec<_> = (0..THREADS).map(|_| run()).collect();
                threads.into_iter().map(|t| t.join().expect("thread")).sum()
            });
            assert_eq!(granted, LIMIT, "{limits:?}");
            let c = b.counts(&h);
            assert_eq!(
                (c.allowed, c.denied),
                (LIMIT, THREADS * EACH - LIMIT),
                "{limits:?}"
            );
            let u = now(b.usage(&h)).unwrap();
            assert_eq!(
                u.dimensions,
                vec![(Dimension::RequestsPerMinute, LIMIT)],
                "{limits:?}"
            );
        }
    }

    /// Threads acquiring on the lock-free `window` while another moves the
    /// clock across many sub-windows and windows: no interval of the
    /// window's length ever holds more than the limit (by the grants' own
    /// times), and the counts are exact.
    #[test]
    fn lock_free_window_never_over_admits_while_time_moves() {
        const LIMIT: u64 = 200;
        let (b, clock) = backend();
        let spec = Limits::default().requests_per_second(LIMIT).compile().unwrap();
        let (w, g) = (spec.rates[0].window_ns, spec.rates[0].sub_window_ns);
        let h = b.attach("r", Arc::new(spec)).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        let tries = AtomicU64::new(0);
        let (mut times, attempts) = std::thread::scope(|s| {
            let ticker = s.spawn(|| {
                for i in 0..1_500u64 {
                    // Each step waits for a few acquisitions, so time and
                    // traffic interleave however the threads are scheduled.
                    let seen = tries.load(Ordering::SeqCst);
                    while tries.load(Ordering::SeqCst) < seen + 10 {
                        std::thread::yield_now();
                    }
                    clock.advance(Duration::from_nanos((i * 7_919) % (g / 2)));
                }
                done.store(true, Ordering::SeqCst);
            });
            let run = || {
                s.spawn(|| {
                    let (mut at, mut n) = (Vec::new(), 0u64);
                    while !done.load(Ordering::SeqCst) {
                        n += 1;
                        tries.fetch_add(1, Ordering::SeqCst);
                        if let Decision::Granted(gr) = b.acquire_now(&h, &Demand::default()) {
                            at.push(gr.at_ns);
                        }
                    }
                    (at, n)
                })
            };
            let threads: Vec<_> = (0..3).map(|_| run()).collect();
            ticker.join().expect("ticker");
            threads.into_iter().map(|t| t.join().expect("thread")).fold(
                (Vec::new(), 0),
                |(mut all, n), (at, m)| {
                    all.extend(at);
                    (all, n + m)
                },
            )
        });
        times.sort_unstable();
        let mut lo = 0;
        for hi in 0..times.len() {
            while times[hi] - times[lo] >= w {
                lo += 1;
            }
            assert!(
                (hi - lo + 1) as u64 <= LIMIT,
                "{} grants within {w} ns",
                hi - lo + 1
            );
        }
        let c = b.counts(&h);
        assert_eq!(c.allowed, times.len() as u64);
        assert_eq!(c.allowed + c.denied, attempts);
        assert!(
            c.allowed > LIMIT,
            "time moved over several windows: {}",
            c.allowed
        );
    }

    proptest::proptest! {
        /// The lock-free `gcra` path (its arithmetic hoisted and
        /// precomputed) decides exactly as `gcra::check`, waits included,
        /// for any demand, ceiling and history.
        #[test]
        fn lock_free_gcra_is_gcra_check(
            n in 1u64..1_000,
            burst in 1u64..20,
            steps in proptest::collection::vec((0u64..50_000_000, 0u64..4, 0u32..2_000_000), 1..100),
        ) {
            let spec = Limits::default().requests_per_second(n).gcra(Some(burst)).compile().unwrap();
            let rate = spec.rates[0];
            let f = Fast::new(rate);
            let mut now = 1_000_000_000u64;
            let mut tat = 0u64;
            for (gap, requests, ppm) in steps {
                now += gap;
                let demand = Demand { requests, ceiling_ppm: ppm.min(PPM), ..Demand::default() };
                let cap = RateSpec::scaled(rate.capacity, demand.ceiling_ppm);
                let want = gcra::check(&rate, tat, now, requests, cap);
                let got = fast_plain(&f, now, &demand).expect("not retired");
                match want {
                    Ok(next) => {
                        proptest::prop_assert!(got.is_ok());
                        tat = next;
                    }
                    Err(wait) => proptest::prop_assert_eq!(got.map_err(|d| d.wait), Err(Duration::from_nanos(wait))),
                }
                proptest::prop_assert_eq!(f.tat.load(Ordering::Relaxed), tat);
            }
        }
    }

    /// What a resource's state weighs, by layout: the handle is a tag and a
    /// pointer, each state only what its layout needs (cold counters). A
    /// regression fails here; `--nocapture` prints the table.
    #[test]
    fn states_are_sized_by_their_layout() {
        use std::mem::size_of;
        println!(
            "size_of: MemoryHandle {}, Fast {}, FastWindow {}, LockedState {}, WindowState {}, RateSpec {}, Tally {}",
            size_of::<MemoryHandle>(),
            size_of::<Fast>(),
            size_of::<FastWindow>(),
            size_of::<LockedState>(),
            size_of::<WindowState>(),
            size_of::<RateSpec>(),
            size_of::<Tally>(),
        );
        assert!(size_of::<MemoryHandle>() <= 16);
        // A bucket's precomputed rate fits beside its TAT in the space a
        // window's state takes anyway.
        assert!(size_of::<DimState>() <= size_of::<WindowState>());
        assert!(size_of::<Fast>() <= 128);
        assert!(size_of::<FastWindow>() <= 224);
    }

    #[test]
    fn gcra_booking_returns_the_exact_delay() {
        let (b, _) = backend();
        let spec = Arc::new(
            Limits::default()
                .requests_per_second(10)
                .gcra(Some(1))
                .compile()
                .unwrap(),
        );
        let h = b.attach("r", spec).unwrap();
        let book = Demand {
            book_within_ns: 1_000_000_000,
            ..Demand::default()
        };
        let delays: Vec<_> = (0..4)
            .map(|_| match now(b.acquire(&h, &book)).unwrap() {
                Decision::Granted(g) => g.delay(),
                Decision::Denied(d) => panic!("denied {d:?}"),
            })
            .collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(delays, vec![ms(0), ms(100), ms(200), ms(300)]);
    }
}

#[cfg(test)]
mod calendar_tests;

#[cfg(test)]
mod shape_tests;

#[cfg(test)]
mod reconcile_tests;
