//! Every permit a request took is given back exactly once — when its
//! response body has been fully sent, when the client goes away first (the
//! body or the response future is dropped), when the request is refused, or
//! at the response head for WebSocket upgrades (`101`) and
//! `text/event-stream` answers, whose long-lived connections must not hold a
//! slot.

use super::{step_layer, RejectingService, Step, StepFuture};
use crate::metrics::GatewayMetrics;
use crate::permits::{PermitSlot, Release};
use axum::body::Body;
use http::{Request, Response};
use std::sync::Arc;

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

step_layer!(ReleaseLayer);

/// Releases the slot if the response future is dropped before it resolves
/// (the client disconnected while the upstream was still thinking) or
/// resolves to a refusal.
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
                .get(..17)
                .is_some_and(|p| p.eq_ignore_ascii_case("text/event-stream"))
        })
}

impl Step for ReleaseLayer {
    fn step<S: RejectingService>(&self, next: &mut S, mut req: Request<Body>) -> StepFuture<S::Future> {
        let slot = PermitSlot::default();
        req.extensions_mut().insert(slot.clone());
        let mut guard = Guard(Some(slot.clone()));
        let fut = next.call(req);
        let metrics = Arc::clone(&self.metrics);
        StepFuture::boxed(async move {
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
            Ok(Response::from_parts(parts, Body::new(Release::body(body, slot))))
        })
    }
}
