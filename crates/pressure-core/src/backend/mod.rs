//! The [`Backend`] trait: the only place limiter state lives.
//!
//! The broker keeps configuration, queues and counters of its own process;
//! everything that must be shared to be correct (windows, buckets, leases)
//! is behind these few atomic operations. [`MemoryBackend`] holds it in this
//! process; `pressure-redis` holds it in Redis for a fleet. Both pass the
//! same contract suite (`pressure_core::contract`, feature `contract`).

mod memory;

pub use memory::{MemoryBackend, MemoryHandle};

use crate::limits::{Demand, Dimension, LimitSpec};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Identifies one concurrency lease within its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseId(pub u64);

/// What a granted acquisition reserved, so it can be reconciled, renewed and
/// released later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Backend time (nanoseconds) at which the units were counted; the window
    /// algorithm reconciles against the sub-window of this instant.
    pub at_ns: u64,
    /// Nanoseconds the caller must wait before using a booked future slot
    /// (`gcra` booking); zero for an immediate grant.
    pub delay_ns: u64,
    /// The concurrency lease taken, if the resource limits concurrency.
    pub lease: Option<LeaseId>,
    /// Units reserved.
    pub reserved: Reserved,
    /// The grant came from a backend's local fallback (its shared store was
    /// unreachable), so release and reconcile go to the fallback too.
    pub fallback: bool,
}

/// Units reserved by a grant (what reconcile corrects).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reserved {
    /// Requests.
    pub requests: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost in micro-USD (the `costMicroUsdPer*` dimensions).
    pub cost_micro_usd: u64,
}

impl From<&Demand> for Reserved {
    fn from(d: &Demand) -> Self {
        Self {
            requests: d.requests,
            input_tokens: d.input_tokens,
            output_tokens: d.output_tokens,
            cost_micro_usd: d.cost_micro_usd,
        }
    }
}

impl From<&Reserved> for Demand {
    /// The units of a reservation as a demand, for the rate arithmetic of
    /// reconcile (other fields at their defaults).
    fn from(r: &Reserved) -> Self {
        Self {
            requests: r.requests,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cost_micro_usd: r.cost_micro_usd,
            ..Demand::default()
        }
    }
}

/// A refusal: nothing was consumed on any dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denial {
    /// Earliest time from now at which the same demand could fit (the
    /// maximum over the failing dimensions; an estimate for concurrency and
    /// for an outage).
    pub wait: Duration,
    /// The dimension that needed the longest wait (for
    /// [`DenialCause::Unavailable`], the resource's first dimension: no
    /// dimension was checked).
    pub dimension: Dimension,
    /// Whether a limit refused, or the backend could not decide and its
    /// failure mode refused. A gateway answers the first with `429`, the
    /// second with `503 limiter_unavailable`: an outage is not "exhausted".
    pub cause: DenialCause,
}

/// Why a [`Denial`] happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DenialCause {
    /// A limit is exhausted: the demand does not fit now.
    #[default]
    Exhausted,
    /// The backend's store could not be asked (down, too slow) and its
    /// failure mode refuses (`closed`); `wait` is when to try again.
    Unavailable,
}

impl Denial {
    /// A refusal by a limit on `dimension`, fitting again after `wait`.
    #[inline]
    pub fn exhausted(wait: Duration, dimension: Dimension) -> Self {
        Self {
            wait,
            dimension,
            cause: DenialCause::Exhausted,
        }
    }

    /// A refusal because the store could not be asked; retry after `wait`.
    pub fn unavailable(wait: Duration, dimension: Dimension) -> Self {
        Self {
            wait,
            dimension,
            cause: DenialCause::Unavailable,
        }
    }

    /// Whether the store was unavailable (not a limit) — see [`DenialCause`].
    #[inline]
    pub fn is_unavailable(&self) -> bool {
        self.cause == DenialCause::Unavailable
    }
}

impl Grant {
    /// How long the caller must wait before using a booked future slot.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns)
    }
}

impl Denial {
    /// Whether `wait` is a lower bound (rate dimensions: nothing can fit
    /// sooner) rather than an estimate (concurrency: a holder may release at
    /// any moment; an outage: the store may answer at any moment). Only a
    /// lower bound justifies refusing a caller early.
    pub fn is_exact(&self) -> bool {
        self.cause == DenialCause::Exhausted && self.dimension != Dimension::MaxConcurrentRequests
    }
}

/// The outcome of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// All dimensions reserved.
    Granted(Grant),
    /// Nothing reserved.
    Denied(Denial),
}

/// The outcome of one nested acquisition ([`Backend::acquire_nested`]):
/// every level charged, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NestedDecision {
    /// Every level reserved its demand: one grant per level, in the order
    /// of the levels.
    Granted(Vec<Grant>),
    /// Nothing was reserved on any level; `level` indexes the levels asked
    /// for and is the first one (innermost first) that refused.
    Denied {
        /// The refusing level.
        level: usize,
        /// Its refusal.
        denial: Denial,
    },
}

/// Current usage of one resource, as the backend counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Units counted per rate dimension right now; for a calendar
    /// dimension, the units counted in the current period.
    pub dimensions: Vec<(Dimension, u64)>,
    /// Live concurrency leases.
    pub leases: u64,
    /// Per calendar dimension, when its count resets: the end of the
    /// current period, in Unix milliseconds (UTC) by the backend's wall
    /// time (Redis: the server's), for "spend, budget, resets at".
    pub resets: Vec<(Dimension, u64)>,
}

/// Acquisitions this process made on one resource, as its backend counted
/// them (on the hot path, inside the same atomic step where it can).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Granted acquisitions.
    pub allowed: u64,
    /// Denied acquisitions whose demand asked to be counted.
    pub denied: u64,
}

/// A failure of the state store itself (not a denial).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The store did not answer within its timeout.
    #[error("backend timed out after {0:?}")]
    Timeout(Duration),
    /// The store is unreachable or answered with an error.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The store cannot represent these limits (e.g. a rate finer than its
    /// clock's resolution).
    #[error("backend cannot hold these limits: {0}")]
    Unsupported(String),
    /// The store answered something this client cannot understand.
    #[error("backend protocol error: {0}")]
    Protocol(String),
}

/// Where limiter state lives. Every operation is atomic for one resource:
/// `acquire` reserves all dimensions of a demand or none.
///
/// Implementations are used through static dispatch (`ResourceBroker<B>`), so
/// the in-memory fast path costs no allocation or virtual call.
pub trait Backend: Send + Sync + Sized + std::fmt::Debug + 'static {
    /// Per-resource state or addressing, made once at registration so the hot
    /// path needs no second lookup.
    type Handle: Send + Sync + 'static;

    /// Prepares `resource` with `spec`. Called once per registration.
    fn attach(&self, resource: &str, spec: Arc<LimitSpec>) -> Result<Self::Handle, BackendError>;

    /// The handle of `resource` after its limits changed to `spec`,
    /// continuing the state behind `old`: current usage (window
    /// sub-windows, bucket levels, live leases) and the allowed/denied
    /// counts carry over, and new acquisitions count against `spec`.
    ///
    /// `old` stays usable: permits granted through it still release and
    /// reconcile, and an acquisition that raced with the change through it
    /// must count on the continued state (never on a layout that no longer
    /// matches, never a panic). A store-backed backend whose state is keyed
    /// by resource and dimension usually just attaches again.
    fn reattach(
        &self,
        resource: &str,
        old: &Self::Handle,
        spec: Arc<LimitSpec>,
    ) -> Result<Self::Handle, BackendError>;

    /// Prepares `resource` as a member of `group` (a hierarchy of budgets
    /// charged together, see [`Backend::acquire_nested`]): a store that
    /// shards by key keeps every resource of one group together, so a
    /// nested acquisition over them is one atomic step. The default (a
    /// store in this process) ignores the group.
    fn attach_grouped(
        &self,
        resource: &str,
        group: &str,
        spec: Arc<LimitSpec>,
    ) -> Result<Self::Handle, BackendError> {
        let _ = group;
        self.attach(resource, spec)
    }

    /// Whether `handle` was attached in `group` ([`Backend::attach_grouped`]);
    /// a backend that ignores groups answers `true`. The broker attaches a
    /// resource again when it is asked for in another group (a tenant
    /// moved to another parent).
    fn in_group(&self, handle: &Self::Handle, group: &str) -> bool {
        let _ = (handle, group);
        true
    }

    /// Checks and reserves the demand of every level, all or nothing, in
    /// one atomic step: either every level is charged (one grant each, in
    /// order) or none is and the first refusing level is named. Counted as
    /// a grant on every level, or as a denial on the refusing level only
    /// (when its demand asks to be counted). Never books a future slot
    /// (`book_within_ns` is ignored). A resource that appears twice is
    /// charged twice. A store that cannot reach every level in one step
    /// (levels in different Redis Cluster slots) answers
    /// [`BackendError::Unsupported`] and charges nothing.
    fn acquire_nested(
        &self,
        levels: &[(&Self::Handle, &Demand)],
    ) -> impl Future<Output = Result<NestedDecision, BackendError>> + Send;

    /// Checks and reserves every dimension of `demand`, or nothing, and
    /// answers now (without awaiting) when the backend's state is local (in
    /// this process); `None` means "use [`Backend::acquire`]".
    ///
    /// Naming, the same on every entry point: `now` answers without
    /// awaiting; `_if_local` may decline (`None`) where the state is not in
    /// this process, while the plain `_now` form requires a
    /// [`LocalBackend`]; `_compact` answers as a [`CompactDecision`].
    #[inline]
    fn acquire_now_if_local(
        &self,
        handle: &Self::Handle,
        demand: &Demand,
    ) -> Option<Result<Decision, BackendError>> {
        let _ = (handle, demand);
        None
    }

    /// [`Backend::acquire_now_if_local`] answered as a [`CompactDecision`] (see
    /// [`LocalBackend::acquire_now_compact`]) for the broker's hot path, so a plain
    /// grant is built where the caller keeps it. The default classifies
    /// `acquire_now_if_local`'s decision; a backend with in-process state overrides
    /// it to skip building a `Grant` it would not need.
    #[inline]
    fn acquire_now_compact_if_local(
        &self,
        handle: &Self::Handle,
        demand: &Demand,
    ) -> Option<Result<CompactDecision, BackendError>> {
        self.acquire_now_if_local(handle, demand)
            .map(|r| r.map(|d| CompactDecision::of(d, demand)))
    }

    /// Acquisitions counted for this resource by this process.
    fn counts(&self, handle: &Self::Handle) -> Counts;

    /// Checks and reserves every dimension of `demand`, or nothing.
    fn acquire(
        &self,
        handle: &Self::Handle,
        demand: &Demand,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send;

    /// Gives back what `grant` holds (its lease). Idempotent per grant.
    fn release(
        &self,
        handle: &Self::Handle,
        grant: &Grant,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Releases without waiting (used from `Drop`): synchronous where the
    /// store is local, a background task otherwise. A release that cannot be
    /// delivered is recovered by the lease TTL.
    fn release_detached(&self, handle: &Self::Handle, grant: Grant);

    /// Extends the lease of `grant` by the resource's TTL; `Ok(false)` if it
    /// was already lost (expired and reclaimed) or there is none.
    fn renew(
        &self,
        handle: &Self::Handle,
        grant: &Grant,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// [`Backend::renew`] for many leases of one resource at once, as the
    /// broker's renewal task batches them: one answer per grant, in order.
    /// The default renews one by one; a remote store should override it with
    /// one round trip.
    fn renew_many(
        &self,
        handle: &Self::Handle,
        grants: &[Grant],
    ) -> impl Future<Output = Result<Vec<bool>, BackendError>> + Send {
        async move {
            let mut out = Vec::with_capacity(grants.len());
            for g in grants {
                out.push(self.renew(handle, g).await?);
            }
            Ok(out)
        }
    }

    /// Corrects the units reserved by `grant` to `actual`.
    fn reconcile(
        &self,
        handle: &Self::Handle,
        grant: &Grant,
        actual: &Reserved,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Reads the resource's current usage.
    fn usage(&self, handle: &Self::Handle) -> impl Future<Output = Result<Usage, BackendError>> + Send;

    /// Whether the resource's state holds nothing any more (every window
    /// drained, bucket full, no lease), so evicting it loses no accuracy.
    fn at_rest(&self, handle: &Self::Handle) -> bool;

    /// The [`MemoryBackend`] and its state behind `handle`, when this
    /// resource is counted in this process by it (the backend itself, or
    /// one that wraps it or picks it at run time). The broker then takes
    /// the backend's own lease records as its book of leases to renew
    /// instead of recording each lease a second time: one lock less per
    /// acquisition and per release. Its grants are then the
    /// [`MemoryBackend`]'s own — exactly the demand reserved, never a
    /// fallback — which the broker relies on to build their permits from
    /// the few fields that vary. `None` (the default): the broker
    /// records each lease and renews them with [`Backend::renew_many`].
    #[inline(always)]
    fn in_process<'a>(&'a self, handle: &'a Self::Handle) -> Option<(&'a MemoryBackend, &'a MemoryHandle)> {
        let _ = handle;
        None
    }
}

/// A backend whose state is local (in this process), so it always answers
/// now, without awaiting: the broker offers `try_acquire_now` and
/// `check_now` on it — usable where no `.await` is possible, and the
/// cheapest check there is.
pub trait LocalBackend: Backend {
    /// [`Backend::acquire`] answered now, without a future.
    fn acquire_now(&self, handle: &Self::Handle, demand: &Demand) -> Decision;

    /// [`LocalBackend::acquire_now`] for the broker's hot path: the same
    /// reservation, answered as [`CompactDecision::Granted`] when the grant is
    /// *plain* — immediate, no lease, not a fallback, reserving exactly the
    /// demand — so the caller builds the [`Grant`] where it keeps it (a
    /// decision copied through memory costs more than the decision itself).
    /// The default asks `acquire_now` and classifies its answer; a backend
    /// overrides it to skip building a `Grant` it would not need.
    #[inline]
    fn acquire_now_compact(&self, handle: &Self::Handle, demand: &Demand) -> CompactDecision {
        CompactDecision::of(self.acquire_now(handle, demand), demand)
    }
}

/// The answer of [`LocalBackend::acquire_now_compact`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactDecision {
    /// Granted, plainly: the grant is `Grant { at_ns, delay_ns: 0, lease:
    /// None, reserved: Reserved::from(demand), fallback: false }`.
    Granted {
        /// Backend time at which the units were counted ([`Grant::at_ns`]).
        at_ns: u64,
    },
    /// Any other decision (a denial, a lease, a booked slot, a fallback).
    Full(Decision),
}

impl CompactDecision {
    /// Classifies a full decision made for `demand`.
    #[inline]
    pub fn of(decision: Decision, demand: &Demand) -> Self {
        match decision {
            Decision::Granted(g)
                if g.delay_ns == 0
                    && g.lease.is_none()
                    && !g.fallback
                    && g.reserved == Reserved::from(demand) =>
            {
                CompactDecision::Granted { at_ns: g.at_ns }
            }
            d => CompactDecision::Full(d),
        }
    }

    /// The full decision for `demand`.
    #[inline]
    pub fn into_decision(self, demand: &Demand) -> Decision {
        match self {
            CompactDecision::Granted { at_ns } => Decision::Granted(Grant::plain(at_ns, demand)),
            CompactDecision::Full(d) => d,
        }
    }
}

impl Grant {
    /// An immediate grant of exactly `demand` at `at_ns`, without a lease.
    #[inline(always)]
    pub fn plain(at_ns: u64, demand: &Demand) -> Self {
        Self {
            at_ns,
            delay_ns: 0,
            lease: None,
            reserved: Reserved::from(demand),
            fallback: false,
        }
    }
}
