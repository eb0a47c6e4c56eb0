//! [`WatchedBody`]: a response body that shows what it yields to a
//! [`FrameWatch`] living exactly as long as the body — the one shape of the
//! bodies that count bytes and settle an observation, release a request's
//! permits at the end, or keep a connection counted as busy.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// What a [`WatchedBody`] yielded.
pub(crate) enum Seen<'a> {
    /// A frame (data or trailers).
    Frame(&'a Frame<Bytes>),
    /// An error: the body ends here.
    Error,
    /// The end of the body.
    End,
}

/// Sees what a [`WatchedBody`] yields; dropped with the body (whether it
/// ended or the client went away first).
pub(crate) trait FrameWatch {
    /// Called for each frame, error and the end, in order.
    fn seen(&mut self, _what: Seen<'_>) {}
}

pin_project_lite::pin_project! {
    /// `inner`, shown to `watch` as it is polled.
    pub(crate) struct WatchedBody<B, W> {
        #[pin]
        inner: B,
        watch: W,
    }
}

impl<B, W> WatchedBody<B, W> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: B, watch: W) -> Self {
        Self { inner, watch }
    }
}

impl<B: Body<Data = Bytes>, W: FrameWatch> Body for WatchedBody<B, W> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let out = this.inner.poll_frame(cx);
        match &out {
            Poll::Ready(Some(Ok(frame))) => this.watch.seen(Seen::Frame(frame)),
            Poll::Ready(Some(Err(_))) => this.watch.seen(Seen::Error),
            Poll::Ready(None) => this.watch.seen(Seen::End),
            Poll::Pending => {}
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
