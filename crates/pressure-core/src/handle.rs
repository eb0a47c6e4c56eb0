//! [`ResourceHandle`]: the public, pre-resolved reference to a registered
//! resource, for callers that acquire on the same resource again and again.

use crate::acquisition::{AcquireOptions, Acquisition};
use crate::backend::{Backend, Denial, Grant, LocalBackend, Reserved, Usage};
use crate::entry::Entry;
use crate::error::Error;
use crate::limits::{LimitSpec, Limits};
use crate::MemoryBackend;
use std::sync::Arc;

/// A pre-resolved reference to a registered resource: acquiring through it
/// skips the id lookup. Keeps the resource from being evicted while held.
///
/// A handle follows changes of the resource's limits
/// ([`crate::ResourceBroker::set_limits`]): acquisitions through it count
/// against the newest limits. After [`crate::ResourceBroker::unregister`] it
/// still counts on the resource's last state, which is no longer
/// registered; get a fresh handle from the broker after a reload.
#[derive(Debug)]
pub struct ResourceHandle<B: Backend = MemoryBackend> {
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
    pub fn limits(&self) -> &Limits {
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
    pub async fn usage(&self) -> Result<Usage, Error> {
        let e = self.entry.current();
        Ok(e.backend.usage(&e.handle).await?)
    }

    /// Gives back everything `grant` (from a permit of this resource, see
    /// [`Permit::grant`](crate::Permit::grant)) counted on the rate dimensions, as if it had never
    /// been granted: for a caller that takes several resources in turn and
    /// must undo the ones it took when a later one refuses ("all must
    /// pass", a denial consumes nothing). Works on every permit, also an
    /// inert one, whose own [`Permit::reconcile`](crate::Permit::reconcile) is a no-op; a concurrency
    /// lease is not touched (release the permit for that). Settled by the
    /// backend like a reconcile, also if this future is dropped.
    pub async fn refund(&self, grant: &Grant) -> Result<(), Error> {
        let e = self.entry.current();
        let none = Reserved::default();
        Ok(e.backend.reconcile(&e.handle, grant, &none).await?)
    }

    /// A denial of this resource that its caller admits anyway because the
    /// limits are in shadow mode ([`Limits::shadow`]): counted in the
    /// resource's `shadowDenied`, and an inert permit (it holds, gives back
    /// and reconciles nothing: the denial consumed nothing) to carry on
    /// with. The denial itself was already counted in `denied`.
    #[cold]
    pub fn admit_shadow_denial(&self) -> crate::Permit<B> {
        let counters = self.entry.current().counters();
        counters
            .shadow_denied
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::Permit::inert()
    }

    /// Check+reject: reserve `opts` now or get a denial with its wait time.
    #[inline]
    pub async fn try_acquire(&self, opts: AcquireOptions) -> Result<Acquisition<B>, Error> {
        // Answered in the first poll without a nested future when the
        // backend can (the result is moved once, not through every layer).
        if let Some(out) = self.entry.try_acquire_now_if_local(&opts) {
            return out;
        }
        self.entry.try_acquire_awaited(&opts).await
    }

    /// [`ResourceHandle::try_acquire`] answered without a future when the
    /// backend can answer at once (its state is in this process); `None`
    /// when it must be awaited (then call `try_acquire`). For a caller on
    /// any backend that saves its future on the in-process one, such as a
    /// request path that would otherwise box one per request.
    #[inline]
    pub fn try_acquire_now_if_local(&self, opts: &AcquireOptions) -> Option<Result<Acquisition<B>, Error>> {
        self.entry.try_acquire_now_if_local(opts)
    }

    /// Check+reject without a future, on a backend whose state is in this
    /// process (the in-memory backend): for synchronous code paths.
    #[inline]
    pub fn try_acquire_now(&self, opts: AcquireOptions) -> Result<Acquisition<B>, Error>
    where
        B: LocalBackend,
    {
        self.entry.try_acquire_now(&opts)
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
        B: LocalBackend,
    {
        self.entry.check_now(&opts)
    }
}
