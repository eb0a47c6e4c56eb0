//! The proxy on its own, for embedding without the pressure layers:
//! [`Proxy`], the upstream client whose failures are refusals, and
//! [`ProxyService`], which routes with its own upstream table and renders
//! its refusals in the gateway's dialect.

use crate::http::proxy::{BodyPolicy, ForwardRequest, ProxyClient, ProxyError, Upstream, Upstreams};
use crate::http::tls::UpstreamTls;
use crate::rejection::{Dialect, Rejection};
use crate::settings::{TimeoutConfig, UpstreamConfig};
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

/// Forwards requests to upstreams over pooled keep-alive connections
/// (`crate::http::proxy`), its failures answered as refusals. Cheap to
/// clone: clones share the connection pool.
#[derive(Debug, Clone)]
pub struct Proxy {
    client: ProxyClient,
}

impl Proxy {
    /// The client with connecting bounded by `timeouts.connectMs` (then
    /// `502`); both `connectMs` and `totalMs` must be above 0.
    pub fn new(timeouts: &TimeoutConfig) -> Result<Proxy, ProxyError> {
        ProxyClient::new(timeouts).map(|client| Proxy { client })
    }

    /// The client with connecting bounded by `connect` (then `502`);
    /// `https://` upstreams are verified against the public roots.
    pub fn with_connect_timeout(connect: Duration) -> Proxy {
        Proxy {
            client: ProxyClient::with_connect_timeout(connect),
        }
    }

    /// Forwards `req` to `upstream`, its body streamed, its response head
    /// due within `total` (see [`ProxyClient::forward`]); a failure is the
    /// refusal the gateway answers it with (`502`, `504`, or the client's
    /// own `400`/`408`/`413`).
    pub async fn forward(
        &self,
        upstream: &Arc<Upstream>,
        req: Request<Body>,
        client_addr: Option<SocketAddr>,
        total: Duration,
    ) -> Result<Response<Body>, Rejection> {
        let mut fwd = ForwardRequest::new(Arc::clone(upstream), req, total);
        fwd.peer = client_addr;
        self.client.forward(fwd).await.map_err(Rejection::from)
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
    proxy: ProxyClient,
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
        ProxyClient::new(timeouts)?;
        let tls = UpstreamTls::from_config(upstreams, std::path::Path::new("."))?;
        let tls = Arc::new(arc_swap::ArcSwap::from_pointee(tls));
        Ok(Self {
            proxy: ProxyClient::with_upstream_tls(Duration::from_millis(timeouts.connect_ms), tls),
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
        let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        Box::pin(async move {
            let reply = match upstream {
                Some(upstream) => {
                    let fwd = ForwardRequest {
                        upstream,
                        request: req,
                        peer,
                        total,
                        timer: None,
                        body: BodyPolicy::Streamed,
                    };
                    proxy.forward(fwd).await.map_err(Rejection::from)
                }
                None => Err(Rejection::NotFound(req.uri().path().to_owned())),
            };
            Ok(reply.unwrap_or_else(|r| r.render(Dialect::Gateway)))
        })
    }
}
