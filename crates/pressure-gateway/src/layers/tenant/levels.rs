//! Charging a request to every level it belongs to — its API key's own
//! limit (`gateway:apikey:<label>`), its tenant, and the tenant's ancestors
//! (nested budgets, `crate::plan::hierarchy`) — all or nothing, as one
//! nested reservation (`pressure_core::Nest`): one decision in memory, one
//! script call on Redis. A refusal names the level that refused (its
//! resource) and the dimension; nothing is consumed on any level.
//!
//! The key's own limit goes in the same reservation. On Redis Cluster a
//! key's resource starts in a hash slot of its own, not its tenant
//! hierarchy's, and the store says so (`Unsupported`) before anything is
//! charged: the key is then moved into the group of the hierarchy's root
//! (its counts start afresh there, once) and the reservation asked again.
//! Should the store still refuse to nest them, the key is charged first and
//! given back (its rate units refunded, its lease released) when the
//! hierarchy refuses — all or nothing still, in two calls.

use super::super::{acquire, admit_shadow, denied, failed, hold, options_of};
use crate::backend::{AnyBackend, Broker};
use crate::metrics::{GatewayMetrics, Layer};
use crate::rejection::Rejection;
use axum::body::Body;
use http::Request;
use pressure_core::{
    AcquireOptions, BackendError, Grant, Nest, NestAcquisition, NestError, Permit, ResourceHandle,
};

/// Charges `req` to `key` (its own limit, if any) and every level of
/// `chain` (the tenant, then its ancestors), all or nothing: the grants,
/// level by level (key first), for the LLM endpoints to give the request
/// back when a level refuses the call's money.
pub(super) async fn charge_all(
    broker: &Broker,
    key: Option<&ResourceHandle<AnyBackend>>,
    chain: &[ResourceHandle<AnyBackend>],
    req: &mut Request<Body>,
    namespace_id: &str,
    metrics: &GatewayMetrics,
) -> Result<Vec<Grant>, Rejection> {
    let ns = Some(namespace_id);
    match (key, chain) {
        (None, []) => return Ok(Vec::new()),
        (None, [one]) | (Some(one), []) => {
            let permit = acquire(one, req, Layer::Tenant, ns, metrics).await?;
            let grant = *permit.grant();
            hold(req, one, permit);
            return Ok(vec![grant]);
        }
        _ => {}
    }
    let levels: Vec<ResourceHandle<AnyBackend>> = key.into_iter().chain(chain).cloned().collect();
    let mut out = nest(&levels, options_of(req)).await;
    if let (true, Some(key), Some(root)) = (unsupported(&out), key, chain.last()) {
        if regroup(broker, key, root.id()) {
            out = nest(&levels, options_of(req)).await;
        }
    }
    if !(unsupported(&out) && key.is_some()) {
        return settle(&levels, out, req, ns, metrics).await;
    }
    // The store cannot hold the key's slot beside the hierarchy's (module
    // docs): the key first, given back if the hierarchy refuses.
    let Some(key) = key else { return Ok(Vec::new()) };
    let permit = acquire(key, req, Layer::Tenant, ns, metrics).await?;
    let out = nest(chain, options_of(req)).await;
    let mut grants = vec![*permit.grant()];
    match settle(chain, out, req, ns, metrics).await {
        Ok(rest) => grants.extend(rest),
        Err(refused) => {
            give_back(key, permit).await;
            return Err(refused);
        }
    }
    hold(req, key, permit);
    Ok(grants)
}

/// Whether the store could not nest the levels (they are in different
/// hash slots of a Redis Cluster).
fn unsupported(out: &Result<NestAcquisition<AnyBackend>, NestError>) -> bool {
    matches!(
        out,
        Err(NestError {
            error: pressure_core::Error::Backend(BackendError::Unsupported(_)),
            ..
        })
    )
}

/// Moves `key`'s resource into the group `root` (its hierarchy's root's
/// resource); whether it moved.
fn regroup(broker: &Broker, key: &ResourceHandle<AnyBackend>, root: &str) -> bool {
    let moved = pressure_core::LimitTemplate::new(key.limits())
        .map_err(|e| e.to_string())
        .and_then(|t| {
            broker
                .lazy_limit_in_group(key.id(), root, &t)
                .map_err(|e| e.to_string())
        });
    match moved {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(resource = key.id(), group = root, error = %e, "API key not moved into its hierarchy's slot");
            false
        }
    }
}

/// One nested reservation of `req` on `levels`.
async fn nest(
    levels: &[ResourceHandle<AnyBackend>],
    opts: AcquireOptions,
) -> Result<NestAcquisition<AnyBackend>, NestError> {
    Nest::new(levels.to_vec()).try_acquire(opts).await
}

/// Holds the permits of a granted reservation (their grants, level by
/// level), or makes the refusal of the level that refused. A level in
/// shadow mode that refuses is admitted: its would-be refusal counted
/// (nothing was consumed on any level), and the reservation asked again
/// without it, so the other levels decide for real.
async fn settle(
    levels: &[ResourceHandle<AnyBackend>],
    mut out: Result<NestAcquisition<AnyBackend>, NestError>,
    req: &mut Request<Body>,
    ns: Option<&str>,
    metrics: &GatewayMetrics,
) -> Result<Vec<Grant>, Rejection> {
    // Indices (into `levels`) of the shadow levels admitted so far.
    let mut shadowed: Vec<usize> = Vec::new();
    loop {
        // The index into `levels` of the nest's level `n` (the levels
        // asked, without those shadowed): `n` itself until one is.
        let live = |n: usize| (0..levels.len()).filter(|i| !shadowed.contains(i)).nth(n);
        match out {
            Ok(NestAcquisition::Granted(permits)) => {
                metrics.allowed(Layer::Tenant);
                return Ok(hold_levels(levels, &shadowed, permits, req));
            }
            Ok(NestAcquisition::Denied { level, denial }) => {
                let Some(at) = live(level) else {
                    return Err(no_level(level));
                };
                let h = &levels[at];
                if !h.limits().shadow || denial.is_unavailable() {
                    return Err(denied(h, req, Layer::Tenant, ns, &denial));
                }
                drop(admit_shadow(h, req, Layer::Tenant, ns, metrics, &denial));
                shadowed.push(at);
                let rest: Vec<ResourceHandle<AnyBackend>> = (0..levels.len())
                    .filter(|i| !shadowed.contains(i))
                    .map(|i| levels[i].clone())
                    .collect();
                out = match rest.is_empty() {
                    true => Ok(NestAcquisition::Granted(Vec::new())),
                    false => nest(&rest, options_of(req)).await,
                };
            }
            Err(NestError { level, error }) => {
                return match live(level) {
                    Some(at) => Err(failed(&levels[at], Layer::Tenant, &error)),
                    None => Err(no_level(level)),
                };
            }
        }
    }
}

/// Holds `permits` (one per level not in `shadowed`, in order) and an
/// inert permit for each shadowed level; their grants, level by level.
fn hold_levels(
    levels: &[ResourceHandle<AnyBackend>],
    shadowed: &[usize],
    permits: Vec<Permit<AnyBackend>>,
    req: &mut Request<Body>,
) -> Vec<Grant> {
    let mut permits = permits.into_iter();
    let mut grants = Vec::with_capacity(levels.len());
    for (i, h) in levels.iter().enumerate() {
        let p = match shadowed.contains(&i) {
            true => Permit::inert(),
            false => permits.next().unwrap_or_else(Permit::inert),
        };
        grants.push(*p.grant());
        hold(req, h, p);
    }
    grants
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
