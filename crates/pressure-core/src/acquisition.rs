//! The check+reject result: [`Acquisition`] (granted permit or denial with a
//! wait time) and the RAII [`Permit`] that gives capacity back exactly once.

use crate::backend::{Backend, Denial, Grant, Reserved};
use crate::entry::Entry;
use crate::error::Error;
use crate::queue::Priority;
use crate::MemoryBackend;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireOptions {
    /// Requests (default 1).
    pub requests: u64,
    /// Input tokens, counted before the call.
    pub input_tokens: u64,
    /// Output tokens reserved (an estimate such as `max_tokens`); correct it
    /// later with [`Permit::reconcile`].
    pub output_tokens: u64,
    /// Priority class; `Batch` may only fill the share of each limit left
    /// after the resource's batch headroom.
    pub priority: Priority,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self {
            requests: 1,
            input_tokens: 0,
            output_tokens: 0,
            priority: Priority::Interactive,
        }
    }
}

impl AcquireOptions {
    /// Sets the token estimate.
    pub fn tokens(mut self, input: u64, output: u64) -> Self {
        self.input_tokens = input;
        self.output_tokens = output;
        self
    }
    /// Sets the number of requests.
    pub fn requests(mut self, n: u64) -> Self {
        self.requests = n;
        self
    }
    /// Sets the priority class.
    pub fn priority(mut self, p: Priority) -> Self {
        self.priority = p;
        self
    }
}

/// Actual usage reported after the work, for [`Permit::reconcile`].
pub type ActualUsage = Reserved;

/// The result of `try_acquire`: a denial is a value that carries its wait
/// time (mapped straight to `Retry-After` by the gateway).
#[derive(Debug)]
pub enum Acquisition<B: Backend = MemoryBackend> {
    /// Capacity reserved; the permit gives it back.
    Granted(Permit<B>),
    /// Nothing reserved.
    Denied(Denial),
}

impl<B: Backend> Acquisition<B> {
    /// Whether capacity was reserved.
    #[inline]
    pub fn allowed(&self) -> bool {
        matches!(self, Acquisition::Granted(_))
    }

    /// Zero when granted; otherwise the earliest moment the same demand could
    /// fit.
    pub fn wait_time(&self) -> Duration {
        match self {
            Acquisition::Granted(p) => p.delay(),
            Acquisition::Denied(d) => d.wait,
        }
    }

    /// The permit, when granted.
    pub fn permit(&self) -> Option<&Permit<B>> {
        match self {
            Acquisition::Granted(p) => Some(p),
            Acquisition::Denied(_) => None,
        }
    }

    /// Takes the permit, when granted.
    pub fn into_permit(self) -> Option<Permit<B>> {
        match self {
            Acquisition::Granted(p) => Some(p),
            Acquisition::Denied(_) => None,
        }
    }

    /// The denial, when denied.
    pub fn denial(&self) -> Option<&Denial> {
        match self {
            Acquisition::Granted(_) => None,
            Acquisition::Denied(d) => Some(d),
        }
    }

    /// Releases the permit if granted; a no-op for a denial.
    pub async fn release(&mut self) -> Result<(), Error> {
        match self {
            Acquisition::Granted(p) => p.release().await,
            Acquisition::Denied(_) => Ok(()),
        }
    }
}

/// Reserved capacity on one resource. Released exactly once: on `Drop`, or
/// earlier by [`Permit::release`] (idempotent). A concurrency permit is a
/// lease: a holder that keeps it longer than the TTL must [`Permit::renew`],
/// and a leaked permit is reclaimed when the lease expires.
pub struct Permit<B: Backend = MemoryBackend> {
    entry: Arc<Entry<B>>,
    grant: Grant,
    live: bool,
}

impl<B: Backend> std::fmt::Debug for Permit<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("resource", &self.entry.id)
            .field("grant", &self.grant)
            .field("live", &self.live)
            .finish()
    }
}

impl<B: Backend> Permit<B> {
    pub(crate) fn new(entry: Arc<Entry<B>>, grant: Grant) -> Self {
        Self {
            entry,
            grant,
            live: true,
        }
    }

    /// The resource this permit belongs to.
    pub fn resource(&self) -> &str {
        &self.entry.id
    }

    /// For a booked future slot (`gcra` queueing): how long after the grant
    /// the slot starts. Zero for an immediate grant.
    pub fn delay(&self) -> Duration {
        self.grant.delay
    }

    /// What the backend reserved.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Whether the permit still holds its capacity.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Lease time-to-live of the resource (how often a long holder renews).
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_nanos(self.entry.spec.lease_ttl_ns)
    }

    /// Gives the capacity back now and waits for the backend to confirm.
    /// Idempotent: later calls (and the eventual drop) do nothing.
    pub async fn release(&mut self) -> Result<(), Error> {
        if !std::mem::replace(&mut self.live, false) {
            return Ok(());
        }
        self.entry.counters.active.fetch_sub(1, Ordering::Relaxed);
        if self.grant.lease.is_some() {
            let res = self.entry.backend.release(&self.entry.handle, &self.grant).await;
            self.entry.capacity_freed();
            res?;
        }
        Ok(())
    }

    /// Extends the concurrency lease by the TTL. `Ok(false)` when there is no
    /// lease to renew, or it was already reclaimed (the holder lost its slot).
    pub async fn renew(&mut self) -> Result<bool, Error> {
        if !self.live || self.grant.lease.is_none() {
            return Ok(false);
        }
        Ok(self.entry.backend.renew(&self.entry.handle, &self.grant).await?)
    }

    /// Corrects the reservation to what was actually used: the windows and
    /// buckets are adjusted by the difference, up or down.
    pub async fn reconcile(&mut self, actual: ActualUsage) -> Result<(), Error> {
        if actual == self.grant.reserved {
            return Ok(());
        }
        self.entry
            .backend
            .reconcile(&self.entry.handle, &self.grant, &actual)
            .await?;
        let freed = actual.input_tokens + actual.output_tokens + actual.requests
            < self.grant.reserved.input_tokens
                + self.grant.reserved.output_tokens
                + self.grant.reserved.requests;
        self.grant.reserved = actual;
        if freed {
            self.entry.capacity_freed();
        }
        Ok(())
    }
}

impl<B: Backend> Drop for Permit<B> {
    #[inline]
    fn drop(&mut self) {
        if self.live {
            self.live = false;
            self.entry.counters.active.fetch_sub(1, Ordering::Relaxed);
            if self.grant.lease.is_some() {
                self.entry
                    .backend
                    .release_detached(&self.entry.handle, self.grant);
                self.entry.capacity_freed();
            }
        }
    }
}
