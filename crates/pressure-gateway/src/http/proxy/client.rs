//! The forwarding half of the proxy: pooled HTTP/1.1 connections to the
//! upstreams (`pool.rs`), the request/response rewriting around them, and
//! the mapping of upstream failures to `502`/`504` answers.

use super::body::{ClientBody, ClientFault};
use super::connector::UpstreamConnector;
use super::deadline::{within, ConnTimer};
use super::error::ProxyError;
use super::exchange_error::ExchangeError;
use super::failure::{classify, ProxyFailure, UpstreamFailure};
use super::headers::{strip_hop_by_hop, strip_present, Forwarding, HopByHop};
use super::pool::Pool;
use super::routing::Upstream;
use super::upgrade::ClientUpgrade;
use crate::http::tls::{ClientTls, UpstreamTls};
use crate::settings::TimeoutConfig;
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

/// The upstream's response, or why there is none.
type Answer = Result<Response<Body>, ProxyFailure>;

/// TCP keepalive probes on upstream connections.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Forwards requests to upstreams over pooled keep-alive connections.
///
/// Cheap to clone: clones share the connection pool.
/// Response bodies stream; request bodies of routed requests are read
/// whole first (bounded by the body limit), see [`ProxyClient::forward`].
#[derive(Debug, Clone)]
pub struct ProxyClient {
    pool: Pool,
}

impl ProxyClient {
    /// Builds the client: connections are pooled (idle ones kept 90 s),
    /// `TCP_NODELAY` is set, and connecting is bounded by `connect_ms`
    /// (then `502`). The bound on the exchange up to the response head is
    /// given per request ([`ProxyClient::forward`]).
    pub fn new(timeouts: &TimeoutConfig) -> Result<ProxyClient, ProxyError> {
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
    pub fn with_connect_timeout(connect: Duration) -> ProxyClient {
        Self::with_upstream_tls(
            connect,
            Arc::new(ArcSwap::from_pointee(UpstreamTls::public_roots())),
        )
    }

    /// [`with_connect_timeout`](Self::with_connect_timeout), with
    /// `https://` upstreams verified by the current `tls` (the gateway
    /// swaps it on reload; the TLS handshake counts against `totalMs`).
    pub fn with_upstream_tls(connect: Duration, tls: Arc<ArcSwap<UpstreamTls>>) -> ProxyClient {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect));
        http.set_keepalive(Some(TCP_KEEPALIVE));
        // The scheme is checked by the connector: http:// plain, https://
        // over TLS.
        http.enforce_http(false);
        let connector = UpstreamConnector::new(http, tls);
        ProxyClient {
            pool: Pool::new(connector),
        }
    }

    /// Forwards `fwd.request` to `fwd.upstream` and returns its response,
    /// or why it could not ([`ProxyFailure`], which the caller maps to its
    /// answer).
    ///
    /// The URI becomes the upstream's base (its path, if any, prepended);
    /// hop-by-hop headers are dropped both ways; `X-Forwarded-For` (when
    /// the peer is known), `X-Forwarded-Proto` and `X-Forwarded-Host`
    /// are set and `Host` names the upstream. The response body streams.
    ///
    /// WebSocket: a request with `Connection: upgrade` and `Upgrade:
    /// websocket`, served on a connection hyper can upgrade (its `OnUpgrade`
    /// extension present), keeps those two headers; when the upstream
    /// answers `101`, the `101` is returned with the upstream's `Upgrade`
    /// and `Connection: upgrade`, and a spawned task splices the two
    /// upgraded connections until both sides close. A `101` the client did
    /// not ask for is [`ProxyFailure::Failed`].
    ///
    /// Failures: no response head within `fwd.total` →
    /// [`ProxyFailure::Timeout`]; no connection (refused, unreachable,
    /// connect timeout) → [`ProxyFailure::Unavailable`] at once, without
    /// retry; any other failure of the exchange → [`ProxyFailure::Failed`].
    /// The client's own faults are not blamed on the upstream: a request
    /// body above the bound, malformed (bad chunked framing, cut short) or
    /// not complete in time is `BodyTooLarge`, `BodyMalformed`,
    /// `BodyTimeout`.
    ///
    /// With [`BodyPolicy::Whole`] (under the gateway's layers) the request
    /// body is read whole before the upstream is contacted, and `total`
    /// starts afterwards; with [`BodyPolicy::Streamed`] it streams.
    pub async fn forward(&self, fwd: ForwardRequest) -> Result<Response<Body>, ProxyFailure> {
        let ForwardRequest {
            upstream,
            request: req,
            peer: client_addr,
            total,
            timer,
            body: policy,
        } = fwd;
        let upstream = &*upstream;
        let bounds = match policy {
            BodyPolicy::Whole { max_bytes, idle } => Some((max_bytes, idle)),
            BodyPolicy::Streamed => None,
        };
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
        let uri = target_of(upstream, &parts)?;
        let original_host = host_of(&parts);
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
            parts.extensions.get::<ClientTls>().is_some(),
        );
        // The upstream needs none of the request's extensions: the map
        // goes back for the next request (`layers::spare`).
        super::super::spare::give_back(std::mem::take(&mut parts.extensions));
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

/// What the proxy needs to forward one request, stated by its caller
/// (nothing is read from the request's extensions).
#[derive(Debug)]
pub struct ForwardRequest {
    /// The upstream to forward to.
    pub upstream: Arc<Upstream>,
    /// The request, as the client sent it.
    pub request: Request<Body>,
    /// The client's address, for `X-Forwarded-For`.
    pub peer: Option<SocketAddr>,
    /// The bound on the exchange up to the response head (`timeouts.totalMs`).
    pub total: Duration,
    /// The client connection's timer to keep `total` on (no timer made per
    /// request), when the connection lends one.
    pub(crate) timer: Option<ConnTimer>,
    /// How the request body is read.
    pub body: BodyPolicy,
}

impl ForwardRequest {
    /// `request` to `upstream`, its response head due within `total`, its
    /// body streamed, no peer known.
    pub fn new(upstream: Arc<Upstream>, request: Request<Body>, total: Duration) -> Self {
        Self {
            upstream,
            request,
            peer: None,
            total,
            timer: None,
            body: BodyPolicy::Streamed,
        }
    }
}

/// How the proxy reads a request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyPolicy {
    /// Whole, before the upstream is contacted, at most `max_bytes`, with
    /// at most `idle` between two reads: a slow client holds no upstream
    /// connection (the gateway's routed requests).
    Whole {
        /// The body limit (`limits.maxBodyBytes`).
        max_bytes: u64,
        /// The longest gap between two reads (`timeouts.bodyReadMs`).
        idle: Option<Duration>,
    },
    /// As it comes, unbounded (the proxy on its own).
    Streamed,
}

/// The target to send upstream: origin-form (authority-form for
/// `CONNECT`), since the connection names the upstream.
fn target_of(upstream: &Upstream, parts: &http::request::Parts) -> Result<Uri, ProxyFailure> {
    let target = if parts.method == Method::CONNECT {
        Ok(Uri::from(upstream.authority().clone()))
    } else {
        upstream.origin_target(parts.uri.path_and_query())
    };
    target.map_err(|error| {
        tracing::debug!(upstream = upstream.name(), %error, "request target cannot be forwarded");
        ProxyFailure::BadTarget
    })
}

/// The `Host` the client sent (or its absolute target's authority), for
/// `X-Forwarded-Host`.
fn host_of(parts: &http::request::Parts) -> Option<HeaderValue> {
    parts.headers.get(header::HOST).cloned().or_else(|| {
        parts
            .uri
            .authority()
            .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
    })
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
    client_fault: impl FnOnce() -> Option<ProxyFailure>,
    sent: Result<Result<Response<R>, ExchangeError>, ()>,
    answer: impl FnOnce(Response<R>) -> Answer,
) -> Answer {
    match sent {
        Ok(Ok(response)) => answer(response),
        Ok(Err(error)) => Err(client_fault().unwrap_or_else(|| failed(upstream, &error))),
        Err(()) => Err(client_fault().unwrap_or_else(|| ProxyFailure::Timeout {
            upstream: upstream.name().to_owned(),
            after_ms: u64::try_from(total.as_millis()).unwrap_or(u64::MAX),
        })),
    }
}

/// The refusal for a `101` the client did not ask for.
fn unasked_switch(upstream: &Upstream) -> ProxyFailure {
    ProxyFailure::Failed {
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
) -> Result<Bytes, ProxyFailure> {
    if http_body::Body::is_end_stream(&body) {
        return Ok(Bytes::new());
    }
    match tokio::time::timeout(deadline, http_body_util::BodyExt::collect(body)).await {
        Ok(Ok(whole)) => Ok(whole.to_bytes()),
        Ok(Err(_)) => Err(fault.take().unwrap_or(ProxyFailure::BodyMalformed)),
        Err(_elapsed) => Err(ProxyFailure::BodyTimeout {
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
) -> Answer {
    let (mut parts, _body) = response.into_parts();
    let Some(client_upgrade) = client_upgrade else {
        return Err(unasked_switch(upstream));
    };
    let Some(upstream_upgrade) = parts.extensions.remove::<OnUpgrade>() else {
        return Err(ProxyFailure::Failed {
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
fn failed(upstream: &Upstream, error: &ExchangeError) -> ProxyFailure {
    let name = upstream.name().to_owned();
    if error.is_connect() {
        return ProxyFailure::Unavailable {
            upstream: name,
            reason: root_cause(error),
            kind: classify(error),
        };
    }
    tracing::debug!(upstream = upstream.name(), error = %error_chain(error), "upstream exchange failed");
    let reason = find_source::<hyper::Error>(error).map_or_else(|| root_cause(error), ToString::to_string);
    ProxyFailure::Failed {
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
