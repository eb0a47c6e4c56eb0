//! Every permit a request took is given back exactly once — when its
//! response body has been fully sent, when the client goes away first (the
//! body or the response future is dropped), when the request is refused, or
//! at the response head for WebSocket upgrades (`101`) and
//! `text/event-stream` answers, whose long-lived connections must not hold a
//! slot.

use super::{Outcome, RejectingService};
use crate::metrics::GatewayMetrics;
use crate::permits::{PermitSlot, Release};
use crate::rejection::Rejection;
use axum::body::Body;
use http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// Wraps a service so the permits its request took are released with the
/// response body.
#[derive(Debug, Clone)]
pub struct ReleaseLayer {
    metrics: Arc<GatewayMetrics>,
}

impl ReleaseLayer {
    /// A release layer counting long-lived bypasses in `metrics`.
    pub fn new(metrics: Arc<GatewayMetrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for ReleaseLayer {
    type Service = ReleaseService<S>;

    fn layer(&self, next: S) -> ReleaseService<S> {
        ReleaseService {
            metrics: Arc::clone(&self.metrics),
            next,
        }
    }
}

/// The service of [`ReleaseLayer`]: its future ([`ReleaseFuture`]) is a
/// plain value around the inner one, not a boxed one (it runs for every
/// request).
#[derive(Debug, Clone)]
pub struct ReleaseService<S> {
    metrics: Arc<GatewayMetrics>,
    next: S,
}

/// Releases the slot if the response future is dropped before it resolves
/// (the client disconnected while the upstream was still thinking) or
/// resolves to a refusal.
struct Guard(Option<PermitSlot>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.release_all();
        }
    }
}

fn is_event_stream(resp: &Response<Body>) -> bool {
    resp.headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .get(..17)
                .is_some_and(|p| p.eq_ignore_ascii_case("text/event-stream"))
        })
}

impl<S: RejectingService> tower::Service<Request<Body>> for ReleaseService<S> {
    type Response = Response<Body>;
    type Error = Rejection;
    type Future = ReleaseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        self.next.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> ReleaseFuture<S::Future> {
        // The route's slot; without the route layer nothing holds permits.
        let slot = super::context(&req).map(|c| c.slot.clone());
        let routed = slot.is_some();
        let guard = Guard(slot);
        ReleaseFuture {
            fut: self.next.call(req),
            guard,
            routed,
            metrics: Arc::clone(&self.metrics),
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner service's answer, its response body made to give the
    /// request's permits back (see [`ReleaseLayer`]).
    pub struct ReleaseFuture<F> {
        #[pin]
        fut: F,
        guard: Guard,
        // The route layer's observation gives the permits back with the
        // body: only long-lived answers are this layer's to release.
        routed: bool,
        metrics: Arc<GatewayMetrics>,
    }
}

impl<F: Future<Output = Outcome>> Future for ReleaseFuture<F> {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let this = self.project();
        let resp = match ready!(this.fut.poll(cx)) {
            Ok(resp) => resp,
            Err(rejection) => {
                // A refusal: the permits go back now.
                if let Some(slot) = this.guard.0.take() {
                    slot.release_all();
                }
                return Poll::Ready(Err(rejection));
            }
        };
        // The response arrived: from now on its body owns the slot.
        let Some(slot) = this.guard.0.take() else {
            return Poll::Ready(Ok(resp));
        };
        Poll::Ready(Ok(with_release(resp, slot, *this.routed, this.metrics)))
    }
}

/// `resp` with its body holding `slot` (unless `routed`: the route layer's
/// observation holds it), or `slot` released now when it holds nothing or
/// the answer is long-lived.
fn with_release(
    resp: Response<Body>,
    slot: PermitSlot,
    routed: bool,
    metrics: &GatewayMetrics,
) -> Response<Body> {
    if slot.is_empty() {
        return resp;
    }
    // Long-lived answers must not hold a slot: a WebSocket tunnel (101) or
    // an event stream gives its permits back at the head. The request
    // itself was counted, so a flood of upgrade requests is still limited.
    if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        metrics.bypassed("websocket");
        slot.release_all();
        return resp;
    }
    if is_event_stream(&resp) {
        metrics.bypassed("sse");
        slot.release_all();
        return resp;
    }
    if routed {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Body::new(Release::body(body, slot)))
}
