//! The RAII [`Permit`]: capacity reserved on one resource version, given back
//! exactly once (on drop or by [`Permit::release`]), corrected by
//! [`Permit::reconcile`]. It holds its [`Entry`] so the release reaches the
//! backend handle that granted it and wakes the resource's queue.

use super::Entry;
use crate::backend::{Backend, Grant, Reserved};
use crate::error::Error;
use crate::MemoryBackend;
use std::sync::Arc;
use std::time::Duration;

/// Reserved capacity on one resource. Released exactly once: on `Drop`, or
/// earlier by [`Permit::release`] (idempotent). A concurrency permit is a
/// lease: the broker's renewal task renews it for as long as the permit
/// lives (a tokio runtime is needed), and if this process dies (or the broker
/// is dropped) the lease expires after its TTL and the slot comes back.
pub struct Permit<B: Backend = MemoryBackend> {
    /// `None` for an inert permit: a resource without concurrency or token
    /// dimensions has nothing to give back or correct.
    entry: Option<Arc<Entry<B>>>,
    grant: Grant,
    live: bool,
    /// The lease's slot in the broker's book of leases (0: none, or the
    /// backend keeps the lease itself, see `renewal`).
    ticket: u64,
}

impl<B: Backend> std::fmt::Debug for Permit<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("resource", &self.resource())
            .field("grant", &self.grant)
            .field("live", &self.live)
            .finish()
    }
}

impl<B: Backend> Permit<B> {
    #[inline(always)]
    pub(crate) fn new(entry: Option<Arc<Entry<B>>>, grant: Grant, ticket: u64) -> Self {
        Self {
            entry,
            grant,
            live: true,
            ticket,
        }
    }

    /// A permit that holds nothing: no resource, nothing reserved, its
    /// release and reconcile no-ops (what a shadow denial admits with).
    pub fn inert() -> Self {
        let grant = Grant {
            at_ns: 0,
            delay_ns: 0,
            lease: None,
            reserved: Reserved::default(),
            fallback: false,
        };
        Self::new(None, grant, 0)
    }

    /// The resource this permit belongs to; `None` for an inert permit (a
    /// resource with only request-rate limits), which keeps no reference.
    pub fn resource(&self) -> Option<&str> {
        self.entry.as_deref().map(|e| &*e.id)
    }

    /// For a booked future slot (`gcra` queueing): how long after the grant
    /// the slot starts. Zero for an immediate grant.
    pub fn delay(&self) -> Duration {
        self.grant.delay()
    }

    /// What the backend reserved.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Whether the permit still holds its capacity.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Lease time-to-live of the resource (the renewal task renews every
    /// third of it); zero when the permit holds no lease.
    pub fn lease_ttl(&self) -> Duration {
        match (&self.entry, self.grant.lease) {
            (Some(e), Some(_)) => Duration::from_nanos(e.spec.lease_ttl_ns),
            _ => Duration::ZERO,
        }
    }

    /// Gives the capacity back now and waits for the backend to confirm.
    /// Idempotent: later calls (and the eventual drop) do nothing.
    pub async fn release(&mut self) -> Result<(), Error> {
        if !std::mem::replace(&mut self.live, false) {
            return Ok(());
        }
        if let (Some(e), Some(_)) = (&self.entry, self.grant.lease) {
            e.leases.remove(self.ticket);
            e.counters().active.dec();
            // The queue hears of the freed slot even if this future is
            // dropped at the await (the backend settles the release itself).
            let _wake = WakeOnDrop(e);
            e.backend.release(&e.handle, &self.grant).await?;
        }
        Ok(())
    }

    /// Extends the concurrency lease by the TTL now. The broker's renewal
    /// task already does this for every live permit; call it only to learn
    /// at once whether the lease is still held. `Ok(false)` when there is no
    /// lease to renew, or it was already reclaimed (the holder lost its slot).
    pub async fn renew(&mut self) -> Result<bool, Error> {
        match (&self.entry, self.live && self.grant.lease.is_some()) {
            (Some(e), true) => Ok(e.backend.renew(&e.handle, &self.grant).await?),
            _ => Ok(false),
        }
    }

    /// Corrects the reservation to what was actually used: the windows and
    /// buckets are adjusted by the difference, up or down
    /// ([`UnitsDelta`](crate::UnitsDelta), exact over the whole `u64`
    /// range). An addition saturates (a count of `u64::MAX` fills the
    /// limit, never wraps to a refund) and a refund never takes a count
    /// below zero. A no-op on an inert permit (its resource counts no
    /// tokens). `actual` is an [`ActualUsage`](crate::ActualUsage), named
    /// here by what it is (`Reserved`) so `entry` does not point up to
    /// `acquisition`.
    pub async fn reconcile(&mut self, actual: Reserved) -> Result<(), Error> {
        let Some(e) = &self.entry else {
            return Ok(());
        };
        if actual == self.grant.reserved {
            return Ok(());
        }
        // The permit holds `actual` from here on: a backend settles a
        // correction it has started even if this future is dropped at the
        // await, so a later reconcile must count from `actual`, not again
        // from the estimate. An error (nothing applied, as far as the
        // backend knows) puts the estimate back.
        let before = self.grant;
        self.grant.reserved = actual;
        if let Err(err) = e.backend.reconcile(&e.handle, &before, &actual).await {
            self.grant.reserved = before.reserved;
            return Err(err.into());
        }
        // Capacity may be freed when any count went down (compared one by
        // one: a sum of counts a caller gives may not fit a u64).
        let r = &before.reserved;
        let freed = actual.input_tokens < r.input_tokens
            || actual.output_tokens < r.output_tokens
            || actual.requests < r.requests
            || actual.cost_micro_usd < r.cost_micro_usd;
        if freed {
            e.capacity_freed();
        }
        Ok(())
    }
}

/// Tells the entry's queue that capacity may have been freed, when dropped.
struct WakeOnDrop<'a, B: Backend>(&'a Entry<B>);

impl<B: Backend> Drop for WakeOnDrop<'_, B> {
    fn drop(&mut self) {
        self.0.capacity_freed();
    }
}

impl<B: Backend> Drop for Permit<B> {
    #[inline]
    fn drop(&mut self) {
        if let (true, Some(e), Some(_)) = (self.live, &self.entry, self.grant.lease) {
            // Nothing reads `live` after the drop. A lease the backend
            // keeps has no ticket (known at compile time for the memory
            // backend).
            if !e.backend_keeps_leases() {
                e.leases.remove(self.ticket);
            }
            e.counters().active.dec();
            e.backend.release_detached(&e.handle, self.grant);
            e.capacity_freed();
        }
    }
}
