//! [`PreAuthLayer`]: the route table, the broker and the metrics it needs.

use super::service::PreAuth;
use crate::metrics::GatewayMetrics;
use crate::routes::RouteTable;
use std::sync::Arc;

/// Applies route and service limits before auth.
#[derive(Clone)]
pub struct PreAuthLayer {
    pub(crate) routes: Arc<RouteTable>,
    pub(crate) metrics: Arc<GatewayMetrics>,
}

impl std::fmt::Debug for PreAuthLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreAuthLayer")
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

impl PreAuthLayer {
    /// A pre-auth layer over `routes` (handles resolved in the broker).
    pub fn new(routes: Arc<RouteTable>, metrics: Arc<GatewayMetrics>) -> Self {
        Self { routes, metrics }
    }
}

impl<S> tower::Layer<S> for PreAuthLayer {
    type Service = PreAuth<S>;

    fn layer(&self, inner: S) -> PreAuth<S> {
        PreAuth {
            inner,
            layer: self.clone(),
        }
    }
}
