//! Charging a request to a resource on the broker: a grant joins the
//! request's permit slot (and what it was charged, when its plan records
//! that); a denial is a 429, an outage a 503 `limiter_unavailable`.

use super::context;
use crate::backend::AnyBackend;
use crate::metrics::shadow::ShadowDenial;
use crate::metrics::{GatewayMetrics, Layer};
use crate::rejection::{RateLimited, Rejection};
use axum::body::Body;
use http::Request;
use pressure_core::{AcquireOptions, Acquisition, Denial, Permit, ResourceHandle};
use std::time::Duration;

/// How long a client is told to wait when the limiter failed outright.
const LIMITER_RETRY: Duration = Duration::from_secs(1);

/// Charges one request to `handle` for `layer`: on a grant the permit joins
/// the request's slot; a denial is a 429, an outage (or a limiter failure)
/// a 503 `limiter_unavailable`.
pub(crate) async fn charge(
    handle: &ResourceHandle<AnyBackend>,
    req: &mut Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
) -> Result<(), Rejection> {
    let permit = acquire(handle, req, layer, namespace_id, metrics).await?;
    hold(req, handle, permit);
    Ok(())
}

/// [`charge`] without holding the permit yet: for a caller that charges
/// several resources all or nothing, and gives this grant back (refund,
/// then drop) when a later one refuses.
pub(crate) async fn acquire(
    handle: &ResourceHandle<AnyBackend>,
    req: &mut Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
) -> Result<Permit<AnyBackend>, Rejection> {
    let answer = handle.try_acquire(options_of(req)).await;
    settle(handle, req, layer, namespace_id, metrics, answer)
}

/// [`acquire`] when the backend answers at once (in-process state), `None`
/// when it must be awaited: a layer that gets its answer here needs no
/// future of its own for the request.
pub(crate) fn acquire_if_ready(
    handle: &ResourceHandle<AnyBackend>,
    req: &Request<Body>,
    layer: Layer,
    metrics: &GatewayMetrics,
) -> Option<Result<Permit<AnyBackend>, Rejection>> {
    let answer = handle.try_acquire_now_if_local(&options_of(req))?;
    Some(settle(handle, req, layer, None, metrics, answer))
}

/// The acquisition options of a request: no concurrency lease when its
/// context says so.
pub(crate) fn options_of(req: &Request<Body>) -> AcquireOptions {
    match context(req) {
        Some(c) if !c.leases => AcquireOptions::default().without_lease(),
        _ => AcquireOptions::default(),
    }
}

/// A grant counted, or the refusal an answer of `handle` makes.
fn settle(
    handle: &ResourceHandle<AnyBackend>,
    req: &Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
    answer: Result<Acquisition<AnyBackend>, pressure_core::Error>,
) -> Result<Permit<AnyBackend>, Rejection> {
    match answer {
        Ok(Acquisition::Granted(permit)) => {
            metrics.allowed(layer);
            Ok(permit)
        }
        Ok(Acquisition::Denied(d)) => {
            // The one check a shadow limit adds, on the denial path only.
            if handle.limits().shadow && !d.is_unavailable() {
                metrics.allowed(layer);
                return Ok(admit_shadow(handle, req, layer, namespace_id, metrics, &d));
            }
            Err(denied(handle, req, layer, namespace_id, &d))
        }
        Err(e) => Err(failed(handle, layer, &e)),
    }
}

/// The denial `d` of `handle`'s shadow limit, admitted: counted in the
/// resource's `shadowDenied` and in `pressure_shadow_denied_total`, logged
/// with `shadow: true`; the request goes on with an inert permit (the
/// denial consumed nothing). The caller counts the layer's admission.
#[cold]
#[inline(never)]
pub(crate) fn admit_shadow(
    handle: &ResourceHandle<AnyBackend>,
    req: &Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
    d: &Denial,
) -> Permit<AnyBackend> {
    let lines = context(req).map_or(0, |c| c.plan.denial_lines());
    let namespace_id = namespace_id.or_else(|| handle.id().strip_prefix(crate::resources::TENANT_PREFIX));
    let shadow = ShadowDenial {
        resource: handle.id(),
        layer,
        dimension: d.dimension.as_str(),
        wait: d.wait,
        namespace_id,
    };
    metrics.shadow_denied(&shadow, lines);
    handle.admit_shadow_denial()
}

/// The refusal of `handle`'s denial `d`: `429` for a limit (a spent
/// calendar budget says so), `503` when its store could not decide.
pub(crate) fn denied(
    handle: &ResourceHandle<AnyBackend>,
    req: &Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    d: &Denial,
) -> Rejection {
    if d.is_unavailable() {
        return Rejection::LimiterUnavailable {
            resource: handle.id().to_owned(),
            layer,
            retry_after: d.wait.max(LIMITER_RETRY),
            reason: "the limiter store is unavailable".into(),
        };
    }
    // The request's deadline is the gateway's upstream timeout.
    let deadline = context(req).map_or(Duration::ZERO, |r| r.plan.upstream_timeout());
    let limits = handle.limits();
    let r = RateLimited::new(handle.id(), limits, d, layer, namespace_id).with_budget(limits, deadline);
    Rejection::RateLimited(Box::new(r))
}

/// The refusal when `handle` could not be asked at all (`e`).
pub(crate) fn failed(
    handle: &ResourceHandle<AnyBackend>,
    layer: Layer,
    e: &pressure_core::Error,
) -> Rejection {
    Rejection::LimiterUnavailable {
        resource: handle.id().to_owned(),
        layer,
        retry_after: LIMITER_RETRY,
        reason: e.to_string(),
    }
}

/// Holds `permit` (granted on `handle`) until the request ends: in its
/// slot, and recorded as charged.
pub(crate) fn hold(req: &mut Request<Body>, handle: &ResourceHandle<AnyBackend>, permit: Permit<AnyBackend>) {
    let Some(ctx) = context(req) else {
        // No route layer: nothing holds permits past this call.
        return;
    };
    ctx.slot.push(permit);
    if let Some(c) = &ctx.charged {
        c.charged(handle);
    }
}
