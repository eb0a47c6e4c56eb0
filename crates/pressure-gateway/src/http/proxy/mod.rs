//! The reverse proxy: routes a request to the upstream whose `pathPrefix`
//! is the longest one covering its path, and forwards it over pooled
//! keep-alive HTTP/1.1 connections (`pool.rs`). A routed request to an
//! `http://` upstream is exchanged in its own task on a kept plain-TCP
//! connection (`exchange.rs`, `chunked.rs`); upgrades, `https://`
//! upstreams and streamed request bodies go through hyper's client
//! connection.
//!
//! * **Routing** ([`Upstreams::route`]): prefixes match on path segments —
//!   `/api/v1` covers `/api/v1` and `/api/v1/x` but not `/api/v10`; `/`
//!   covers everything. No match: `404`.
//! * **Rewriting** ([`ProxyClient::forward`]): the URI becomes the upstream's
//!   scheme and authority, with the base URL's path (if any) prepended to
//!   the request's path; the query is kept. Hop-by-hop headers (`Connection`
//!   and what it names, `Keep-Alive`, `Proxy-Connection`,
//!   `Proxy-Authenticate`, `Proxy-Authorization`, `TE`, `Trailer`,
//!   `Transfer-Encoding`, `Upgrade`) are dropped on the request and on the
//!   response (WebSocket upgrades excepted, below). `X-Forwarded-For` gains
//!   the client's IP, `X-Forwarded-Proto` is `http` (`https` when the
//!   client came over TLS), `X-Forwarded-Host` is
//!   the `Host` the client sent, and `Host` names the upstream.
//! * **Bodies**: under the gateway's layers the request body is read whole
//!   (bounded by `limits.maxBodyBytes`) before the upstream is contacted,
//!   so a slow client holds no upstream connection and is answered `408`
//!   when its body is not complete within `timeouts.totalMs` (or idles
//!   for `bodyReadMs`); the upstream's `totalMs` starts when the request
//!   is complete. The upstream's body is returned as it arrives.
//! * **Failures**, answered as JSON `{"error":{"type":..,"message":..}}`:
//!   no response head within `timeouts.totalMs` → `504 upstream_timeout`;
//!   no connection (refused, unreachable, beyond `timeouts.connectMs`) →
//!   `502 upstream_unavailable` at once, never retried; any other failure →
//!   `502 upstream_error`.
//! * **WebSocket** (`upgrade.rs`): an HTTP/1.1 request with `Connection:
//!   upgrade` and `Upgrade: websocket` keeps those two headers on the way
//!   to the upstream; an upstream `101` is returned to the client with its
//!   `Upgrade` and `Connection: upgrade`, and a spawned task splices the two
//!   upgraded connections (`tokio::io::copy_bidirectional`) until both
//!   sides close. Serve the service with upgrades enabled
//!   ([`crate::http::server::serve`], or `axum::serve`) so the request carries
//!   hyper's upgrade handle; without it the request is forwarded as a plain
//!   one. Other `Upgrade` protocols (`h2c`, …) are dropped as hop-by-hop.
//!
//! The caller states what the proxy needs in a [`ForwardRequest`] (the
//! upstream, the body policy, the deadline, the connection's timer, the
//! peer) and gets the response or a [`ProxyFailure`]: in the gateway the
//! innermost service (`crate::answer`) maps it to a refusal; the
//! proxy on its own is `crate::ProxyService`.
//!
//! Upstreams are `http://` or `https://` (`connector.rs`: rustls, the
//! public roots or the upstream's `tls.caFile`, SNI from the URL's host).

mod body;
mod chunked;
mod client;
mod connector;
mod deadline;
mod error;
mod exchange;
mod exchange_error;
mod failure;
mod headers;
mod pool;
mod routing;
mod upgrade;

pub(crate) use body::is_too_large;
pub use client::{BodyPolicy, ForwardRequest, ProxyClient};
pub(crate) use deadline::ConnTimer;
pub use error::ProxyError;
pub use failure::{ProxyFailure, UpstreamFailure};
pub(crate) use routing::prefix_matches;
pub use routing::{Upstream, Upstreams};
