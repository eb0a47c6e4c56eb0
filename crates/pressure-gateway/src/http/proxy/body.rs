//! The client's request body on its way upstream, watched: when it fails,
//! the proxy must blame the client (`400` for a malformed body, `408` for
//! one that stopped arriving, `413` for one over the limit), not the
//! upstream whose exchange it broke.

use super::failure::ProxyFailure;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// What went wrong with the client's body, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    TooLarge,
    Malformed,
    TooSlow,
}

/// Shared between the body (which records) and the proxy (which reads).
#[derive(Debug, Clone)]
pub(crate) struct ClientFault {
    fault: Arc<Mutex<Option<Fault>>>,
    max_body: u64,
}

impl ClientFault {
    /// A record for a body limited to `max_body` bytes.
    pub(crate) fn new(max_body: u64) -> Self {
        Self {
            fault: Arc::default(),
            max_body,
        }
    }

    fn set(&self, f: Fault) {
        self.fault.lock().get_or_insert(f);
    }

    /// The client's fault, if its body failed.
    pub(crate) fn take(&self) -> Option<ProxyFailure> {
        self.fault.lock().take().map(|f| match f {
            Fault::TooLarge => ProxyFailure::BodyTooLarge { max: self.max_body },
            Fault::Malformed => ProxyFailure::BodyMalformed,
            Fault::TooSlow => ProxyFailure::BodyTimeout { whole_ms: None },
        })
    }
}

/// Whether `err` (or a source of it) is the body limit's cut.
pub(crate) fn is_too_large(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The error of a body that stopped arriving.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received within {0:?} of the last bytes")]
pub(crate) struct BodyTimeout(Duration);

pin_project_lite::pin_project! {
    /// A request body that records its failures in a [`ClientFault`] and
    /// fails when no bytes arrive for `idle` (when set).
    pub(crate) struct ClientBody<B> {
        #[pin]
        inner: B,
        fault: ClientFault,
        idle: Option<Duration>,
        timer: Option<Pin<Box<Sleep>>>,
    }
}

impl<B> ClientBody<B> {
    /// Watches `inner`.
    pub(crate) fn new(inner: B, fault: ClientFault, idle: Option<Duration>) -> Self {
        Self {
            inner,
            fault,
            idle,
            timer: None,
        }
    }
}

impl<B> Body for ClientBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(idle), Some(t)) = (*this.idle, this.timer.as_mut()) {
                    t.as_mut().reset(Instant::now() + idle);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let e: Self::Error = e.into();
                this.fault.set(if is_too_large(e.as_ref()) {
                    Fault::TooLarge
                } else {
                    Fault::Malformed
                });
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let Some(idle) = *this.idle else {
                    return Poll::Pending;
                };
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.fault.set(Fault::TooSlow);
                        Poll::Ready(Some(Err(Box::new(BodyTimeout(idle)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

use std::future::Future as _;
