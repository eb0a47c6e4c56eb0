//! Refuses request bodies larger than the plan's `limits.maxBodyBytes`: at
//! once with `413` when `Content-Length` says so, and by cutting the stream
//! when a chunked body grows past it (the proxy and the OpenAI endpoint then
//! answer `413` too).

use super::{context, step_layer, RejectingService, Step, StepFuture};
use crate::rejection::Rejection;
use axum::body::Body;
use http::Request;

/// Limits request bodies.
#[derive(Debug, Clone, Copy, Default)]
pub struct BodyLimitLayer;

step_layer!(BodyLimitLayer);

impl Step for BodyLimitLayer {
    fn step<S: RejectingService>(&self, next: &mut S, req: Request<Body>) -> StepFuture<S::Future> {
        let Some(max) = context(&req).map(|r| r.plan.max_body_bytes()) else {
            return StepFuture::next(next.call(req));
        };
        let declared = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max) {
            return StepFuture::refuse(req, Rejection::PayloadTooLarge { max });
        }
        // An empty body (most requests) cannot outgrow the limit.
        if http_body::Body::is_end_stream(req.body()) {
            return StepFuture::next(next.call(req));
        }
        let limit = usize::try_from(max).unwrap_or(usize::MAX);
        let req = req.map(|b| Body::new(http_body_util::Limited::new(b, limit)));
        StepFuture::next(next.call(req))
    }
}
