//! Before auth: the route's resource (its longest `perRoute` prefix, else
//! its upstream's `perService` limit). A cheap floor against floods:
//! refused requests never reach token verification. The permit goes into
//! the request's [`crate::permits::PermitSlot`].

use super::{charge, routed, take_ready, Inner, Reply};
use crate::metrics::{GatewayMetrics, Layer};
use crate::rejection::Rejection;
use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Applies route and service limits before auth.
#[derive(Debug, Clone)]
pub struct PreAuthLayer {
    metrics: Arc<GatewayMetrics>,
}

impl PreAuthLayer {
    /// Counts admissions in `metrics`.
    pub fn new(metrics: Arc<GatewayMetrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for PreAuthLayer {
    type Service = PreAuth<S>;

    fn layer(&self, inner: S) -> PreAuth<S> {
        PreAuth {
            inner,
            metrics: Arc::clone(&self.metrics),
        }
    }
}

/// See [`PreAuthLayer`].
#[derive(Debug, Clone)]
pub struct PreAuth<S> {
    inner: S,
    metrics: Arc<GatewayMetrics>,
}

impl<S> tower::Service<Request<Body>> for PreAuth<S>
where
    S: Inner + Clone,
{
    type Response = Response<Body>;
    type Error = Rejection;
    type Future = BoxFuture<'static, Reply>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let Some(handle) = routed(&req).and_then(|r| r.route.resource.clone()) else {
            return Box::pin(self.inner.call(req));
        };
        let mut inner = take_ready(&mut self.inner);
        let metrics = Arc::clone(&self.metrics);
        Box::pin(async move {
            charge(&handle, &mut req, Layer::PreAuth, None, &metrics).await?;
            inner.call(req).await
        })
    }
}
