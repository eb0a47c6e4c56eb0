//! Refuses request bodies larger than `limits.maxBodyBytes`: at once with
//! `413` when `Content-Length` says so, and by cutting the stream (the
//! upstream exchange fails) when a chunked body grows past it.

use crate::layers::deny;
use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::task::{Context, Poll};

/// Limits request bodies to `max` bytes.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimitLayer {
    max: u64,
}

impl BodyLimitLayer {
    /// Bodies above `max` bytes are refused.
    pub fn new(max: u64) -> Self {
        Self { max }
    }
}

impl<S> tower::Layer<S> for BodyLimitLayer {
    type Service = BodyLimit<S>;

    fn layer(&self, inner: S) -> BodyLimit<S> {
        BodyLimit { inner, max: self.max }
    }
}

/// See [`BodyLimitLayer`].
#[derive(Debug, Clone)]
pub struct BodyLimit<S> {
    inner: S,
    max: u64,
}

impl<S> tower::Service<Request<Body>> for BodyLimit<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let declared = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max) {
            let max = self.max;
            return Box::pin(async move {
                Ok(deny::json_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    &format!("request body exceeds {max} bytes"),
                ))
            });
        }
        let limit = usize::try_from(self.max).unwrap_or(usize::MAX);
        let req = req.map(|b| Body::new(http_body_util::Limited::new(b, limit)));
        Box::pin(self.inner.call(req))
    }
}
