//! The locked layout ([`LockedState`]): every dimension of a resource,
//! its leases and its counts behind one short mutex, which is what makes a
//! multi-dimension acquisition all-or-nothing. Its decision has two twins:
//! [`LockedState::decide_generic`] decides any shape and any demand, and
//! [`LockedState::grant_at_once`], its fast twin, the common demand in one
//! pass; `shape_tests` holds them to the same answers and the same state.

use super::{granted, Held};
use crate::algo::{calendar::CalendarCount, gcra, leases::LeaseSet, window::WindowState};
#[cfg(test)]
use crate::backend::CompactDecision;
use crate::backend::{Decision, Denial, Grant, LeaseId, Reserved, Usage};
use crate::clock::Clock;
use crate::limits::{Algorithm, Demand, Dimension, LimitSpec, RateSpec};
use crate::ppm::PPM;
use crate::units::UnitsDelta;
use std::sync::Arc;
use std::time::Duration;

/// A resource counted under one lock: every dimension, the leases and the
/// allowed/denied counts.
#[derive(Debug)]
pub(super) struct LockedState {
    /// The limits this state is counted against now.
    pub(super) spec: Arc<LimitSpec>,
    pub(super) dims: Vec<DimState>,
    /// One count per calendar dimension, in the order of `spec.calendars`.
    pub(super) cals: Vec<CalendarCount>,
    /// The backend's clock, for the wall time of calendar periods (read
    /// only when the resource has a calendar dimension).
    pub(super) clock: Arc<dyn Clock>,
    pub(super) leases: LeaseSet,
    pub(super) allowed: u64,
    pub(super) denied: u64,
    /// The latest time this state was counted at: a caller whose clock read
    /// is older (it raced one that got the lock first) is counted at this
    /// time instead, since a window's sub-windows leave at exact times and
    /// the state may already have let go of what still counted then.
    pub(super) high: u64,
}

/// What [`LockedState::decide`] did, before it is dressed as a [`Decision`].
pub(super) enum Verdict {
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
            kind[d.index()] = match d {
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
        self.by_kind(Self::KIND[dimension.index()])
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
pub(super) enum DimState {
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
    pub(super) fn gcra(rate: &RateSpec, tat: u64) -> Self {
        DimState::Gcra {
            tat,
            inc: rate.emission_ns,
            tol: gcra::tolerance(rate, rate.capacity),
            kind: UnitsByKind::KIND[rate.dimension.index()],
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
    pub(super) fn new(spec: Arc<LimitSpec>, clock: Arc<dyn Clock>) -> Self {
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
    pub(super) fn monotonic(&mut self, now: u64) -> u64 {
        self.high = self.high.max(now);
        self.high
    }

    /// The wall time (Unix ns) of the backend time `at`.
    #[inline]
    pub(super) fn wall(&self, at: u64) -> u64 {
        self.clock.unix_nanos_at(at)
    }

    pub(super) fn acquire(&mut self, now: u64, demand: &Demand) -> Decision {
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
    pub(super) fn acquire_held(&mut self, now: u64, demand: &Demand) -> Held {
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
    pub(super) fn acquire_held_generic(&mut self, now: u64, demand: &Demand) -> Held {
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
    pub(super) fn acquire_compact(&mut self, now: u64, demand: &Demand) -> CompactDecision {
        self.acquire_held(now, demand).into_compact(demand)
    }

    #[inline(always)]
    pub(super) fn acquire_verdict(&mut self, now: u64, demand: &Demand) -> Verdict {
        let verdict = self.decide(now, demand);
        self.counted(verdict, demand)
    }

    /// `verdict`, counted as a grant or a denial.
    #[inline(always)]
    pub(super) fn counted(&mut self, verdict: Verdict, demand: &Demand) -> Verdict {
        match verdict {
            Verdict::Plain | Verdict::Granted { .. } => self.allowed += 1,
            Verdict::Denied(_) if demand.count_denial => self.denied += 1,
            Verdict::Denied(_) => {}
        }
        verdict
    }

    #[inline(always)]
    pub(super) fn decide(&mut self, now: u64, demand: &Demand) -> Verdict {
        match self.grant_at_once(now, demand) {
            Some(None) => return Verdict::Plain,
            Some(lease @ Some(_)) => return Verdict::Granted { delay: 0, lease },
            None => {}
        }
        self.decide_generic(now, demand)
    }

    /// The fast twin of [`LockedState::decide_generic`]: the common
    /// decision, specialised — a demand at the full limit that
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
    /// the generic path does first as well). Measured by
    /// `benches/callgrind-core.sh` (`multi_*`). Equivalence:
    /// `shape_tests::the_specialised_grant_agrees_with_the_generic_decision`.
    #[inline(always)]
    pub(super) fn grant_at_once(&mut self, now: u64, demand: &Demand) -> Option<Option<LeaseId>> {
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
            || lease_limit.is_some_and(|limit| u64::try_from(leases.len()).unwrap_or(u64::MAX) >= limit)
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
                    let Ok(next) = gcra::admit(*tat, now, n.saturating_mul(*inc), *tol) else {
                        put_back(&mut dims[..i], &before[..i]);
                        return None;
                    };
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

    /// Every decision: any shape, any demand. The general twin of
    /// [`LockedState::grant_at_once`] (equivalence:
    /// `shape_tests::the_specialised_grant_agrees_with_the_generic_decision`).
    #[inline(always)]
    pub(super) fn decide_generic(&mut self, now: u64, demand: &Demand) -> Verdict {
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
    pub(super) fn reconcile(&mut self, now: u64, grant: &Grant, actual: &Reserved) {
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

    pub(super) fn usage(&mut self, now: u64) -> Usage {
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
            leases: u64::try_from(self.leases.len()).unwrap_or(u64::MAX),
            resets,
        }
    }

    pub(super) fn at_rest(&mut self, now: u64) -> bool {
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
