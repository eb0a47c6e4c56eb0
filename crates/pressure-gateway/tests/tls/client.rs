//! A TLS client for the tests: one connection per request, the protocol
//! chosen by ALPN, and what the server presented (its certificate, the
//! negotiated protocol).

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// What one request over TLS got.
#[derive(Debug)]
pub(crate) struct TlsReply {
    pub(crate) status: u16,
    pub(crate) body: String,
    /// The negotiated ALPN protocol.
    pub(crate) alpn: Option<Vec<u8>>,
    /// The leaf certificate the server presented.
    pub(crate) cert: CertificateDer<'static>,
}

/// A client config trusting only `ca_pem`, offering `alpn`.
pub(crate) fn config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("ca pem"))
        .expect("ca root");
    let mut cfg = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// `GET path` on `addr` over a new TLS connection (SNI `localhost`), with
/// HTTP/2 when ALPN chose `h2`, else HTTP/1.1.
pub(crate) async fn get(addr: SocketAddr, config: Arc<ClientConfig>, path: &str) -> Result<TlsReply, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from("localhost").expect("server name");
    let tls = TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let cert = session
        .peer_certificates()
        .and_then(|c| c.first())
        .cloned()
        .ok_or("no peer certificate")?
        .into_owned();
    let io = TokioIo::new(tls);
    let uri = format!("https://localhost:{}{path}", addr.port());
    let response = if alpn.as_deref() == Some(b"h2") {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| format!("h2 handshake: {e}"))?;
        tokio::spawn(conn);
        let req = Request::get(uri).body(Empty::<Bytes>::new()).expect("request");
        sender
            .send_request(req)
            .await
            .map_err(|e| format!("h2 request: {e}"))?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| format!("h1 handshake: {e}"))?;
        tokio::spawn(conn);
        let req = Request::get(uri)
            .header(http::header::HOST, format!("localhost:{}", addr.port()))
            .body(Empty::<Bytes>::new())
            .expect("request");
        sender
            .send_request(req)
            .await
            .map_err(|e| format!("h1 request: {e}"))?
    };
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(TlsReply {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        alpn,
        cert,
    })
}
