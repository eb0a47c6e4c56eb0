//! Quota leasing for hot keys (`"leasing": {"maxShare": 0.1, "ttlMs":
//! 1000}` on a limit): an instance reserves a batch of units in one store
//! call (`lua/lease.lua`), decides from it in memory, and gives back what
//! it did not use when the lease ends — in the call that takes the next
//! lease, or on its own when the key cools down or the handle (the
//! backend's resource) is dropped.
//!
//! * **Sizing**: a lease asks for the decisions this instance saw in the
//!   last lease TTL ([`rate`]), at most the budget: all outstanding leases
//!   of the fleet hold at most `maxShare × N` (the smallest over the
//!   limit's request dimensions), kept in the resource's hash with one
//!   record per lease and its expiry, so a dead instance's share of the
//!   budget comes back within `ttlMs`.
//! * **Off when cold**: fewer than [`MIN_PER_TTL`] eligible decisions per
//!   TTL and every decision is the ordinary one-call acquisition, identical
//!   to leasing off.
//! * **Eligible demands**: one request, no tokens or cost (those are
//!   reconciled per call: they go to the store), the full ceiling, no
//!   booking of a future slot, and no concurrency lease to take.
//! * **Cancellation**: a lease call whose caller goes away is settled by
//!   the task of `settle.rs`: a batch it took is given back whole.
//!
//! The bounds are stated in the crate docs ("Quota leasing").

mod call;
mod rate;

use crate::store::Store;
use parking_lot::Mutex;
use pressure_core::clock::Clock;
use pressure_core::{Decision, Demand, Grant, LimitSpec, Reserved, PPM};
use rate::Rate;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) use call::Refill;

/// Eligible decisions per lease TTL below which an instance does not lease:
/// a lease of fewer units would not save round trips (it costs a call to
/// take and often one to give back).
pub(crate) const MIN_PER_TTL: u64 = 4;

/// The leasing state of one resource in this process.
pub(crate) struct Book {
    store: Arc<Store>,
    key: String,
    /// `lua/acquire.lua`'s ARGV for one request (see `lua/lease.lua`).
    args: Vec<String>,
    ttl_ns: u64,
    /// Units all outstanding leases may hold (`maxShare × N`).
    cap: u64,
    /// Largest batch: `cap + 1`, and no more than any request dimension
    /// admits at once.
    max_batch: u64,
    /// The limit has `maxConcurrentRequests`: demands that take a lease go
    /// to the store.
    concurrency: bool,
    state: Mutex<State>,
}

impl std::fmt::Debug for Book {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Book")
            .field("ttl_ns", &self.ttl_ns)
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    held: Option<Held>,
    /// A lease call is in flight: other decisions go to the store meanwhile.
    refilling: bool,
    rate: Rate,
}

/// A lease this instance holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    id: u64,
    /// Units not used yet.
    left: u64,
    /// Its dating time (server µs), for giving units back.
    dated_us: u64,
    /// Served until then (local clock): its send time plus the TTL, so
    /// never past the store's own end of it.
    deadline_ns: u64,
    /// Server time of the grant, and the local time its answer came, for
    /// the grant times of the decisions served from it.
    server_at_ns: u64,
    local_at_ns: u64,
}

impl Book {
    /// The leasing of `spec` on `key`, with `args` the acquire ARGV of one
    /// request; `None` when the limit has no leasing or nothing to lease
    /// (calendar dimensions, no request dimension, a budget under one unit).
    pub(crate) fn new(store: Arc<Store>, key: String, spec: &LimitSpec, args: Vec<String>) -> Option<Self> {
        let leasing = spec.limits.leasing?;
        if !spec.calendars.is_empty() {
            return None;
        }
        let requests = spec.rates.iter().filter(|r| r.dimension.counts_requests());
        let max_demand = requests.map(|r| r.max_demand()).min()?;
        let cap = leasing.max_share.of(max_demand);
        let max_batch = max_demand.min(cap + 1);
        if cap == 0 || max_batch < 2 {
            // No batch of two units fits: nothing to lease.
            return None;
        }
        Some(Self {
            store,
            key,
            args,
            ttl_ns: leasing.ttl_ms.saturating_mul(1_000_000),
            cap,
            max_batch,
            concurrency: spec.concurrency.is_some(),
            state: Mutex::default(),
        })
    }

    fn eligible(&self, d: &Demand) -> bool {
        d.requests == 1
            && d.input_tokens == 0
            && d.output_tokens == 0
            && d.cost_micro_usd == 0
            && d.ceiling_ppm >= PPM
            && d.book_within_ns == 0
            && !(d.lease && self.concurrency)
    }

    /// A decision from the lease in memory, when `demand` is eligible and
    /// the lease is live with units left; counts the demand in the rate.
    pub(crate) fn serve(&self, demand: &Demand) -> Option<Decision> {
        if !self.eligible(demand) {
            return None;
        }
        let now = self.store.clock.now_nanos();
        let mut s = self.state.lock();
        s.rate.tick(now, self.ttl_ns);
        let held = s.held.as_mut()?;
        if held.left == 0 || now >= held.deadline_ns {
            return None;
        }
        held.left -= 1;
        self.store.leasing.served.fetch_add(1, Ordering::Relaxed);
        Some(Decision::Granted(Grant {
            at_ns: held.server_at_ns + (now - held.local_at_ns),
            delay_ns: 0,
            lease: None,
            reserved: Reserved::from(demand),
            fallback: false,
        }))
    }

    /// The store call to make for an eligible `demand` that [`Book::serve`]
    /// did not answer: a new lease (giving the spent one back) when the key
    /// is hot and no other lease call is in flight; else `None`, the
    /// ordinary acquisition (a cold key's spent lease is given back).
    pub(crate) fn refill(&self, demand: &Demand) -> Option<Refill<'_>> {
        if !self.eligible(demand) {
            return None;
        }
        let now = self.store.clock.now_nanos();
        let mut s = self.state.lock();
        if s.refilling || s.held.is_some_and(|h| h.left > 0 && now < h.deadline_ns) {
            return None;
        }
        let old = s.held.take();
        let rate = s.rate.per_period();
        if rate < MIN_PER_TTL {
            drop(s);
            if let Some(old) = old {
                self.give_back(old);
            }
            return None;
        }
        s.refilling = true;
        Some(Refill::new(self, old, rate.clamp(2, self.max_batch)))
    }

    /// Installs a new lease; one already there (none expected: refills are
    /// one at a time) is given back.
    fn install(&self, held: Held) {
        let mut s = self.state.lock();
        s.refilling = false;
        if let Some(old) = s.held.replace(held) {
            drop(s);
            self.give_back(old);
        }
    }
}

impl Drop for Book {
    /// The resource is dropped (backend shut down, limits changed): its
    /// lease's unused units go back.
    fn drop(&mut self) {
        if let Some(held) = self.state.get_mut().held.take() {
            self.give_back(held);
        }
    }
}
