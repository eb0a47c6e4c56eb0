//! [`ReleaseLayer`]: its configuration (none) and the tower `Layer` impl.

use super::service::Release;
use crate::metrics::GatewayMetrics;
use std::sync::Arc;

/// Wraps a service so the permits its request took are released with the
/// response body.
#[derive(Debug, Clone)]
pub struct ReleaseLayer {
    metrics: Arc<GatewayMetrics>,
}

impl ReleaseLayer {
    /// A release layer counting SSE bypasses in `metrics`.
    pub fn new(metrics: Arc<GatewayMetrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for ReleaseLayer {
    type Service = Release<S>;

    fn layer(&self, inner: S) -> Release<S> {
        Release::new(inner, self.metrics.clone())
    }
}
