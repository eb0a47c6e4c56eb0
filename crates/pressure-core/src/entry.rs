//! One registered resource as the broker holds it: its compiled limits, the
//! backend's handle, this process's counters and, for `queue` resources, the
//! wait queue. [`ResourceHandle`] is the public, pre-resolved reference.
//!
//! An [`Entry`] is one *version* of a resource: its limits never change.
//! When they do ([`crate::ResourceBroker::set_limits`]) the broker makes a
//! new version that continues the backend state and shares the counters and
//! the queue, and links the old one to it (`next`). Acquisitions always run
//! on the newest version (one atomic load to check), so handles obtained
//! before the change count against the new limits; permits stay on the
//! version that granted them, whose backend handle still releases them.

use crate::acquisition::{AcquireOptions, Acquisition, Permit};
use crate::backend::{Backend, BackendError, Decision, Denial, Grant, QuickDecision, SyncBackend};
use crate::error::Error;
use crate::limits::{Demand, LimitSpec, PPM};
use crate::queue::Queue;
use crate::renewal::{LeaseBook, Renewer};
use crate::stats::ResourceKind;
use crate::striped::Gauge;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Counters of this process for one resource, besides the grants and
/// denials its backend counts on the hot path.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Queue requests refused (full, timed out) and `acquire_within` give-ups.
    pub(crate) rejected: AtomicU64,
    /// Live permits holding a concurrency lease (per-thread stripes: no
    /// locked increment when a permit is taken or dropped).
    pub(crate) active: Gauge,
    pub(crate) backend_errors: AtomicU64,
}

/// The largest demand that fits every dimension of a spec at once, by
/// kind of unit, for the whole limit (interactive priority): a demand within
/// both needs no per-dimension size check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fits {
    /// Least `max_demand` over the request dimensions (`u64::MAX`: none).
    requests: u64,
    /// Least `max_demand` over the token dimensions (`u64::MAX`: none); a
    /// demand whose input plus output tokens fit it fits every one of them.
    tokens: u64,
}

impl Fits {
    pub(crate) fn of(spec: &LimitSpec) -> Self {
        let mut fits = Self {
            requests: u64::MAX,
            tokens: u64::MAX,
        };
        for r in &spec.rates {
            let slot = if r.dimension.counts_requests() {
                &mut fits.requests
            } else {
                &mut fits.tokens
            };
            *slot = (*slot).min(r.max_demand());
        }
        fits
    }

    /// Whether `demand` surely fits every dimension (`false`: ask
    /// [`LimitSpec::oversized`]).
    #[inline(always)]
    fn surely(&self, demand: &Demand) -> bool {
        demand.ceiling_ppm >= PPM
            && demand.requests <= self.requests
            && demand.input_tokens.saturating_add(demand.output_tokens) <= self.tokens
    }
}

pub(crate) struct Entry<B: Backend> {
    pub(crate) id: Arc<str>,
    pub(crate) kind: ResourceKind,
    pub(crate) spec: Arc<LimitSpec>,
    /// What fits `spec` for sure, so the common demand skips the size check.
    pub(crate) fits: Fits,
    pub(crate) backend: Arc<B>,
    pub(crate) handle: B::Handle,
    /// Shared by every version of the resource.
    pub(crate) counters: Arc<Counters>,
    /// Shared by every version of the resource.
    pub(crate) queue: Option<Arc<Queue<B>>>,
    /// Share of each limit batch callers may fill, parts per million.
    pub(crate) batch_ceiling_ppm: u32,
    pub(crate) lazy: bool,
    /// Whether permits keep a reference to the entry (see
    /// `LimitSpec::permits_hold_state`).
    pub(crate) stateful: bool,
    /// Broker-clock nanoseconds of the last use (lazy resources only).
    pub(crate) last_used: AtomicU64,
    /// The version that replaced this one when the limits changed.
    pub(crate) next: OnceLock<Arc<Entry<B>>>,
    /// The broker's lease renewer.
    pub(crate) renewer: Arc<Renewer<B>>,
    /// Live leases granted by this version, renewed by the renewer.
    pub(crate) leases: LeaseBook,
}

impl<B: Backend> std::fmt::Debug for Entry<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Entry<B> {
    /// The newest version of this resource (itself unless its limits
    /// changed since it was looked up).
    #[inline]
    pub(crate) fn current(self: &Arc<Self>) -> &Arc<Self> {
        let mut e = self;
        while let Some(next) = e.next.get() {
            e = next;
        }
        e
    }

    /// The backend demand for `opts`.
    #[inline]
    pub(crate) fn demand(&self, opts: &AcquireOptions) -> Demand {
        Demand {
            requests: opts.requests,
            input_tokens: opts.input_tokens,
            output_tokens: opts.output_tokens,
            lease: opts.lease,
            ceiling_ppm: match opts.priority {
                crate::Priority::Interactive => PPM,
                crate::Priority::Batch => self.batch_ceiling_ppm,
            },
            book_within_ns: 0,
            count_denial: true,
        }
    }

    /// Refuses a demand that can never fit.
    #[inline(always)]
    pub(crate) fn check_size(&self, demand: &Demand) -> Result<(), Error> {
        if self.fits.surely(demand) {
            return Ok(());
        }
        self.check_size_slow(demand)
    }

    #[inline(never)]
    fn check_size_slow(&self, demand: &Demand) -> Result<(), Error> {
        match self.spec.oversized(demand) {
            None => Ok(()),
            Some((dimension, demand, max)) => Err(Error::DemandTooLarge {
                resource: self.id.to_string(),
                dimension,
                demand,
                max,
            }),
        }
    }

    /// One backend attempt on the newest version, answered without awaiting
    /// when the backend can.
    #[inline]
    pub(crate) async fn attempt(self: &Arc<Self>, demand: &Demand) -> Result<Acquisition<B>, Error> {
        let e = self.current();
        let decision = match e.backend.acquire_now(&e.handle, demand) {
            Some(d) => d,
            None => e.backend.acquire(&e.handle, demand).await,
        };
        e.finish(decision)
    }

    /// Turns a backend decision into an acquisition.
    #[inline(always)]
    pub(crate) fn finish(
        self: &Arc<Self>,
        decision: Result<Decision, BackendError>,
    ) -> Result<Acquisition<B>, Error> {
        match decision {
            Ok(Decision::Granted(grant)) => Ok(Acquisition::Granted(self.permit(grant))),
            Ok(Decision::Denied(d)) => Ok(Acquisition::Denied(d)),
            Err(e) => {
                self.counters.backend_errors.fetch_add(1, Ordering::Relaxed);
                Err(Error::Backend(e))
            }
        }
    }

    #[inline(always)]
    fn permit(self: &Arc<Self>, grant: Grant) -> Permit<B> {
        // A lease always needs its entry back, even if it raced with a
        // change of limits that added concurrency to a resource whose
        // permits were inert.
        if !self.stateful && grant.lease.is_none() {
            return Permit::new(None, grant, 0);
        }
        let ticket = match grant.lease {
            Some(_) => {
                self.counters.active.inc();
                self.renewer.register(self, grant)
            }
            None => 0,
        };
        Permit::new(Some(Arc::clone(self)), grant, ticket)
    }

    /// `try_acquire`: one attempt on the newest version; the backend counts
    /// a denial.
    /// `try_acquire` when [`Entry::try_acquire_now`] could not answer: the
    /// backend is awaited.
    pub(crate) async fn try_acquire_awaited(
        self: &Arc<Self>,
        opts: &AcquireOptions,
    ) -> Result<Acquisition<B>, Error> {
        let e = self.current();
        let demand = e.demand(opts);
        e.check_size(&demand)?;
        let decision = e.backend.acquire(&e.handle, &demand).await;
        e.finish(decision)
    }

    /// `try_acquire` answered at once, or `None` when the backend must be
    /// awaited.
    #[inline]
    pub(crate) fn try_acquire_now(
        self: &Arc<Self>,
        opts: &AcquireOptions,
    ) -> Option<Result<Acquisition<B>, Error>> {
        let e = self.current();
        let demand = e.demand(opts);
        if let Err(err) = e.check_size(&demand) {
            return Some(Err(err));
        }
        Some(match e.backend.acquire_now_quick(&e.handle, &demand)? {
            Ok(QuickDecision::Granted { at_ns }) => Ok(e.plain_grant(at_ns, &demand)),
            Ok(QuickDecision::Full(d)) => e.finish_full(d),
            Err(err) => e.finish_error(err),
        })
    }

    /// `try_acquire` on a backend that always answers at once.
    #[inline(always)]
    pub(crate) fn try_acquire_sync(self: &Arc<Self>, opts: &AcquireOptions) -> Result<Acquisition<B>, Error>
    where
        B: SyncBackend,
    {
        let e = self.current();
        let demand = e.demand(opts);
        e.check_size(&demand)?;
        match e.backend.acquire_quick(&e.handle, &demand) {
            QuickDecision::Granted { at_ns } => Ok(e.plain_grant(at_ns, &demand)),
            QuickDecision::Full(d) => e.finish_full(d),
        }
    }

    /// The acquisition of a plain grant, built in the caller's return slot:
    /// no lease, nothing registered, a reference only if the permit can
    /// reconcile.
    #[inline(always)]
    fn plain_grant(self: &Arc<Self>, at_ns: u64, demand: &Demand) -> Acquisition<B> {
        let entry = self.stateful.then(|| Arc::clone(self));
        Acquisition::Granted(Permit::new(entry, Grant::plain(at_ns, demand), 0))
    }

    #[inline(never)]
    fn finish_error(self: &Arc<Self>, err: BackendError) -> Result<Acquisition<B>, Error> {
        self.finish(Err(err))
    }

    /// [`Entry::try_acquire_sync`] as a yes/no: a plain grant is answered
    /// without building a permit (its permit would be inert).
    #[inline(always)]
    pub(crate) fn check_sync(self: &Arc<Self>, opts: &AcquireOptions) -> Result<Result<(), Denial>, Error>
    where
        B: SyncBackend,
    {
        let e = self.current();
        let demand = e.demand(opts);
        e.check_size(&demand)?;
        match e.backend.acquire_quick(&e.handle, &demand) {
            QuickDecision::Granted { .. } => Ok(Ok(())),
            QuickDecision::Full(d) => e.check_full(d),
        }
    }

    /// A decision other than a plain grant, as a yes/no: a permit that
    /// holds something (a lease) is built and dropped, so it gives back
    /// at once what it took.
    #[inline(never)]
    fn check_full(self: &Arc<Self>, decision: Decision) -> Result<Result<(), Denial>, Error> {
        match self.finish(Ok(decision))? {
            Acquisition::Granted(permit) => {
                drop(permit);
                Ok(Ok(()))
            }
            Acquisition::Denied(d) => Ok(Err(d)),
        }
    }

    #[inline(never)]
    fn finish_full(self: &Arc<Self>, decision: Decision) -> Result<Acquisition<B>, Error> {
        self.finish(Ok(decision))
    }

    /// Tells the queue (if any) that capacity may have been freed.
    #[inline]
    pub(crate) fn capacity_freed(&self) {
        if let Some(q) = &self.queue {
            q.wake();
        }
    }
}

/// A pre-resolved reference to a registered resource: acquiring through it
/// skips the id lookup. Keeps the resource from being evicted while held.
///
/// A handle follows changes of the resource's limits
/// ([`crate::ResourceBroker::set_limits`]): acquisitions through it count
/// against the newest limits. After [`crate::ResourceBroker::unregister`] it
/// still counts on the resource's last state, which is no longer
/// registered; get a fresh handle from the broker after a reload.
#[derive(Debug)]
pub struct ResourceHandle<B: Backend = crate::MemoryBackend> {
    pub(crate) entry: Arc<Entry<B>>,
}

impl<B: Backend> Clone for ResourceHandle<B> {
    fn clone(&self) -> Self {
        Self {
            entry: Arc::clone(&self.entry),
        }
    }
}

impl<B: Backend> ResourceHandle<B> {
    /// The resource id.
    pub fn id(&self) -> &str {
        &self.entry.id
    }

    /// The resource's limits now (after any [`crate::ResourceBroker::set_limits`]
    /// since this handle was obtained).
    pub fn limits(&self) -> &crate::Limits {
        &self.entry.current().spec.limits
    }

    /// The compiled limits now: each rate dimension's quota, window and
    /// algorithm, and the concurrency bound (what a caller needs to say how
    /// much of a quota is left, e.g. IETF `RateLimit` headers).
    pub fn spec(&self) -> &LimitSpec {
        &self.entry.current().spec
    }

    /// The units counted now per dimension and the live leases, as the
    /// backend sees them (fleet-wide on a shared store). One backend read:
    /// an atomic load or a short lock in memory, one round trip on Redis —
    /// not for the hot path of every request unless asked for.
    pub async fn usage(&self) -> Result<crate::backend::Usage, Error> {
        let e = self.entry.current();
        Ok(e.backend.usage(&e.handle).await?)
    }

    /// Gives back everything `grant` (from a permit of this resource, see
    /// [`Permit::grant`]) counted on the rate dimensions, as if it had never
    /// been granted: for a caller that takes several resources in turn and
    /// must undo the ones it took when a later one refuses ("all must
    /// pass", a denial consumes nothing). Works on every permit, also an
    /// inert one, whose own [`Permit::reconcile`] is a no-op; a concurrency
    /// lease is not touched (release the permit for that). Settled by the
    /// backend like a reconcile, also if this future is dropped.
    pub async fn refund(&self, grant: &Grant) -> Result<(), Error> {
        let e = self.entry.current();
        let none = crate::backend::Reserved::default();
        Ok(e.backend.reconcile(&e.handle, grant, &none).await?)
    }

    /// Check+reject: reserve `opts` now or get a denial with its wait time.
    #[inline]
    pub async fn try_acquire(&self, opts: AcquireOptions) -> Result<Acquisition<B>, Error> {
        // Answered in the first poll without a nested future when the
        // backend can (the result is moved once, not through every layer).
        if let Some(out) = self.entry.try_acquire_now(&opts) {
            return out;
        }
        self.entry.try_acquire_awaited(&opts).await
    }

    /// Check+reject without a future, on a backend whose state is in this
    /// process (the in-memory backend): for synchronous code paths.
    #[inline]
    pub fn try_acquire_now(&self, opts: AcquireOptions) -> Result<Acquisition<B>, Error>
    where
        B: SyncBackend,
    {
        self.entry.try_acquire_sync(&opts)
    }

    /// [`ResourceHandle::try_acquire_now`] as a yes/no, for callers that
    /// need no permit (a rate limit checked per request, like governor's
    /// `check()`): `Ok(Ok(()))` granted, `Ok(Err(denial))` refused. Exactly
    /// `try_acquire_now` followed by dropping the permit — counted the same,
    /// a reservation of tokens stays, a concurrency slot is given back at
    /// once — without building the permit, which makes it the cheapest
    /// check there is.
    #[inline]
    pub fn check_now(&self, opts: AcquireOptions) -> Result<Result<(), Denial>, Error>
    where
        B: SyncBackend,
    {
        self.entry.check_sync(&opts)
    }
}
