//! The forwarding half of the proxy: one pooled HTTP/1.1 client shared by
//! every request, the request/response rewriting around it, and the mapping
//! of upstream failures to `502`/`504` answers.

use super::error::{
    error_response, not_found, payload_too_large, upstream_error, upstream_timeout, upstream_unavailable,
    ProxyError,
};
use super::headers::{set_forwarding, strip_hop_by_hop};
use super::routing::{Upstream, Upstreams};
use super::upgrade::ClientUpgrade;
use crate::config::{TimeoutConfig, UpstreamConfig};
use axum::body::Body;
use http::uri::PathAndQuery;
use http::{header, HeaderValue, Request, Response, StatusCode, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long an idle pooled upstream connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// TCP keepalive probes on upstream connections.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Forwards requests to upstreams over pooled keep-alive connections.
///
/// Cheap to clone: clones share the connection pool and the upstream table.
/// Bodies stream both ways; nothing is buffered.
#[derive(Debug, Clone)]
pub struct Proxy {
    client: Client<HttpConnector, Body>,
    upstreams: Arc<Upstreams>,
    total_ms: u64,
}

impl Proxy {
    /// Parses the upstreams and builds the client: connections are pooled
    /// (idle ones kept 90 s), `TCP_NODELAY` is set, connecting is bounded by
    /// `connect_ms` (then `502`), and the exchange up to the response head
    /// by `total_ms` (then `504`).
    pub fn new(
        upstreams: &BTreeMap<String, UpstreamConfig>,
        timeouts: &TimeoutConfig,
    ) -> Result<Proxy, ProxyError> {
        if timeouts.connect_ms == 0 {
            return Err(ProxyError::InvalidTimeout { field: "connectMs" });
        }
        if timeouts.total_ms == 0 {
            return Err(ProxyError::InvalidTimeout { field: "totalMs" });
        }
        let upstreams = Upstreams::new(upstreams)?;

        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_millis(timeouts.connect_ms)));
        connector.set_keepalive(Some(TCP_KEEPALIVE));
        connector.enforce_http(true);

        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector);
        Ok(Proxy {
            client,
            upstreams: Arc::new(upstreams),
            total_ms: timeouts.total_ms,
        })
    }

    /// The upstream table requests are routed with.
    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// The bound on sending a request and receiving the response head.
    pub fn total_timeout(&self) -> Duration {
        Duration::from_millis(self.total_ms)
    }

    /// Routes `req` by its path and forwards it; `404` when no upstream's
    /// prefix covers the path.
    pub async fn handle(&self, req: Request<Body>, client_addr: Option<SocketAddr>) -> Response<Body> {
        match self.upstreams.route(req.uri().path()) {
            Some(upstream) => self.forward(upstream, req, client_addr).await,
            None => not_found(req.uri().path()),
        }
    }

    /// Forwards `req` to `upstream` and returns its response, or the
    /// gateway's JSON error when the upstream cannot answer.
    ///
    /// The URI becomes the upstream's base (its path, if any, prepended);
    /// hop-by-hop headers are dropped both ways; `X-Forwarded-For` (when
    /// `client_addr` is known), `X-Forwarded-Proto` and `X-Forwarded-Host`
    /// are set and `Host` names the upstream. Both bodies are streamed.
    ///
    /// WebSocket: a request with `Connection: upgrade` and `Upgrade:
    /// websocket`, served on a connection hyper can upgrade (its `OnUpgrade`
    /// extension present), keeps those two headers; when the upstream
    /// answers `101`, the `101` is returned with the upstream's `Upgrade`
    /// and `Connection: upgrade`, and a spawned task splices the two
    /// upgraded connections until both sides close. A `101` the client did
    /// not ask for is `502 upstream_error`.
    ///
    /// Failures: no response head within `total_ms` → `504
    /// upstream_timeout`; no connection (refused, unreachable, connect
    /// timeout) → `502 upstream_unavailable` at once, without retry; any
    /// other failure of the exchange → `502 upstream_error`. A request body
    /// that outgrows an [`http_body_util::Limited`] wrapper on the way →
    /// `413 payload_too_large`.
    pub async fn forward(
        &self,
        upstream: &Upstream,
        req: Request<Body>,
        client_addr: Option<SocketAddr>,
    ) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        let path_and_query = parts.uri.path_and_query().map_or("/", PathAndQuery::as_str);
        let uri = match upstream.target_uri(path_and_query) {
            Ok(uri) => uri,
            Err(error) => {
                tracing::debug!(upstream = upstream.name(), %error, "request target cannot be forwarded");
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "the request target cannot be forwarded",
                );
            }
        };
        let original_host = parts.headers.get(header::HOST).cloned().or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
        });
        let client_upgrade = ClientUpgrade::take(&parts.headers, &mut parts.extensions);
        strip_hop_by_hop(&mut parts.headers);
        if let Some(upgrade) = &client_upgrade {
            upgrade.restore_request_headers(&mut parts.headers);
        }
        set_forwarding(
            &mut parts.headers,
            client_addr.map(|addr| addr.ip()),
            original_host,
            upstream.authority(),
        );
        parts.uri = uri;
        parts.version = Version::HTTP_11;
        let req = Request::from_parts(parts, body);

        match tokio::time::timeout(self.total_timeout(), self.client.request(req)).await {
            Ok(Ok(response)) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
                self.switch_protocols(upstream, response, client_upgrade)
            }
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Body::new(body))
            }
            Ok(Err(error)) => self.failed(upstream, &error),
            Err(_elapsed) => {
                tracing::warn!(
                    upstream = upstream.name(),
                    total_ms = self.total_ms,
                    "upstream did not answer in time"
                );
                upstream_timeout(upstream.name(), self.total_ms)
            }
        }
    }

    /// The answer to the client for an upstream `101`: the `101` itself, with
    /// the tunnel between the two upgraded connections spawned, when the
    /// client asked for the upgrade and both connections can be handed over;
    /// otherwise `502 upstream_error`.
    fn switch_protocols(
        &self,
        upstream: &Upstream,
        response: Response<hyper::body::Incoming>,
        client_upgrade: Option<ClientUpgrade>,
    ) -> Response<Body> {
        let (mut parts, _body) = response.into_parts();
        let Some(client_upgrade) = client_upgrade else {
            tracing::warn!(upstream = upstream.name(), "upstream switched protocols unasked");
            return upstream_error(upstream.name(), "switched protocols without an upgrade request");
        };
        let Some(upstream_upgrade) = parts.extensions.remove::<OnUpgrade>() else {
            tracing::warn!(
                upstream = upstream.name(),
                "upstream connection cannot be upgraded"
            );
            return upstream_error(upstream.name(), "the upstream connection cannot be upgraded");
        };
        let protocol = parts.headers.get(header::UPGRADE).cloned();
        strip_hop_by_hop(&mut parts.headers);
        client_upgrade.tunnel(upstream.name(), protocol, upstream_upgrade, &mut parts.headers);
        Response::from_parts(parts, Body::empty())
    }

    /// The answer for a failed exchange.
    fn failed(&self, upstream: &Upstream, error: &hyper_util::client::legacy::Error) -> Response<Body> {
        let chain = error_chain(error);
        if error.is_connect() {
            tracing::warn!(upstream = upstream.name(), error = %chain, "cannot connect to upstream");
            return upstream_unavailable(upstream.name(), &root_cause(error));
        }
        if find_source::<http_body_util::LengthLimitError>(error).is_some() {
            tracing::debug!(upstream = upstream.name(), error = %chain, "request body over the limit");
            return payload_too_large();
        }
        tracing::warn!(upstream = upstream.name(), error = %chain, "upstream exchange failed");
        let reason =
            find_source::<hyper::Error>(error).map_or_else(|| root_cause(error), ToString::to_string);
        upstream_error(upstream.name(), &reason)
    }
}

/// The first error of type `E` in `error`'s source chain (itself included).
fn find_source<'a, E: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<E>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// The innermost error's message.
fn root_cause(error: &(dyn StdError + 'static)) -> String {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

/// Every message of the chain, outermost first, `: `-separated.
fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut out = error.to_string();
    let mut current = error.source();
    while let Some(source) = current {
        out.push_str(": ");
        out.push_str(&source.to_string());
        current = source.source();
    }
    out
}
