//! An API key's own limit (`gateway.auth.apiKeys[i].limits`, resource
//! `gateway:apikey:<label>`), charged together with its tenant's: both or
//! neither.

use super::super::{acquire, charge, hold};
use crate::backend::AnyBackend;
use crate::metrics::{GatewayMetrics, Layer};
use crate::rejection::Rejection;
use axum::body::Body;
use http::Request;
use pressure_core::{Permit, ResourceHandle};

/// Charges `req` to its key's own limit (`key`), then to its tenant's
/// (`tenant`), all or nothing.
///
/// The key goes first, so a key past its own limit never takes — not even
/// for a moment — a share of the quota its tenant's other keys draw from.
/// When the tenant then refuses, the key's grant is refunded (its rate
/// dimensions, as if never granted) and its permit dropped (its
/// concurrency lease): a refused request consumes nothing of either. A
/// request dropped while waiting on the tenant drops the key's permit too;
/// its rate charge then stays, like any request that was admitted and
/// abandoned.
pub(super) async fn charge_all(
    tenant: Option<&ResourceHandle<AnyBackend>>,
    key: Option<&ResourceHandle<AnyBackend>>,
    req: &mut Request<Body>,
    namespace_id: &str,
    metrics: &GatewayMetrics,
) -> Result<(), Rejection> {
    let ns = Some(namespace_id);
    let Some(key) = key else {
        return match tenant {
            Some(t) => charge(t, req, Layer::Tenant, ns, metrics).await,
            None => Ok(()),
        };
    };
    let permit = acquire(key, req, Layer::Tenant, ns, metrics).await?;
    if let Some(t) = tenant {
        if let Err(refused) = charge(t, req, Layer::Tenant, ns, metrics).await {
            give_back(key, permit).await;
            return Err(refused);
        }
    }
    hold(req, key, permit);
    Ok(())
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
