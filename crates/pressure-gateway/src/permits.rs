//! The permits one request holds, and the response body that gives them
//! back exactly once: when the body has been fully sent, or when it is
//! dropped first (the client went away).

use crate::backend::AnyBackend;
use crate::watched_body::{FrameWatch, Seen, WatchedBody};
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
