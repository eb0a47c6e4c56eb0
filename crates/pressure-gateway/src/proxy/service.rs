//! [`ProxyService`]: the proxy as a `tower::Service`, the innermost service
//! of the gateway's stack (`Router::fallback_service`, or hyper directly).

use super::client::Proxy;
use super::error::ProxyError;
use crate::config::{TimeoutConfig, UpstreamConfig};
use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Routes each request to the upstream with the longest matching prefix and
/// forwards it (`404` when none matches). Never fails: upstream trouble is
/// answered with `502`/`504`.
///
/// The client address for `X-Forwarded-For` is read from the request's
/// [`ConnectInfo<SocketAddr>`] extension, which
/// `into_make_service_with_connect_info::<SocketAddr>()` provides.
#[derive(Debug, Clone)]
pub struct ProxyService {
    proxy: Proxy,
}

impl ProxyService {
    /// Wraps a proxy.
    pub fn new(proxy: Proxy) -> Self {
        Self { proxy }
    }

    /// Builds the proxy from config (see [`Proxy::new`]) and wraps it.
    pub fn from_config(
        upstreams: &BTreeMap<String, UpstreamConfig>,
        timeouts: &TimeoutConfig,
    ) -> Result<Self, ProxyError> {
        Proxy::new(upstreams, timeouts).map(Self::new)
    }

    /// The wrapped proxy.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }
}

impl From<Proxy> for ProxyService {
    fn from(proxy: Proxy) -> Self {
        Self::new(proxy)
    }
}

impl tower::Service<Request<Body>> for ProxyService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send + 'static>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let proxy = self.proxy.clone();
        let client_addr = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| *addr);
        Box::pin(async move { Ok(proxy.handle(req, client_addr).await) })
    }
}
