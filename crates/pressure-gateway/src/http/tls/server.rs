//! The listener side: [`server_config`] builds a rustls `ServerConfig` from
//! `gateway.tls` (or `gateway.admin.tls`), and [`ServerTls`] holds the one
//! new connections use, swapped whole on reload, and runs each handshake
//! within a deadline.

use super::pem::{load_certs, load_key};
use crate::settings::{ConfigError, ListenerTlsConfig};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::ServerConfig;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The ALPN protocols a TLS listener offers, preferred first.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The server config of `tls` (files relative to `base_dir`): its chain,
/// its key (which must belong to the chain's leaf), ALPN `h2` and
/// `http/1.1`, TLS 1.2 and 1.3. `path` is the JSON path of `tls`
/// (`gateway.tls`), which the errors extend (`gateway.tls.keyFile`).
pub(crate) fn server_config(
    tls: &ListenerTlsConfig,
    base_dir: &Path,
    path: &str,
) -> Result<Arc<ServerConfig>, ConfigError> {
    let certs = load_certs(&tls.cert_file, base_dir, &format!("{path}.certFile"))?;
    let key = load_key(&tls.key_file, base_dir, &format!("{path}.keyFile"))?;
    let mut config = ServerConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new(path, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            ConfigError::new(
                format!("{path}.keyFile"),
                format!("cannot be used with the certificate of certFile: {e}"),
            )
        })?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// A TLS listener's current server config. Cheap to clone: clones share
/// it, so a [`replace`](Self::replace) reaches every server thread, and
/// the next handshake on any of them uses the new certificate.
#[derive(Clone)]
pub struct ServerTls {
    current: Arc<ArcSwap<ServerConfig>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Serves with `config` until replaced.
    pub fn new(config: Arc<ServerConfig>) -> Self {
        Self {
            current: Arc::new(ArcSwap::new(config)),
        }
    }

    /// Loads `tls` (see `server_config`).
    pub fn load(tls: &ListenerTlsConfig, base_dir: &Path, path: &str) -> Result<Self, ConfigError> {
        server_config(tls, base_dir, path).map(Self::new)
    }

    /// New connections use `config` from now on; open ones keep theirs.
    pub fn replace(&self, config: Arc<ServerConfig>) {
        self.current.store(config);
    }

    /// The config new connections use now.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Runs the server handshake on `io` within `within`; `None` (after a
    /// rate-limited log line) when it fails or does not finish in time, and
    /// the caller drops the connection.
    pub(crate) async fn accept<IO>(&self, io: IO, within: Duration, peer: SocketAddr) -> Option<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = TlsAcceptor::from(self.current());
        match tokio::time::timeout(within, acceptor.accept(io)).await {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(e)) => {
                handshake_failed(peer, &e.to_string());
                None
            }
            Err(_) => {
                handshake_failed(peer, "no TLS handshake within timeouts.headerReadMs");
                None
            }
        }
    }
}

/// Marks a request that arrived over TLS (a request extension), so the
/// proxy tells the upstream `X-Forwarded-Proto: https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientTls;

/// When the last handshake failure was logged, and how many were not.
static FAILURES: Mutex<(Option<Instant>, u64)> = Mutex::new((None, 0));

/// Logs a failed handshake at most once a second (scanners and plain-HTTP
/// clients must not flood the log), with the count of the ones not logged.
fn handshake_failed(peer: SocketAddr, reason: &str) {
    let now = Instant::now();
    let mut gate = FAILURES.lock();
    if gate
        .0
        .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
    {
        gate.1 += 1;
        return;
    }
    let suppressed = std::mem::take(&mut gate.1);
    gate.0 = Some(now);
    drop(gate);
    tracing::info!(%peer, reason, suppressed, "TLS handshake failed; connection closed");
}
