//! The forwarding half of the proxy: pooled HTTP/1.1 connections to the
//! upstreams (`pool.rs`), the request/response rewriting around them, and
//! the mapping of upstream failures to `502`/`504` answers.

use super::body::{ClientBody, ClientFault};
use super::connector::UpstreamConnector;
use super::deadline::{within, ConnTimer};
use super::error::ProxyError;
use super::failure::classify;
use super::headers::{strip_hop_by_hop, strip_present, Forwarding, HopByHop};
use super::pool::{ExchangeError, Pool};
use super::routing::Upstream;
use super::upgrade::ClientUpgrade;
use crate::config::TimeoutConfig;
use crate::layers::Outcome;
use crate::rejection::{Rejection, UpstreamFailure};
use crate::tls::UpstreamTls;
use arc_swap::ArcSwap;
use axum::body::Body;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::client::legacy::connect::HttpConnector;
use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// TCP keepalive probes on upstream connections.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Forwards requests to upstreams over pooled keep-alive connections.
///
/// Cheap to clone: clones share the connection pool.
/// Response bodies stream; request bodies of routed requests are read
/// whole first (bounded by the body limit), see [`Proxy::forward`].
#[derive(Debug, Clone)]
pub struct Proxy {
    pool: Pool,
}

impl Proxy {
    /// Builds the client: connections are pooled (idle ones kept 90 s),
    /// `TCP_NODELAY` is set, and connecting is bounded by `connect_ms`
    /// (then `502`). The bound on the exchange up to the response head is
    /// given per request ([`Proxy::forward`]).
    pub fn new(timeouts: &TimeoutConfig) -> Result<Proxy, ProxyError> {
        if timeouts.connect_ms == 0 {
            return Err(ProxyError::InvalidTimeout { field: "connectMs" });
        }
        if timeouts.total_ms == 0 {
            return Err(ProxyError::InvalidTimeout { field: "totalMs" });
        }

        Ok(Self::with_connect_timeout(Duration::from_millis(
            timeouts.connect_ms,
        )))
    }

    /// The client with connecting bounded by `connect` (then `502`);
    /// `https://` upstreams are verified against the public roots.
    pub fn with_connect_timeout(connect: Duration) -> Proxy {
        Self::with_upstream_tls(
            connect,
            Arc::new(ArcSwap::from_pointee(UpstreamTls::public_roots())),
        )
    }

    /// [`with_connect_timeout`](Self::with_connect_timeout), with
    /// `https://` upstreams verified by the current `tls` (the gateway
    /// swaps it on reload; the TLS handshake counts against `totalMs`).
    pub fn with_upstream_tls(connect: Duration, tls: Arc<ArcSwap<UpstreamTls>>) -> Proxy {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect));
        http.set_keepalive(Some(TCP_KEEPALIVE));
        // The scheme is checked by the connector: http:// plain, https://
        // over TLS.
        http.enforce_http(false);
        let connector = UpstreamConnector::new(http, tls);
        Proxy {
            pool: Pool::new(connector),
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
    /// Failures: no response head within `total` → `504
    /// upstream_timeout`; no connection (refused, unreachable, connect
    /// timeout) → `502 upstream_unavailable` at once, without retry; any
    /// other failure of the exchange → `502 upstream_error`. The client's
    /// own faults are not blamed on the upstream: a request body that
    /// outgrows an [`http_body_util::Limited`] wrapper → `413`, a malformed
    /// one (bad chunked framing, cut short) → `400`, one not complete
    /// within `total` (or idle for `timeouts.bodyReadMs`) → `408`.
    ///
    /// Under the gateway's layers (the request routed, its body bounded by
    /// `limits.maxBodyBytes`) the request body is read whole before the
    /// upstream is contacted, and `total` starts afterwards; a request
    /// without a route (`ProxyService`) streams its body.
    pub async fn forward(
        &self,
        upstream: &Upstream,
        req: Request<Body>,
        client_addr: Option<SocketAddr>,
        total: Duration,
    ) -> Outcome {
        self.forward_with(upstream, req, client_addr, total, None).await
    }

    /// [`forward`](Self::forward), with `total` kept by the client
    /// connection's `timer` when there is one (no timer made per request).
    pub(crate) async fn forward_with(
        &self,
        upstream: &Upstream,
        req: Request<Body>,
        client_addr: Option<SocketAddr>,
        total: Duration,
        timer: Option<ConnTimer>,
    ) -> Outcome {
        let bounds =
            crate::layers::routed(&req).map(|r| (r.plan.max_body_bytes(), r.plan.body_read_timeout()));
        let (max_body, body_idle) = bounds.unwrap_or((u64::MAX, None));
        let (mut parts, body) = req.into_parts();
        // Under the gateway's layers the body is bounded (body limit): read
        // it whole first (an empty one, most requests, has nothing to read
        // and nothing to fail). Alone (`ProxyService`), with no bound,
        // stream it.
        let (fault, body) = if bounds.is_some() && http_body::Body::is_end_stream(&body) {
            (None, Outgoing::Whole(Bytes::new()))
        } else {
            let fault = ClientFault::new(max_body);
            let body = ClientBody::new(body, fault.clone(), body_idle);
            let body = match bounds {
                Some(_) => Outgoing::Whole(read_whole(body, &fault, total).await?),
                None => Outgoing::Streamed(Body::new(body)),
            };
            (Some(fault), body)
        };
        let client_fault = || fault.as_ref().and_then(ClientFault::take);
        // Origin-form (authority-form for CONNECT): the connection names
        // the upstream.
        let target = if parts.method == Method::CONNECT {
            Ok(Uri::from(upstream.authority().clone()))
        } else {
            upstream.origin_target(parts.uri.path_and_query())
        };
        let uri = match target {
            Ok(uri) => uri,
            Err(error) => {
                tracing::debug!(upstream = upstream.name(), %error, "request target cannot be forwarded");
                return Err(Rejection::BadRequest(
                    "the request target cannot be forwarded".into(),
                ));
            }
        };
        let original_host = parts.headers.get(header::HOST).cloned().or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
        });
        let hop = HopByHop::of(&parts.headers);
        let client_upgrade = if hop.may_upgrade() {
            ClientUpgrade::take(&parts.headers, &mut parts.extensions)
        } else {
            None
        };
        strip_present(&mut parts.headers, hop);
        if let Some(upgrade) = &client_upgrade {
            upgrade.restore_request_headers(&mut parts.headers);
        }
        let forwarding = Forwarding::of(
            &parts.headers,
            client_addr.map(|addr| addr.ip()),
            original_host,
            upstream.host(),
            parts.extensions.get::<crate::tls::ClientTls>().is_some(),
        );
        // The upstream needs none of the request's extensions: the map
        // goes back for the next request (`layers::spare`).
        crate::layers::spare::give_back(std::mem::take(&mut parts.extensions));
        parts.uri = uri;
        parts.version = Version::HTTP_11;
        let body = match body {
            // A whole body to a plain `http://` upstream, no upgrade, no
            // `CONNECT` (its target is an authority, its answer a tunnel):
            // the exchange runs in this task (`exchange.rs`).
            Outgoing::Whole(whole)
                if client_upgrade.is_none() && !upstream.is_https() && parts.method != Method::CONNECT =>
            {
                let sent = bounded(
                    timer,
                    total,
                    self.pool.exchange(upstream, &parts, &forwarding, &whole),
                )
                .await;
                // Its hop-by-hop headers were left out as it was read.
                return settle(upstream, total, client_fault, sent, |response| {
                    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                        return Err(unasked_switch(upstream));
                    }
                    Ok(response)
                });
            }
            Outgoing::Whole(whole) if whole.is_empty() => Body::empty(),
            Outgoing::Whole(whole) => Body::from(whole),
            Outgoing::Streamed(body) => body,
        };
        forwarding.apply(&mut parts.headers);
        let req = Request::from_parts(parts, body);
        let sent = bounded(timer, total, self.pool.send(upstream, req)).await;
        settle(upstream, total, client_fault, sent, |response| {
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                return switch_protocols(upstream, response, client_upgrade);
            }
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Ok(Response::from_parts(parts, Body::new(body)))
        })
    }
}

/// The request body on its way to the upstream.
enum Outgoing {
    /// Read whole (under the gateway's layers).
    Whole(Bytes),
    /// Streamed as it comes (`ProxyService`).
    Streamed(Body),
}

/// `fut` bounded by `total`: on the client connection's `timer` when there
/// is one, else on a timer of its own; `Err` when it ran out.
async fn bounded<F: std::future::Future>(
    timer: Option<ConnTimer>,
    total: Duration,
    fut: F,
) -> Result<F::Output, ()> {
    match timer {
        Some(timer) => within(timer.arm(total), fut).await,
        None => tokio::time::timeout(total, fut).await.map_err(|_elapsed| ()),
    }
}

/// The outcome of an exchange: the upstream's response (`answer` makes
/// the client's from it, its hop-by-hop headers dropped), or the refusal
/// for its failure, the client's own fault first.
fn settle<R>(
    upstream: &Upstream,
    total: Duration,
    client_fault: impl FnOnce() -> Option<Rejection>,
    sent: Result<Result<Response<R>, ExchangeError>, ()>,
    answer: impl FnOnce(Response<R>) -> Outcome,
) -> Outcome {
    match sent {
        Ok(Ok(response)) => answer(response),
        Ok(Err(error)) => Err(client_fault().unwrap_or_else(|| failed(upstream, &error))),
        Err(()) => Err(client_fault().unwrap_or_else(|| Rejection::UpstreamTimeout {
            upstream: upstream.name().to_owned(),
            after_ms: u64::try_from(total.as_millis()).unwrap_or(u64::MAX),
        })),
    }
}

/// The refusal for a `101` the client did not ask for.
fn unasked_switch(upstream: &Upstream) -> Rejection {
    Rejection::UpstreamError {
        upstream: upstream.name().to_owned(),
        reason: "switched protocols without an upgrade request".into(),
        kind: UpstreamFailure::BadResponse,
    }
}

/// The client's whole body, read before the upstream is contacted, so that
/// a slow client holds no upstream connection and the upstream's `total`
/// starts when the request is complete (Envoy starts its route timeout
/// then; nginx buffers the body likewise). The body limit bounds what is
/// held (`413` beyond it); `deadline` bounds the whole read and
/// [`ClientBody`] the gaps in it (`408` either way); a malformed body is
/// `400`.
async fn read_whole(
    body: ClientBody<Body>,
    fault: &ClientFault,
    deadline: Duration,
) -> Result<Bytes, Rejection> {
    if http_body::Body::is_end_stream(&body) {
        return Ok(Bytes::new());
    }
    match tokio::time::timeout(deadline, http_body_util::BodyExt::collect(body)).await {
        Ok(Ok(whole)) => Ok(whole.to_bytes()),
        Ok(Err(_)) => Err(fault.take().unwrap_or_else(|| {
            Rejection::BadRequest("the request body is malformed or was cut short".into())
        })),
        Err(_elapsed) => Err(Rejection::RequestTimeout {
            whole_ms: Some(u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX)),
        }),
    }
}

/// The answer to the client for an upstream `101`: the `101` itself, with
/// the tunnel between the two upgraded connections spawned, when the
/// client asked for the upgrade and both connections can be handed over;
/// otherwise `502 upstream_error`.
fn switch_protocols(
    upstream: &Upstream,
    response: Response<hyper::body::Incoming>,
    client_upgrade: Option<ClientUpgrade>,
) -> Outcome {
    let (mut parts, _body) = response.into_parts();
    let Some(client_upgrade) = client_upgrade else {
        return Err(unasked_switch(upstream));
    };
    let Some(upstream_upgrade) = parts.extensions.remove::<OnUpgrade>() else {
        return Err(Rejection::UpstreamError {
            upstream: upstream.name().to_owned(),
            reason: "the upstream connection cannot be upgraded".into(),
            kind: UpstreamFailure::Error,
        });
    };
    let protocol = parts.headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    client_upgrade.tunnel(upstream.name(), protocol, upstream_upgrade, &mut parts.headers);
    Ok(Response::from_parts(parts, Body::empty()))
}

/// The refusal for a failed exchange that the client's body did not cause.
fn failed(upstream: &Upstream, error: &ExchangeError) -> Rejection {
    let name = upstream.name().to_owned();
    if error.is_connect() {
        return Rejection::UpstreamUnavailable {
            upstream: name,
            reason: root_cause(error),
            kind: classify(error),
        };
    }
    tracing::debug!(upstream = upstream.name(), error = %error_chain(error), "upstream exchange failed");
    let reason = find_source::<hyper::Error>(error).map_or_else(|| root_cause(error), ToString::to_string);
    Rejection::UpstreamError {
        upstream: name,
        reason,
        kind: classify(error),
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
