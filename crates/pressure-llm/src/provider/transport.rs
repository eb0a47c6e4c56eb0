//! The transport of a remote provider: how its connections are opened and
//! what a failure to open one means.
//!
//! hyper 1 through hyper-util's pooling client (idle connections kept 90 s,
//! at most `maxConnections` of them), TCP with `TCP_NODELAY` and keepalive,
//! TLS by rustls (ring) trusting the webpki roots, ALPN `h2` and `http/1.1`
//! for `https://` providers (HTTP/2 when the provider offers it), plain
//! HTTP/1.1 for `http://` ones. The whole connect (DNS, TCP, TLS) is
//! bounded by `connectMs` ([`TimedConnector`]).
//!
//! A provider that the environment puts behind a proxy (`HTTPS_PROXY`,
//! `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, read when the client is built, as
//! reqwest and curl read them) is reached through a `CONNECT` tunnel of
//! that proxy ([`route_for`], [`Route`]; `http://` proxies, with the
//! `user:pass@` of their URL as basic auth); TLS to an `https://` provider
//! runs inside the tunnel.
//!
//! The request body is a [`TrackedBody`]: it tells the caller when the
//! connection started writing it and when it took all of it, which is how
//! the client bounds the write phase apart from the connect.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use hyper::body::{Body, Frame, SizeHint};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::{Intercept, Matcher};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::oneshot;

use super::body::error_chain;
use super::config::TimeoutsConfig;
use super::error::{CallError, ProviderError};
use crate::taxonomy::{ErrorKind, TimeoutPhase};

/// The pooled hyper client of one provider.
pub(super) type Http = Client<TimedConnector, TrackedBody>;

/// The HTTP client of a provider: its connect timeout and idle pool, with
/// the TCP settings reqwest used before (keepalive 15 s, 3 probes 15 s
/// apart, a 30 s user timeout on Linux), reaching it by `route`.
pub(super) fn http_client(
    name: &str,
    t: &TimeoutsConfig,
    route: Option<Intercept>,
) -> Result<Http, ProviderError> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(t.connect()));
    tcp.set_keepalive(Some(Duration::from_secs(15)));
    tcp.set_keepalive_interval(Some(Duration::from_secs(15)));
    tcp.set_keepalive_retries(Some(3));
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    tcp.set_tcp_user_timeout(Some(Duration::from_secs(30)));
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ProviderError::Client {
            provider: name.to_owned(),
            reason: error_chain(&e),
        })?
        .with_root_certificates(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(Route::new(tcp, route));
    let connector = TimedConnector {
        inner: https,
        timeout: t.connect(),
    };
    Ok(Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(t.slots())
        .build(connector))
}

/// The proxy the environment names for `uri` (`HTTPS_PROXY` / `HTTP_PROXY`
/// by the URI's scheme, else `ALL_PROXY`, unless `NO_PROXY` excludes its
/// host: the variables reqwest, used before, and curl read), when it is an
/// `http://` proxy the client can tunnel through. A proxy of another scheme
/// (`https://`, `socks5://`) is not supported: the provider is reached
/// directly, with a warning that says so.
pub(super) fn route_for(name: &str, uri: &Uri) -> Option<Intercept> {
    let intercept = Matcher::from_env().intercept(uri)?;
    if intercept.uri().scheme() == Some(&http::uri::Scheme::HTTP) {
        tracing::info!(provider = %name, proxy = %intercept.uri(), "provider calls go through a proxy (CONNECT)");
        Some(intercept)
    } else {
        tracing::warn!(
            provider = %name,
            proxy = %intercept.uri(),
            "only http:// proxies are supported: provider calls connect directly"
        );
        None
    }
}

/// How a provider's connections are opened: directly, or through a
/// `CONNECT` tunnel of an HTTP proxy (TLS, for an `https://` provider, then
/// runs inside the tunnel, end to end with the provider).
#[derive(Clone)]
pub(super) enum Route {
    Direct(HttpConnector),
    Tunnel(Tunnel<HttpConnector>),
}

impl Route {
    fn new(tcp: HttpConnector, proxy: Option<Intercept>) -> Self {
        match proxy {
            None => Self::Direct(tcp),
            Some(p) => {
                let tunnel = Tunnel::new(p.uri().clone(), tcp);
                Self::Tunnel(match p.basic_auth() {
                    Some(auth) => tunnel.with_auth(auth.clone()),
                    None => tunnel,
                })
            }
        }
    }
}

impl tower::Service<Uri> for Route {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Self::Direct(c) => tower::Service::<Uri>::poll_ready(c, cx).map_err(Into::into),
            Self::Tunnel(t) => tower::Service::<Uri>::poll_ready(t, cx).map_err(Into::into),
        }
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match self {
            Self::Direct(c) => {
                let connecting = tower::Service::<Uri>::call(c, dst);
                Box::pin(async move { connecting.await.map_err(Into::into) })
            }
            Self::Tunnel(t) => {
                // The tunnel asks for port 443 when the URI names none; an
                // `http://` provider's default is 80.
                let dst = match (dst.port_u16(), dst.scheme_str(), dst.host()) {
                    (None, Some("http"), Some(host)) => {
                        Uri::try_from(format!("http://{host}:80")).unwrap_or(dst)
                    }
                    _ => dst,
                };
                let connecting = tower::Service::<Uri>::call(t, dst);
                Box::pin(async move { connecting.await.map_err(Into::into) })
            }
        }
    }
}

/// An error of the connector (boxed, as hyper-util expects).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The connector bounded by `connectMs` as a whole (DNS, TCP and TLS), as
/// reqwest's connect timeout was.
#[derive(Clone)]
pub(super) struct TimedConnector {
    inner: HttpsConnector<Route>,
    timeout: Duration,
}

/// Connecting took longer than `connectMs`.
#[derive(Debug)]
struct ConnectTimedOut;

impl fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connect timed out")
    }
}

impl std::error::Error for ConnectTimedOut {}

impl tower::Service<Uri> for TimedConnector {
    type Response = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Uri>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = tower::Service::<Uri>::call(&mut self.inner, dst);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(r) => r,
                Err(_) => Err(Box::new(ConnectTimedOut) as BoxError),
            }
        })
    }
}

/// Maps a failure of sending the request (before any response head).
pub(super) fn send_error(e: &hyper_util::client::legacy::Error, t: &TimeoutsConfig) -> CallError {
    let chain = error_chain(e);
    if is_timeout(e) {
        // The only timeout inside the client is the connect timeout.
        CallError::timeout(
            TimeoutPhase::Connect,
            format!("connect timed out after {} ms: {chain}", t.connect_ms),
        )
    } else {
        // Refused, reset, DNS failure, TLS failure, closed before the head.
        CallError::transport(ErrorKind::Connection, chain)
    }
}

/// Whether a timer ended the connect: the connector's, the TCP connect's
/// (`connectMs` per address), or the system's (`ETIMEDOUT`).
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(err) = source {
        if err.is::<ConnectTimedOut>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout)
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// The request body, signalling when the connection first polls it (it is
/// ready to write) and when it has taken all of it (or dropped it).
pub(super) struct TrackedBody {
    data: Option<Bytes>,
    started: Option<oneshot::Sender<()>>,
    written: Option<oneshot::Sender<()>>,
}

/// The signals of a [`TrackedBody`]: the connection started writing it,
/// and took all of it.
pub(super) struct BodySignals {
    pub(super) started: oneshot::Receiver<()>,
    pub(super) written: oneshot::Receiver<()>,
}

impl TrackedBody {
    /// `body`, and the receivers of its two signals.
    pub(super) fn new(body: Vec<u8>) -> (Self, BodySignals) {
        let (started_tx, started) = oneshot::channel();
        let (written_tx, written) = oneshot::channel();
        let tracked = Self {
            data: Some(Bytes::from(body)),
            started: Some(started_tx),
            written: Some(written_tx),
        };
        (tracked, BodySignals { started, written })
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(tx) = self.written.take() {
            let _ = tx.send(());
        }
        Poll::Ready(None)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(
            self.data
                .as_ref()
                .map_or(0, |d| u64::try_from(d.len()).unwrap_or(u64::MAX)),
        )
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        // A length-delimited body may be dropped once its bytes are taken,
        // without being polled to its end.
        if self.data.is_none() {
            if let Some(tx) = self.written.take() {
                let _ = tx.send(());
            }
        }
    }
}
