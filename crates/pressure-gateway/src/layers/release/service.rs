//! [`Release`]: puts a [`PermitSlot`] in the request, and hands it to the
//! response body ([`PermitBody`]) — or releases it if the response never
//! comes.

use crate::metrics::GatewayMetrics;
use crate::permits::{PermitBody, PermitSlot};
use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, Response};
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

/// See [`super::ReleaseLayer`].
#[derive(Debug, Clone)]
pub struct Release<S> {
    inner: S,
    metrics: Arc<GatewayMetrics>,
}

impl<S> Release<S> {
    pub(crate) fn new(inner: S, metrics: Arc<GatewayMetrics>) -> Self {
        Self { inner, metrics }
    }
}

/// Releases the slot if the response future is dropped before it resolves
/// (the client disconnected while the upstream was still thinking).
struct Guard(Option<PermitSlot>);

impl Guard {
    /// The response arrived: from now on its body owns the slot.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

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
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

impl<S> tower::Service<Request<Body>> for Release<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let slot = PermitSlot::default();
        req.extensions_mut().insert(slot.clone());
        let mut guard = Guard(Some(slot.clone()));
        let fut = self.inner.call(req);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let resp = fut.await?;
            guard.disarm();
            if slot.is_empty() {
                return Ok(resp);
            }
            // Long-lived answers must not hold a slot: a WebSocket tunnel
            // (101) or an event stream gives its permits back at the head.
            // The request itself was counted, so a flood of upgrade
            // requests is still limited.
            if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                metrics.bypassed("websocket");
                slot.release_all();
                return Ok(resp);
            }
            if is_event_stream(&resp) {
                metrics.bypassed("sse");
                slot.release_all();
                return Ok(resp);
            }
            let (parts, body) = resp.into_parts();
            Ok(Response::from_parts(
                parts,
                Body::new(PermitBody::new(body, slot)),
            ))
        })
    }
}
