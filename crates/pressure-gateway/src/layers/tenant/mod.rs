//! After the pre-auth floor: a valid JWT names the tenant (claim
//! `namespaceId` by default, a non-empty string of at most 256 bytes;
//! numbers and other types are refused, so `777` and `"777"` can never share
//! a counter), or a known API key does (`gateway.auth.apiKeys`, see
//! `crate::auth::credential` for which header is read), whose resource
//! `gateway:tenant:<id>` is registered lazily with its limits (the plan's
//! tenant template, or an override: `crate::plan::overrides`). A key with
//! limits of its own, and every ancestor of the tenant (nested budgets,
//! `crate::plan::hierarchy`), are charged with it, all or nothing
//! ([`levels`]). A credential that is present but invalid is
//! always `401`; a missing one is `401` only when auth is required, and
//! otherwise passes as anonymous without a tenant limit.

mod levels;

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
use pressure_core::{Nest, ResourceHandle};
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

    /// The resources of `tenant` and its ancestors, innermost first, each
    /// registered on first use with its limits (the plan's tenant template,
    /// or an override: `crate::plan::overrides`); empty when tenants are
    /// not limited.
    fn tenant_chain(
        &self,
        plan: &Plan,
        tenant: &Tenant,
    ) -> Result<Vec<ResourceHandle<AnyBackend>>, Rejection> {
        let out = if plan.has_parents() {
            plan.tenant_chain(&self.broker, &tenant.0)
        } else {
            plan.tenant_handle(&self.broker, &tenant.0)
                .map(|h| h.map(|h| vec![h]).map_err(|e| (tenant.0.clone(), e)))
        };
        match out {
            None => Ok(Vec::new()),
            Some(Ok(chain)) => Ok(chain),
            Some(Err((t, e))) => Err(Rejection::LimiterUnavailable {
                resource: resources::tenant(&t),
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
        let chain = match self.tenant_chain(&plan, &tenant) {
            Ok(c) => c,
            Err(refused) => return StepFuture::refuse(req, refused),
        };
        if chain.is_empty() && key_limit.is_none() {
            return StepFuture::next(next.call(req));
        }
        // Only the LLM endpoints spend money: a proxied request carries no
        // payer.
        let pays = context(&req).is_some_and(|r| r.route.endpoint != Endpoint::Proxy);
        let mut next = take_ready(next);
        let metrics = Arc::clone(&self.metrics);
        let broker = self.broker.clone();
        StepFuture::boxed(async move {
            let grants =
                levels::charge_all(&broker, key_limit.as_ref(), &chain, &mut req, &tenant.0, &metrics)
                    .await?;
            let any = key_limit.is_some() || !chain.is_empty();
            if let Some(ctx) = context_mut(&mut req).filter(|_| pays && any) {
                // The money of an LLM call goes to the key's own budget
                // too, and to every level of the tenant's hierarchy.
                let payer: Vec<_> = key_limit.into_iter().chain(chain).collect();
                ctx.payer = Some(Nest::new(payer));
                ctx.payer_grants = grants;
            }
            next.call(req).await
        })
    }
}
