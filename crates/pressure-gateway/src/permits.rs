//! The permits one request holds, and the response body that gives them
//! back exactly once: when the body has been fully sent, or when it is
//! dropped first (the client went away).

use crate::backend::AnyBackend;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use pressure_core::Permit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Permits taken for one request, shared by the layers through the request
/// extensions. Releasing drains them, so later clones hold nothing.
#[derive(Clone, Default)]
pub(crate) struct PermitSlot(Arc<Mutex<Vec<Permit<AnyBackend>>>>);

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
        let drained: Vec<_> = std::mem::take(&mut *self.0.lock());
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

pin_project_lite::pin_project! {
    /// A response body that releases its request's permits at end of stream,
    /// on error, or when dropped.
    pub struct PermitBody<B> {
        #[pin]
        inner: B,
        slot: Option<PermitSlot>,
    }

    impl<B> PinnedDrop for PermitBody<B> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(slot) = this.project().slot.take() {
                slot.release_all();
            }
        }
    }
}

impl<B> PermitBody<B> {
    /// Wraps `inner`; `slot`'s permits are released when it ends.
    pub(crate) fn new(inner: B, slot: PermitSlot) -> Self {
        Self {
            inner,
            slot: Some(slot),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for PermitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let out = this.inner.poll_frame(cx);
        if matches!(out, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            if let Some(slot) = this.slot.take() {
                slot.release_all();
            }
        }
        out
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
