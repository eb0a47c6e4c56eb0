//! The three tower layers of the request path, outermost first:
//!
//! 1. [`release`]: gives every permit of a request back once its response
//!    body has been sent, or the client went away first.
//! 2. [`pre_auth`]: before auth, the route's (or service's) limit — a cheap
//!    floor against floods.
//! 3. [`tenant`]: verifies the JWT and applies the tenant's limit.
//!
//! A denial is a `429` with `Retry-After` and IETF `RateLimit` /
//! `RateLimit-Policy` headers ([`deny`]), logged as structured fields.

pub mod deny;
pub mod pre_auth;
pub mod release;
pub mod tenant;

use crate::backend::AnyBackend;
use crate::metrics::{GatewayMetrics, Layer};
use crate::permits::PermitSlot;
use axum::body::Body;
use http::{Request, Response, StatusCode};
use pressure_core::{AcquireOptions, Acquisition, ResourceHandle};

/// The permit slot of a request: the one the release layer put in its
/// extensions, or a new one (then the permits live as long as the request).
pub(crate) fn slot_of<B>(req: &mut http::Request<B>) -> PermitSlot {
    match req.extensions().get::<PermitSlot>() {
        Some(s) => s.clone(),
        None => {
            let s = PermitSlot::default();
            req.extensions_mut().insert(s.clone());
            s
        }
    }
}

/// Charges one request to `handle` for `layer`: on a grant the permit joins
/// the request's slot (`Ok`); a denial is the 429 to answer, a limiter
/// failure a 503 (`Err`).
pub(crate) async fn charge(
    handle: &ResourceHandle<AnyBackend>,
    req: &mut Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
) -> Result<(), Response<Body>> {
    match handle.try_acquire(AcquireOptions::default()).await {
        Ok(Acquisition::Granted(permit)) => {
            metrics.allowed(layer);
            slot_of(req).push(permit);
            Ok(())
        }
        Ok(Acquisition::Denied(d)) => Err(deny::too_many_requests(
            handle.id(),
            handle.limits(),
            &d,
            layer,
            namespace_id,
            metrics,
        )),
        Err(e) => {
            tracing::warn!(resource = handle.id(), error = %e, "limiter failed");
            Err(limiter_unavailable())
        }
    }
}

/// The 503 of a limiter that could not decide.
pub(crate) fn limiter_unavailable() -> Response<Body> {
    deny::json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "limiter_unavailable",
        "the limiter could not decide; try again",
    )
}
