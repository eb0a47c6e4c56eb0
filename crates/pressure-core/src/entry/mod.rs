//! One registered resource as the broker holds it: its compiled limits, the
//! backend's handle, this process's counters and, for `queue` resources, the
//! waiting line (`waiting_line.rs`). The [`Permit`] an acquisition grants
//! holds its entry (`permit.rs`), so it lives here too. What an acquisition does with it is in `attempt.rs`;
//! `ResourceHandle` (`handle.rs`) is the public, pre-resolved reference.
//!
//! An [`Entry`] is one *version* of a resource: its limits never change.
//! When they do ([`crate::ResourceBroker::set_limits`]) the broker makes a
//! new version that continues the backend state and shares the counters and
//! the queue, and links the old one to it (`next`). Acquisitions always run
//! on the newest version (one atomic load to check), so handles obtained
//! before the change count against the new limits; permits stay on the
//! version that granted them, whose backend handle still releases them.

use crate::backend::{Backend, BackendError, Grant};
use crate::error::Error;
use crate::limits::{Demand, Dimension, LimitSpec};
use crate::ppm::PPM;
use crate::renewal::{LeaseBook, Leased, Renewed, Renewer};
use crate::stats::ResourceKind;
use crate::striped::Gauge;
use crate::{MemoryBackend, MemoryHandle};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

mod permit;
mod waiting_line;

pub use permit::Permit;
pub(crate) use waiting_line::{Rejection, WaitingLine};

/// Counters of this process for one resource, besides the grants and
/// denials its backend counts on the hot path.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Queue requests refused (full, timed out) and `acquire_within` give-ups.
    pub(crate) rejected: AtomicU64,
    /// Live permits holding a concurrency lease (per-thread stripes once
    /// the resource is busy: no locked increment when a permit is taken or
    /// dropped; see `striped`).
    pub(crate) active: Gauge,
    pub(crate) backend_errors: AtomicU64,
    /// Denials of a shadow limit that the caller admitted anyway.
    pub(crate) shadow_denied: AtomicU64,
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
    /// Least limit over the cost dimensions (`u64::MAX`: none).
    cost: u64,
}

impl Fits {
    pub(crate) fn of(spec: &LimitSpec) -> Self {
        let mut fits = Self {
            requests: u64::MAX,
            tokens: u64::MAX,
            cost: u64::MAX,
        };
        for r in &spec.rates {
            let slot = if r.dimension.counts_requests() {
                &mut fits.requests
            } else {
                &mut fits.tokens
            };
            *slot = (*slot).min(r.max_demand());
        }
        for c in &spec.calendars {
            let slot = match c.dimension {
                d if d.counts_requests() => &mut fits.requests,
                Dimension::TokensPerDay => &mut fits.tokens,
                _ => &mut fits.cost,
            };
            *slot = (*slot).min(c.limit);
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
            && demand.cost_micro_usd <= self.cost
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
    /// Shared by every version of the resource; allocated on first use (a
    /// resource never refused, never failing and without leases — most
    /// lazily registered tenants — has none).
    pub(crate) counters: OnceLock<Arc<Counters>>,
    /// Shared by every version of the resource.
    pub(crate) queue: Option<Arc<WaitingLine<B>>>,
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
    pub(crate) renewer: Arc<Renewer<Entry<B>>>,
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

    /// This process's counters of the resource (allocated on first use).
    #[inline]
    pub(crate) fn counters(&self) -> &Counters {
        self.shared_counters()
    }

    /// The counters to share with a new version of the resource.
    #[inline]
    pub(crate) fn shared_counters(&self) -> &Arc<Counters> {
        self.counters.get_or_init(Arc::default)
    }

    /// The counters, if anything was counted on them yet.
    pub(crate) fn counted(&self) -> Option<&Counters> {
        self.counters.get().map(|c| &**c)
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

    /// Whether the backend keeps the leases it grants in this process, as
    /// the renewer's book (see `renewal` and [`Backend::in_process`]): the
    /// broker then records nothing per lease. Known at compile time for
    /// the [`MemoryBackend`] itself.
    #[inline(always)]
    pub(crate) fn backend_keeps_leases(&self) -> bool {
        self.memory().is_some()
    }

    /// The in-process backend and this version's state in it, when the
    /// resource is counted there.
    #[inline(always)]
    fn memory(&self) -> Option<(&MemoryBackend, &MemoryHandle)> {
        self.backend.in_process(&self.handle)
    }

    /// Tells the queue (if any) that capacity may have been freed.
    #[inline]
    pub(crate) fn capacity_freed(&self) {
        if let Some(q) = &self.queue {
            q.wake();
        }
    }
}

impl<B: Backend> Leased for Entry<B> {
    fn id(&self) -> &str {
        &self.id
    }

    fn leases(&self) -> &LeaseBook {
        &self.leases
    }

    fn lease_ttl_ns(&self) -> u64 {
        self.spec.lease_ttl_ns
    }

    async fn renew(self: &Arc<Self>, grants: &[Grant]) -> (u64, Result<Vec<bool>, BackendError>) {
        // Through the newest version: the lease TTL of a changed limit
        // applies.
        let current = self.current();
        let kept = if grants.is_empty() {
            Ok(Vec::new())
        } else {
            current.backend.renew_many(&current.handle, grants).await
        };
        (current.spec.lease_ttl_ns, kept)
    }

    fn backend_keeps_leases(&self) -> bool {
        Entry::backend_keeps_leases(self)
    }

    fn renew_held(&self) -> Option<Renewed> {
        // Every version's handle reaches the one lock of the resource's
        // state (moves followed), which holds the newest limits and TTL.
        let (backend, handle) = self.memory()?;
        let (live, lost, ttl_ns) = backend.renew_held(handle);
        Some(Renewed { live, lost, ttl_ns })
    }

    fn held_leases(&self) -> Option<(usize, usize)> {
        let (backend, handle) = self.memory()?;
        Some(backend.held_leases(handle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    /// One registered resource's own bytes (its backend state is behind the
    /// handle's pointer, see `backend::memory`): what every lazily
    /// registered tenant pays besides its id and its map slot. A regression
    /// fails here; `--nocapture` prints the table.
    #[test]
    fn an_entry_is_small() {
        use std::mem::size_of;
        println!(
            "size_of: Entry<MemoryBackend> {}, Counters {}, LeaseBook {}, Fits {}",
            size_of::<Entry<MemoryBackend>>(),
            size_of::<Counters>(),
            size_of::<LeaseBook>(),
            size_of::<Fits>(),
        );
        assert!(size_of::<Entry<MemoryBackend>>() <= 152);
        // 48 before shadow limits' `shadow_denied` (allocated only for a
        // resource refused, failing or leasing, not per lazy tenant).
        assert!(size_of::<Counters>() <= 56);
        assert!(size_of::<LeaseBook>() <= 16);
    }
}
