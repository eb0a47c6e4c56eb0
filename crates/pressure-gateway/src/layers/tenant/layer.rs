//! [`TenantLayer`]: the verifier, the tenant template and the broker.

use super::jwt::Authenticator;
use super::service::TenantService;
use crate::backend::Broker;
use crate::metrics::GatewayMetrics;
use pressure_core::LimitTemplate;
use std::sync::Arc;

/// Verifies JWTs and applies per-tenant limits.
#[derive(Clone, Debug)]
pub struct TenantLayer {
    pub(crate) auth: Option<Arc<Authenticator>>,
    pub(crate) required: bool,
    pub(crate) template: Option<LimitTemplate>,
    pub(crate) broker: Broker,
    pub(crate) metrics: Arc<GatewayMetrics>,
}

impl TenantLayer {
    /// `auth`: the verifier (none: tokens are not read); `required`: refuse
    /// requests without a token; `template`: each tenant's limits (none: no
    /// tenant limit).
    pub fn new(
        auth: Option<Arc<Authenticator>>,
        required: bool,
        template: Option<LimitTemplate>,
        broker: Broker,
        metrics: Arc<GatewayMetrics>,
    ) -> Self {
        Self {
            auth,
            required,
            template,
            broker,
            metrics,
        }
    }
}

impl<S> tower::Layer<S> for TenantLayer {
    type Service = TenantService<S>;

    fn layer(&self, inner: S) -> TenantService<S> {
        TenantService {
            inner,
            layer: self.clone(),
        }
    }
}
