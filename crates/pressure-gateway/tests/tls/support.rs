//! The harness of the TLS tests: servers on `127.0.0.1:0` (a plain or TLS
//! upstream on the gateway's own server, a whole gateway loaded from a
//! config file so that reloads read it again) and raw-TCP helpers.

use super::pki::Scratch;
use axum::routing::get;
use axum::Router;
use pressure_gateway::config;
use pressure_gateway::ServerTls;
use pressure_gateway::{serve_with, ServeOptions};
use pressure_gateway::{Gateway, Serving};
use serde_json::{json, Value};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Upper bound on any one test.
pub(crate) const BOUND: Duration = Duration::from_secs(30);

pub(crate) async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(BOUND, test)
        .await
        .expect("test exceeded its time bound");
}

/// A plain upstream that answers `proto=<X-Forwarded-Proto>`.
pub(crate) fn echo_proto() -> Router {
    Router::new().fallback(get(|headers: http::HeaderMap| async move {
        let proto = headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        format!("proto={proto}")
    }))
}

/// Serves `router` on `127.0.0.1:0` in the background (over TLS with
/// `tls`), until the returned sender is dropped.
pub(crate) async fn serve(
    router: Router,
    tls: Option<ServerTls>,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let options = ServeOptions {
        grace: Duration::from_millis(200),
        tls,
        ..ServeOptions::default()
    };
    tokio::spawn(async move {
        serve_with(listener, router, &options, async move {
            let _ = rx.await;
        })
        .await;
    });
    (addr, tx)
}

/// A gateway built from a config file written into `scratch` (so that
/// reloads read it again), serving on `127.0.0.1:0`.
pub(crate) struct TlsGateway {
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
    pub(crate) gateway: Gateway,
    pub(crate) file: PathBuf,
    serving: Option<Serving>,
}

impl TlsGateway {
    /// Writes `{"gateway": section}` (listeners filled in) to
    /// `scratch/gateway.json`, loads it and serves it.
    pub(crate) async fn start(scratch: &Scratch, mut section: Value) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let addr = listener.local_addr().expect("proxy addr");
        let admin = admin_listener.local_addr().expect("admin addr");
        section["listen"] = json!(addr.to_string());
        section["admin"]["listen"] = json!(admin.to_string());
        let file = scratch.write("gateway.json", &json!({ "gateway": section }).to_string());
        let cfg = config::load(&file).unwrap_or_else(|e| panic!("invalid test config: {e}"));
        let gateway = Gateway::build(cfg, scratch.dir())
            .await
            .expect("gateway builds")
            .with_source(&file);
        let serving = gateway.clone().spawn(listener, admin_listener);
        Self {
            addr,
            admin,
            gateway,
            file,
            serving: Some(serving),
        }
    }

    pub(crate) async fn stop(mut self) {
        if let Some(s) = self.serving.take() {
            s.stop(Duration::from_secs(5)).await;
        }
    }
}

/// Reads until the peer closes; what it sent and how long that took
/// (fails after `bound`).
pub(crate) async fn read_until_closed(stream: &mut TcpStream, bound: Duration) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(started + bound, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (got, started.elapsed()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the connection was still open after {bound:?}"),
        }
    }
}

/// `GET path` over plain HTTP/1.1 (`Connection: close`); the raw answer.
pub(crate) async fn plain_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let (got, _) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// A gateway section serving TLS with `server.crt`/`server.key` (relative
/// names: resolved against the config file's directory) in front of
/// `upstream`.
pub(crate) fn tls_section(upstream: SocketAddr, timeouts: Value) -> Value {
    json!({
        "tls": { "certFile": "server.crt", "keyFile": "server.key" },
        "admin": { "tls": { "certFile": "server.crt", "keyFile": "server.key" } },
        "upstreams": { "echo": { "url": format!("http://{upstream}"), "pathPrefix": "/" } },
        "timeouts": timeouts,
    })
}
