//! The innermost service of the gateway's stack: forwards a request to
//! the upstream its route names (routed once, by the route layer; `404`
//! when the route has none), stating to the proxy what it needs
//! ([`ForwardRequest`]), and maps the proxy's failures to refusals — the
//! one place they are.

use super::context;
use super::Outcome;
use crate::http::proxy::{BodyPolicy, ForwardRequest, ProxyClient, ProxyFailure};
use crate::rejection::Rejection;
use axum::body::Body;
use axum::extract::ConnectInfo;
use futures::future::BoxFuture;
use http::{Request, Response};
use std::net::SocketAddr;
use std::task::{Context, Poll};

/// Forwards each request to its route's upstream. Cheap to clone (clones
/// share the connection pool).
#[derive(Debug, Clone)]
pub(crate) struct Forward {
    proxy: ProxyClient,
}

impl Forward {
    /// Forwards with `proxy`.
    pub(crate) fn new(proxy: ProxyClient) -> Self {
        Self { proxy }
    }
}

impl tower::Service<Request<Body>> for Forward {
    type Response = Response<Body>;
    type Error = Rejection;
    type Future = BoxFuture<'static, Outcome>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let Some(routed) = context(&req) else {
            return Box::pin(async {
                Err(Rejection::Internal("a request reached the proxy unrouted".into()))
            });
        };
        let Some(upstream) = routed.route.upstream.clone() else {
            let path = req.uri().path().to_owned();
            return Box::pin(async move { Err(Rejection::NotFound(path)) });
        };
        let fwd = ForwardRequest {
            upstream,
            peer: routed
                .peer
                .or_else(|| req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0)),
            total: routed.plan.upstream_timeout(),
            timer: routed.timer.clone(),
            body: BodyPolicy::Whole {
                max_bytes: routed.plan.max_body_bytes(),
                idle: routed.plan.body_read_timeout(),
            },
            request: req,
        };
        let proxy = self.proxy.clone();
        Box::pin(async move { proxy.forward(fwd).await.map_err(Rejection::from) })
    }
}

impl From<ProxyFailure> for Rejection {
    fn from(failure: ProxyFailure) -> Self {
        match failure {
            ProxyFailure::BadTarget => Rejection::BadRequest("the request target cannot be forwarded".into()),
            ProxyFailure::BodyTooLarge { max } => Rejection::PayloadTooLarge { max },
            ProxyFailure::BodyMalformed => {
                Rejection::BadRequest("the request body is malformed or was cut short".into())
            }
            ProxyFailure::BodyTimeout { whole_ms } => Rejection::RequestTimeout { whole_ms },
            ProxyFailure::Unavailable {
                upstream,
                reason,
                kind,
            } => Rejection::UpstreamUnavailable {
                upstream,
                reason,
                kind,
            },
            ProxyFailure::Failed {
                upstream,
                reason,
                kind,
            } => Rejection::UpstreamError {
                upstream,
                reason,
                kind,
            },
            ProxyFailure::Timeout { upstream, after_ms } => Rejection::UpstreamTimeout { upstream, after_ms },
        }
    }
}
