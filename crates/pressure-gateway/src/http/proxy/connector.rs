//! [`UpstreamConnector`]: the proxy's connector. `http://` upstreams get a
//! plain TCP connection (the `HttpConnector` as before); `https://` ones get
//! TLS on top, through `hyper-rustls`, with the trust of their `host:port`
//! from the current [`UpstreamTls`] (swapped on reload) and the URL's host
//! as SNI and verified name.

use crate::http::tls::UpstreamTls;
use arc_swap::ArcSwap;
use http::uri::Scheme;
use http::Uri;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpStream;

/// An error of the connector (boxed, as hyper-util expects).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects to upstreams over TCP, and over TLS for `https://` ones.
#[derive(Clone)]
pub(crate) struct UpstreamConnector {
    http: HttpConnector,
    tls: Arc<ArcSwap<UpstreamTls>>,
}

impl std::fmt::Debug for UpstreamConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConnector")
            .field("tls", &self.tls.load())
            .finish_non_exhaustive()
    }
}

impl UpstreamConnector {
    /// TCP through `http` (it must accept `https://` URIs:
    /// `enforce_http(false)`), TLS with the configs of `tls`.
    pub(crate) fn new(http: HttpConnector, tls: Arc<ArcSwap<UpstreamTls>>) -> Self {
        Self { http, tls }
    }
}

impl UpstreamConnector {
    /// A plain TCP connection to the `http://` upstream `dst` (the same
    /// connect timeout, `TCP_NODELAY` and keepalive as for hyper's).
    pub(crate) async fn connect_tcp(&self, dst: Uri) -> Result<TcpStream, BoxError> {
        let mut http = self.http.clone();
        let io = tower::Service::<Uri>::call(&mut http, dst).await?;
        Ok(io.into_inner())
    }
}

impl tower::Service<Uri> for UpstreamConnector {
    type Response = MaybeHttpsStream<TokioIo<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Uri>::poll_ready(&mut self.http, cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        if dst.scheme() != Some(&Scheme::HTTPS) {
            let connecting = tower::Service::<Uri>::call(&mut self.http, dst);
            return Box::pin(async move { Ok(MaybeHttpsStream::Http(connecting.await?)) });
        }
        let authority = dst.authority().map_or("", |a| a.as_str());
        let Some(config) = self.tls.load().for_authority(authority) else {
            return Box::pin(async { Err("no TLS client config for https:// upstreams".into()) });
        };
        let mut https = HttpsConnector::from((self.http.clone(), config));
        tower::Service::<Uri>::call(&mut https, dst)
    }
}
