//! The proxy as `tower::Service`s:
//!
//! * [`Forward`], the innermost service of the gateway's stack: forwards a
//!   request to the upstream its route names (routed once, by the route
//!   layer); `404` when the route has none.
//! * [`ProxyService`], the proxy on its own, for embedding without the
//!   pressure layers: it routes with its own upstream table and renders its
//!   refusals.

use super::client::Proxy;
use super::error::ProxyError;
use super::routing::Upstreams;
use crate::config::{TimeoutConfig, UpstreamConfig};
use crate::layers::{routed, Outcome};
use crate::rejection::{Dialect, Rejection};
use axum::body::Body;
use axum::extract::ConnectInfo;
use futures::future::BoxFuture;
use http::{Request, Response};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The client address of a request: its route's, where the connection
/// attached itself to the route layer, else [`ConnectInfo<SocketAddr>`].
fn client_addr<B>(req: &Request<B>) -> Option<SocketAddr> {
    routed(req)
        .and_then(|r| r.peer)
        .or_else(|| req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0))
}

/// Forwards each request to its route's upstream. Cheap to clone (clones
/// share the connection pool).
#[derive(Debug, Clone)]
pub(crate) struct Forward {
    proxy: Proxy,
}

impl Forward {
    /// Forwards with `proxy`.
    pub(crate) fn new(proxy: Proxy) -> Self {
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
        let Some(routed) = routed(&req) else {
            return Box::pin(async {
                Err(Rejection::Internal("a request reached the proxy unrouted".into()))
            });
        };
        let Some(upstream) = routed.route.upstream.clone() else {
            let path = req.uri().path().to_owned();
            return Box::pin(async move { Err(Rejection::NotFound(path)) });
        };
        let total = routed.plan.upstream_timeout();
        let timer = routed.timer.clone();
        let proxy = self.proxy.clone();
        let addr = client_addr(&req);
        Box::pin(async move { proxy.forward_with(&upstream, req, addr, total, timer).await })
    }
}

/// The proxy alone: routes each request to the upstream with the longest
/// matching prefix and forwards it (`404` when none matches). Never fails:
/// upstream trouble is answered with `502`/`504`.
///
/// The client address for `X-Forwarded-For` is read from the request's
/// [`ConnectInfo<SocketAddr>`] extension, which
/// `into_make_service_with_connect_info::<SocketAddr>()` provides.
#[derive(Debug, Clone)]
pub struct ProxyService {
    proxy: Proxy,
    upstreams: Arc<Upstreams>,
    total: Duration,
}

impl ProxyService {
    /// Builds the proxy and its upstream table from config (as loaded:
    /// `tls.caFile` names are absolute then, or relative to the current
    /// directory).
    pub fn from_config(
        upstreams: &BTreeMap<String, UpstreamConfig>,
        timeouts: &TimeoutConfig,
    ) -> Result<Self, ProxyError> {
        // Checks the timeouts.
        Proxy::new(timeouts)?;
        let tls = crate::tls::UpstreamTls::from_config(upstreams, std::path::Path::new("."))?;
        let tls = Arc::new(arc_swap::ArcSwap::from_pointee(tls));
        Ok(Self {
            proxy: Proxy::with_upstream_tls(Duration::from_millis(timeouts.connect_ms), tls),
            upstreams: Arc::new(Upstreams::new(upstreams)?),
            total: Duration::from_millis(timeouts.total_ms),
        })
    }
}

impl tower::Service<Request<Body>> for ProxyService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let proxy = self.proxy.clone();
        let upstream = self.upstreams.route(req.uri().path()).cloned();
        let total = self.total;
        let addr = client_addr(&req);
        Box::pin(async move {
            let reply = match upstream {
                Some(u) => proxy.forward(&u, req, addr, total).await,
                None => Err(Rejection::NotFound(req.uri().path().to_owned())),
            };
            Ok(reply.unwrap_or_else(|r| r.render(Dialect::Gateway)))
        })
    }
}
