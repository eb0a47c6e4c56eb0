//! After the pre-auth floor: a valid JWT names the tenant (claim
//! `namespaceId` by default, a non-empty string of at most 256 bytes;
//! numbers and other types are refused, so `777` and `"777"` can never share
//! a counter), or a known API key does (`gateway.auth.apiKeys`, see
//! `crate::auth::credential` for which header is read), whose resource
//! `gateway:tenant:<id>` is registered lazily with its limits (the plan's
//! tenant template, or an override: `crate::plan::overrides`). A key with limits of its own is charged those too, all or
//! nothing ([`key_limit`]). A credential that is present but invalid is
//! always `401`; a missing one is `401` only when auth is required, and
//! otherwise passes as anonymous without a tenant limit.

mod key_limit;

use super::{charged, context, context_mut, step_layer, take_ready, RejectingService, Step, StepFuture};
use crate::auth::credential::{self, Identity};
use crate::auth::{AuthError, Tenant};
use crate::backend::{AnyBackend, Broker};
use crate::metrics::{GatewayMetrics, Layer};
use crate::plan::{Endpoint, Plan};
use crate::rejection::Rejection;
use crate::resources;
use axum::body::Body;
use http::Request;
use pressure_core::ResourceHandle;
use std::sync::Arc;
use std::time::Duration;

/// Verifies JWTs and API keys and applies per-tenant (and per-key) limits.
#[derive(Clone, Debug)]
pub struct TenantLayer {
    broker: Broker,
    metrics: Arc<GatewayMetrics>,
}

impl TenantLayer {
    /// Tenants are registered in `broker`; admissions counted in `metrics`.
    pub fn new(broker: Broker, metrics: Arc<GatewayMetrics>) -> Self {
        Self { broker, metrics }
    }

    /// The resource of `tenant`, registered on first use with its limits
    /// (the plan's tenant template, or an override: `crate::plan::overrides`);
    /// none when tenants are not limited.
    fn tenant_limit(
        &self,
        plan: &Plan,
        tenant: &Tenant,
    ) -> Result<Option<ResourceHandle<AnyBackend>>, Rejection> {
        match plan.tenant_handle(&self.broker, &tenant.0) {
            None => Ok(None),
            Some(Ok(h)) => Ok(Some(h)),
            Some(Err(e)) => Err(Rejection::LimiterUnavailable {
                resource: resources::tenant(&tenant.0),
                layer: Layer::Tenant,
                retry_after: Duration::from_secs(1),
                reason: format!("tenant registration failed: {e}"),
            }),
        }
    }
}

step_layer!(TenantLayer);

impl Step for TenantLayer {
    fn step<S: RejectingService>(&self, next: &mut S, mut req: Request<Body>) -> StepFuture<S::Future> {
        let Some(plan) = context(&req).map(|r| Arc::clone(&r.plan)) else {
            return StepFuture::next(next.call(req));
        };
        let policy = plan.tenant();
        if !credential::reads_credentials(policy) {
            return StepFuture::next(next.call(req));
        }
        let Identity { tenant, key } = match credential::identify(policy, &mut req) {
            Ok(Some(who)) => who,
            Ok(None) if policy.required => {
                return StepFuture::refuse(req, Rejection::Unauthorized(AuthError::Missing))
            }
            Ok(None) => return StepFuture::next(next.call(req)),
            Err(e) => return StepFuture::refuse(req, Rejection::Unauthorized(e)),
        };
        if let Some(c) = charged(&req) {
            c.tenant(&tenant.0);
            if let Some(k) = &key {
                c.api_key(&k.label);
            }
        }
        let key_limit = key.and_then(|k| k.limit);
        let handle = match self.tenant_limit(&plan, &tenant) {
            Ok(h) => h,
            Err(refused) => return StepFuture::refuse(req, refused),
        };
        if handle.is_none() && key_limit.is_none() {
            return StepFuture::next(next.call(req));
        }
        // Only the LLM endpoints spend money: a proxied request carries no
        // payer.
        let pays = context(&req).is_some_and(|r| r.route.endpoint != Endpoint::Proxy);
        let mut next = take_ready(next);
        let metrics = Arc::clone(&self.metrics);
        StepFuture::boxed(async move {
            key_limit::charge_all(handle.as_ref(), key_limit.as_ref(), &mut req, &tenant.0, &metrics).await?;
            if let (Some(handle), Some(ctx)) = (handle.filter(|_| pays), context_mut(&mut req)) {
                ctx.payer = Some(handle);
            }
            next.call(req).await
        })
    }
}
