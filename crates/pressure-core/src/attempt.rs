//! One acquisition attempt on a resource: the demand of the caller's
//! options, the backend's decision on the newest version of the [`Entry`],
//! and the [`Permit`] or denial made of it. `try_acquire`, `check_now`, the
//! queue's dispatcher and `acquire_within` all come through here.

use crate::acquisition::{AcquireOptions, Acquisition};
use crate::backend::{
    Backend, BackendError, CompactDecision, Decision, Denial, Grant, LocalBackend, Reserved,
};
use crate::entry::{Entry, Permit};
use crate::error::Error;
use crate::limits::Demand;
use crate::ppm::PPM;
use crate::priority::Priority;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl<B: Backend> Entry<B> {
    /// The backend demand for `opts`.
    #[inline]
    pub(crate) fn demand(&self, opts: &AcquireOptions) -> Demand {
        Demand {
            requests: opts.requests,
            input_tokens: opts.input_tokens,
            output_tokens: opts.output_tokens,
            cost_micro_usd: opts.cost_micro_usd,
            lease: opts.lease,
            ceiling_ppm: match opts.priority {
                Priority::Interactive => PPM,
                Priority::Batch => self.batch_ceiling_ppm,
            },
            book_within_ns: 0,
            count_denial: true,
        }
    }

    /// One backend attempt on the newest version, answered without awaiting
    /// when the backend can.
    #[inline]
    pub(crate) async fn attempt(self: &Arc<Self>, demand: &Demand) -> Result<Acquisition<B>, Error> {
        let e = self.current();
        let decision = match e.backend.acquire_now_if_local(&e.handle, demand) {
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
                self.counters().backend_errors.fetch_add(1, Ordering::Relaxed);
                Err(Error::Backend(e))
            }
        }
    }

    #[inline(always)]
    pub(crate) fn permit(self: &Arc<Self>, grant: Grant) -> Permit<B> {
        // A lease always needs its entry back, even if it raced with a
        // change of limits that added concurrency to a resource whose
        // permits were inert.
        if !self.stateful && grant.lease.is_none() {
            return Permit::new(None, grant, 0);
        }
        let ticket = match grant.lease {
            Some(_) => {
                self.counters().active.inc();
                if self.backend_keeps_leases() {
                    self.renewer.hold(self);
                    0
                } else {
                    self.renewer.register(self, grant)
                }
            }
            None => 0,
        };
        Permit::new(Some(Arc::clone(self)), grant, ticket)
    }

    /// `try_acquire` when [`Entry::try_acquire_now_if_local`] could not answer: one
    /// attempt on the newest version, the backend awaited (it counts a
    /// denial).
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
    pub(crate) fn try_acquire_now_if_local(
        self: &Arc<Self>,
        opts: &AcquireOptions,
    ) -> Option<Result<Acquisition<B>, Error>> {
        let e = self.current();
        let demand = e.demand(opts);
        if let Err(err) = e.check_size(&demand) {
            return Some(Err(err));
        }
        Some(
            match e.backend.acquire_now_compact_if_local(&e.handle, &demand)? {
                Ok(CompactDecision::Granted { at_ns }) => Ok(e.plain_grant(at_ns, &demand)),
                Ok(CompactDecision::Full(d)) => e.finish_full(d),
                Err(err) => e.finish_error(err),
            },
        )
    }

    /// The newest version and its answer to `opts`, from a backend that
    /// always answers at once (after the size check).
    #[inline(always)]
    fn decide_now(
        self: &Arc<Self>,
        opts: &AcquireOptions,
    ) -> Result<(&Arc<Self>, Demand, CompactDecision), Error>
    where
        B: LocalBackend,
    {
        let e = self.current();
        let demand = e.demand(opts);
        e.check_size(&demand)?;
        Ok((e, demand, e.backend.acquire_now_compact(&e.handle, &demand)))
    }

    /// `try_acquire` on a backend that always answers at once.
    #[inline(always)]
    pub(crate) fn try_acquire_now(self: &Arc<Self>, opts: &AcquireOptions) -> Result<Acquisition<B>, Error>
    where
        B: LocalBackend,
    {
        match self.decide_now(opts)? {
            (e, demand, CompactDecision::Granted { at_ns }) => Ok(e.plain_grant(at_ns, &demand)),
            (_, _, CompactDecision::Full(Decision::Denied(d))) => Ok(Acquisition::Denied(d)),
            (e, demand, CompactDecision::Full(Decision::Granted(g)))
                if e.backend_keeps_leases() && g.lease.is_some() =>
            {
                Ok(e.held_grant(&g, &demand))
            }
            (e, _, CompactDecision::Full(d)) => e.finish_full(d),
        }
    }

    /// The acquisition of a grant whose lease the backend keeps itself (the
    /// in-process one, see `renewal`), built in the caller's return slot:
    /// the resource stays on the renewer's list, nothing is recorded per
    /// lease. That backend's grants reserve exactly the demand and are
    /// never a fallback ([`Backend::in_process`]), so only the grant's own
    /// three fields are read (copying the whole grant cost ten instructions
    /// more per acquisition).
    #[inline(always)]
    fn held_grant(self: &Arc<Self>, g: &Grant, demand: &Demand) -> Acquisition<B> {
        debug_assert!(g.reserved == Reserved::from(demand) && !g.fallback, "{g:?}");
        self.counters().active.inc();
        self.renewer.hold(self);
        let grant = Grant {
            at_ns: g.at_ns,
            delay_ns: g.delay_ns,
            lease: g.lease,
            reserved: Reserved::from(demand),
            fallback: false,
        };
        Acquisition::Granted(Permit::new(Some(Arc::clone(self)), grant, 0))
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

    /// [`Entry::try_acquire_now`] as a yes/no: a plain grant is answered
    /// without building a permit (its permit would be inert).
    #[inline(always)]
    pub(crate) fn check_now(self: &Arc<Self>, opts: &AcquireOptions) -> Result<Result<(), Denial>, Error>
    where
        B: LocalBackend,
    {
        match self.decide_now(opts)? {
            (_, _, CompactDecision::Granted { .. }) => Ok(Ok(())),
            (e, _, CompactDecision::Full(d)) => e.check_full(d),
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
}
