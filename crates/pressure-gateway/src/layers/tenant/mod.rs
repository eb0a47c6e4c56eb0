//! After the pre-auth floor: a valid JWT names the tenant (claim
//! `namespaceId` by default, a non-empty string of at most 256 bytes;
//! numbers and other types are refused, so `777` and `"777"` can never share
//! a counter), whose resource `gateway:tenant:<id>` is registered lazily
//! with its limits (the plan's tenant template, or an override:
//! `crate::overrides`). A token that is present but invalid is
//! always `401`; a missing one is `401` only when auth is required, and
//! otherwise passes as anonymous without a tenant limit.

pub(crate) mod jwt;

pub(crate) use jwt::{AuthError, Authenticator};

use super::{charge, routed, step_layer, take_ready, Outcome, RejectingService, Step};
use crate::backend::Broker;
use crate::metrics::{GatewayMetrics, Layer};
use crate::rejection::Rejection;
use crate::resources;
use axum::body::Body;
use futures::future::BoxFuture;
use http::Request;
use jwt::bearer;
use std::sync::Arc;
use std::time::Duration;

/// Verifies JWTs and applies per-tenant limits.
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
}

step_layer!(TenantLayer);

impl Step for TenantLayer {
    fn step<S: RejectingService>(&self, next: &mut S, mut req: Request<Body>) -> BoxFuture<'static, Outcome> {
        let Some(plan) = routed(&req).map(|r| Arc::clone(&r.plan)) else {
            return Box::pin(next.call(req));
        };
        let policy = plan.tenant();
        let Some(auth) = policy.auth.as_deref() else {
            return Box::pin(next.call(req));
        };
        let tenant = match bearer(&req) {
            None if policy.required => {
                return Box::pin(async { Err(Rejection::Unauthorized(AuthError::Missing)) })
            }
            None => return Box::pin(next.call(req)),
            Some(Err(e)) => return Box::pin(async move { Err(Rejection::Unauthorized(e)) }),
            Some(Ok(token)) => match auth.verify(token) {
                Ok(t) => t,
                Err(e) => return Box::pin(async move { Err(Rejection::Unauthorized(e)) }),
            },
        };
        req.extensions_mut().insert(tenant.clone());
        if let Some(c) = crate::charged::of(&req) {
            c.tenant(&tenant.0);
        }
        let Some(registered) = plan.tenant_handle(&self.broker, &tenant.0) else {
            return Box::pin(next.call(req));
        };
        let handle = match registered {
            Ok(h) => h,
            Err(e) => {
                let resource = resources::tenant(&tenant.0);
                return Box::pin(async move {
                    Err(Rejection::LimiterUnavailable {
                        resource,
                        layer: Layer::Tenant,
                        retry_after: Duration::from_secs(1),
                        reason: format!("tenant registration failed: {e}"),
                    })
                });
            }
        };
        let mut next = take_ready(next);
        let metrics = Arc::clone(&self.metrics);
        Box::pin(async move {
            charge(&handle, &mut req, Layer::Tenant, Some(&tenant.0), &metrics).await?;
            next.call(req).await
        })
    }
}
