//! Before auth: the route's resource (its longest `perRoute` prefix, else
//! its upstream's `perService` limit). A cheap floor against floods:
//! refused requests never reach token verification. The permit goes into
//! the request's [`crate::permits::PermitSlot`].

use super::{
    acquire_if_ready, charge, context, hold, step_layer, take_ready, RejectingService, Step, StepFuture,
};
use crate::metrics::{GatewayMetrics, Layer};
use axum::body::Body;
use http::Request;
use std::sync::Arc;

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

step_layer!(PreAuthLayer);

impl Step for PreAuthLayer {
    fn step<S: RejectingService>(&self, next: &mut S, mut req: Request<Body>) -> StepFuture<S::Future> {
        let Some(handle) = context(&req).and_then(|r| r.route.resource.clone()) else {
            return StepFuture::next(next.call(req));
        };
        // The in-process backend answers at once: no future of this
        // layer's for the request.
        match acquire_if_ready(&handle, &req, Layer::PreAuth, &self.metrics) {
            Some(Ok(permit)) => {
                hold(&mut req, &handle, permit);
                return StepFuture::next(next.call(req));
            }
            Some(Err(refused)) => return StepFuture::refuse(req, refused),
            None => {}
        }
        let mut next = take_ready(next);
        let metrics = Arc::clone(&self.metrics);
        StepFuture::boxed(async move {
            charge(&handle, &mut req, Layer::PreAuth, None, &metrics).await?;
            next.call(req).await
        })
    }
}
