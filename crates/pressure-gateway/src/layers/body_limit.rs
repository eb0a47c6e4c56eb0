//! Refuses request bodies larger than the plan's `limits.maxBodyBytes`: at
//! once with `413` when `Content-Length` says so, and by cutting the stream
//! when a chunked body grows past it (the proxy and the OpenAI endpoint then
//! answer `413` too).

use super::{routed, Inner, Reply};
use crate::rejection::Rejection;
use axum::body::Body;
use futures::future::BoxFuture;
use http::Request;
use std::task::{Context, Poll};

/// Limits request bodies.
#[derive(Debug, Clone, Copy, Default)]
pub struct BodyLimitLayer;

impl<S> tower::Layer<S> for BodyLimitLayer {
    type Service = BodyLimit<S>;

    fn layer(&self, inner: S) -> BodyLimit<S> {
        BodyLimit { inner }
    }
}

/// See [`BodyLimitLayer`].
#[derive(Debug, Clone)]
pub struct BodyLimit<S> {
    inner: S,
}

impl<S> tower::Service<Request<Body>> for BodyLimit<S>
where
    S: Inner,
{
    type Response = http::Response<Body>;
    type Error = Rejection;
    type Future = BoxFuture<'static, Reply>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let Some(max) = routed(&req).map(|r| r.plan.max_body_bytes()) else {
            return Box::pin(self.inner.call(req));
        };
        let declared = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max) {
            return Box::pin(async move { Err(Rejection::PayloadTooLarge { max }) });
        }
        let limit = usize::try_from(max).unwrap_or(usize::MAX);
        let req = req.map(|b| Body::new(http_body_util::Limited::new(b, limit)));
        Box::pin(self.inner.call(req))
    }
}
