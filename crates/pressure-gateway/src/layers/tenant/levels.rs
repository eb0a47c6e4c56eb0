//! Charging a request to every level it belongs to — its API key's own
//! limit (`gateway:apikey:<label>`), its tenant, and the tenant's ancestors
//! (nested budgets, `crate::plan::hierarchy`) — all or nothing, as one
//! nested reservation (`pressure_core::Nest`): one decision in memory, one
//! script call on Redis. A refusal names the level that refused (its
//! resource) and the dimension; nothing is consumed on any level.
//!
//! The key's own limit goes in the same reservation when the store can
//! take it there. On Redis Cluster a config key's resource lives in a hash
//! slot of its own, not its tenant hierarchy's, and the store says so
//! (`Unsupported`): the key is then charged first and given back (its rate
//! units refunded, its lease released) when the hierarchy refuses — all or
//! nothing still, in two calls.

use super::super::{charge, denied, failed, hold, options_of};
use crate::backend::AnyBackend;
use crate::metrics::{GatewayMetrics, Layer};
use crate::rejection::Rejection;
use axum::body::Body;
use http::Request;
use pressure_core::{AcquireOptions, BackendError, Nest, NestAcquisition, NestError, Permit, ResourceHandle};

/// Charges `req` to `key` (its own limit, if any) and every level of
/// `chain` (the tenant, then its ancestors), all or nothing.
pub(super) async fn charge_all(
    key: Option<&ResourceHandle<AnyBackend>>,
    chain: &[ResourceHandle<AnyBackend>],
    req: &mut Request<Body>,
    namespace_id: &str,
    metrics: &GatewayMetrics,
) -> Result<(), Rejection> {
    let ns = Some(namespace_id);
    match (key, chain) {
        (None, []) => return Ok(()),
        (None, [one]) => return charge(one, req, Layer::Tenant, ns, metrics).await,
        (Some(one), []) => return charge(one, req, Layer::Tenant, ns, metrics).await,
        _ => {}
    }
    let levels: Vec<ResourceHandle<AnyBackend>> = key.into_iter().chain(chain).cloned().collect();
    match nest(&levels, options_of(req)).await {
        Err(NestError {
            error: pressure_core::Error::Backend(BackendError::Unsupported(_)),
            ..
        }) if key.is_some() => {}
        out => return settle(&levels, out, req, ns, metrics),
    }
    // The store cannot hold the key's slot beside the hierarchy's (module
    // docs): the key first, given back if the hierarchy refuses.
    let Some(key) = key else { return Ok(()) };
    let permit = super::super::acquire(key, req, Layer::Tenant, ns, metrics).await?;
    let out = nest(chain, options_of(req)).await;
    if let Err(refused) = settle(chain, out, req, ns, metrics) {
        give_back(key, permit).await;
        return Err(refused);
    }
    hold(req, key, permit);
    Ok(())
}

/// One nested reservation of `req` on `levels`.
async fn nest(
    levels: &[ResourceHandle<AnyBackend>],
    opts: AcquireOptions,
) -> Result<NestAcquisition<AnyBackend>, NestError> {
    Nest::new(levels.to_vec()).try_acquire(opts).await
}

/// Holds the permits of a granted reservation, or makes the refusal of
/// the level that refused.
fn settle(
    levels: &[ResourceHandle<AnyBackend>],
    out: Result<NestAcquisition<AnyBackend>, NestError>,
    req: &mut Request<Body>,
    ns: Option<&str>,
    metrics: &GatewayMetrics,
) -> Result<(), Rejection> {
    match out {
        Ok(NestAcquisition::Granted(permits)) => {
            metrics.allowed(Layer::Tenant);
            for (h, p) in levels.iter().zip(permits) {
                hold(req, h, p);
            }
            Ok(())
        }
        Ok(NestAcquisition::Denied { level, denial }) => match levels.get(level) {
            Some(h) => Err(denied(h, req, Layer::Tenant, ns, &denial)),
            None => Err(no_level(level)),
        },
        Err(NestError { level, error }) => match levels.get(level) {
            Some(h) => Err(failed(h, Layer::Tenant, &error)),
            None => Err(no_level(level)),
        },
    }
}

/// A level index the nest does not have (a broken backend): unavailable.
fn no_level(level: usize) -> Rejection {
    Rejection::LimiterUnavailable {
        resource: crate::resources::tenant(""),
        layer: Layer::Tenant,
        retry_after: std::time::Duration::from_secs(1),
        reason: format!("the limiter named level {level} of a shorter chain"),
    }
}

/// Refunds `permit`'s grant on `handle` and drops it (releasing its lease).
/// A failed refund is logged: the key's rate dimensions then keep the
/// request until their window passes.
async fn give_back(handle: &ResourceHandle<AnyBackend>, permit: Permit<AnyBackend>) {
    if let Err(e) = handle.refund(permit.grant()).await {
        tracing::warn!(resource = handle.id(), error = %e, "API key limit not refunded");
    }
    drop(permit);
}
