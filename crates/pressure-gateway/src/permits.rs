//! The permits one request holds, and the response body that gives them
//! back exactly once: when the body has been fully sent, or when it is
//! dropped first (the client went away).

use crate::backend::AnyBackend;
use crate::http::watched_body::{FrameWatch, Seen, WatchedBody};
use parking_lot::Mutex;
use pressure_core::Permit;
use smallvec::SmallVec;
use std::sync::Arc;

/// Permits taken for one request, shared by the layers through the request
/// extensions. Releasing drains them, so later clones hold nothing.
#[derive(Clone, Default)]
pub(crate) struct PermitSlot(Arc<Mutex<Held>>);

/// The permits of a slot: most requests hold one, which lives inline (no
/// allocation beyond the slot's own).
type Held = SmallVec<[Permit<AnyBackend>; 1]>;

impl std::fmt::Debug for PermitSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PermitSlot").field(&self.0.lock().len()).finish()
    }
}

impl PermitSlot {
    /// Holds `permit` until the request ends.
    pub(crate) fn push(&self, permit: Permit<AnyBackend>) {
        self.0.lock().push(permit);
    }

    /// Gives every held permit back now (idempotent).
    pub(crate) fn release_all(&self) {
        // Dropped (given back) outside the lock, first taken first.
        let drained = std::mem::take(&mut *self.0.lock());
        drop(drained);
    }

    /// Another handle on this slot, for a new request, when this handle
    /// is the only one left (the request it served is over): its permits,
    /// if any were left in it, are given back first.
    pub(crate) fn reclaim(&mut self) -> Option<PermitSlot> {
        // Unique: no other handle exists, and none can be made but from
        // this one, so the count cannot rise behind this check.
        let held = Arc::get_mut(&mut self.0)?;
        drop(std::mem::take(held.get_mut()));
        Some(self.clone())
    }

    /// Permits held now.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether no permit is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A response body that releases its request's permits at end of stream,
/// on error, or when dropped.
pub(crate) type PermitBody<B> = WatchedBody<B, Release>;

/// Releases a request's permits once: at the end of its response body, on
/// its error, or when the body is dropped first.
pub(crate) struct Release(Option<PermitSlot>);

impl Release {
    /// The response body of a request whose permits are in `slot`.
    pub(crate) fn body<B>(inner: B, slot: PermitSlot) -> PermitBody<B> {
        WatchedBody::new(inner, Release(Some(slot)))
    }

    fn now(&mut self) {
        if let Some(slot) = self.0.take() {
            slot.release_all();
        }
    }
}

impl FrameWatch for Release {
    fn seen(&mut self, what: Seen<'_>) {
        if matches!(what, Seen::End | Seen::Error) {
            self.now();
        }
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        self.now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Broker;
    use pressure_core::{AcquireOptions, Limits, MemoryBackend, ResourceBroker};

    #[tokio::test]
    async fn a_slot_is_reclaimed_only_once_its_request_let_go_and_then_holds_nothing() {
        let broker: Broker = ResourceBroker::builder(AnyBackend::Memory(MemoryBackend::new())).build();
        broker
            .register_limit("slots", Limits::default().max_concurrent_requests(1))
            .expect("register");
        let take = || async {
            broker
                .try_acquire("slots", AcquireOptions::default())
                .await
                .expect("acquire")
                .into_permit()
        };

        let mut kept = PermitSlot::default();
        let request = kept.clone();
        request.push(take().await.expect("granted"));
        // The request still holds it: not reclaimed, its permit held.
        assert!(kept.reclaim().is_none());
        assert!(take().await.is_none(), "the only slot is in use");

        // A request that ended without giving its permit back (the
        // observation always does) leaves nothing behind either.
        drop(request);
        let next = kept.reclaim().expect("the request is over");
        assert!(next.is_empty());
        let permit = take().await.expect("given back on reclaim");
        next.push(permit);
        assert!(kept.reclaim().is_none(), "the next request holds it now");
        next.release_all();
        drop(next);
        let again = kept.reclaim().expect("reclaimed again");
        assert!(again.is_empty());
        assert!(take().await.is_some(), "released by the request");
    }
}
