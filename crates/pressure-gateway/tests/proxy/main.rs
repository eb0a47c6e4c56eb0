//! The reverse proxy over real sockets: echo upstreams on `127.0.0.1:0`, a
//! `ProxyService` served by axum on another `127.0.0.1:0`, and a hyper
//! client. Every test stops its servers and is bounded in time.

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::Router;
use bytes::Bytes;
use futures::StreamExt;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pressure_gateway::config::{TimeoutConfig, UpstreamConfig};
use pressure_gateway::Dialect;
use pressure_gateway::{Proxy, ProxyService, Upstreams};
use serde_json::Value;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Upper bound on any one test.
const TEST_BOUND: Duration = Duration::from_secs(20);

async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(TEST_BOUND, test)
        .await
        .expect("test exceeded its time bound");
}

/// A server on `127.0.0.1:0`, stopped by [`Server::stop`] (or aborted when
/// dropped, e.g. by a failing test).
struct Server {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Server {
    async fn serve(router: Router) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
            .expect("serve");
        });
        Server {
            addr,
            shutdown: Some(tx),
            handle: Some(handle),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Graceful shutdown, aborted after a second (pooled keep-alive
    /// connections of other servers may hold it open).
    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(mut handle) = self.handle.take() {
            if tokio::time::timeout(Duration::from_secs(1), &mut handle)
                .await
                .is_err()
            {
                handle.abort();
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(handle) = &self.handle {
            handle.abort();
        }
    }
}

/// Echoes what it received as JSON (`/…/mirror` streams the body back
/// instead); answers with hop-by-hop headers the proxy must drop.
async fn echo(
    State(name): State<&'static str>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request<Body>,
) -> Response<Body> {
    if req.uri().path().ends_with("/mirror") {
        return Response::new(req.into_body());
    }
    let (parts, body) = req.into_parts();
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in &parts.headers {
        headers
            .entry(name.as_str().to_owned())
            .or_default()
            .push(value.to_str().expect("ascii header").to_owned());
    }
    let body = body.collect().await.expect("request body").to_bytes();
    let json = serde_json::json!({
        "upstream": name,
        "peer": peer.to_string(),
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONNECTION, "x-upstream-hop")
        .header("x-upstream-hop", "1")
        .header("keep-alive", "timeout=5")
        .header("x-upstream-kept", "yes")
        .body(Body::from(json.to_string()))
        .expect("response")
}

async fn echo_upstream(name: &'static str) -> Server {
    Server::serve(Router::new().fallback(echo).with_state(name)).await
}

fn upstreams(entries: &[(&str, String, &str)]) -> BTreeMap<String, UpstreamConfig> {
    entries
        .iter()
        .map(|(name, url, prefix)| {
            (
                (*name).to_owned(),
                UpstreamConfig {
                    url: url.clone(),
                    path_prefix: (*prefix).to_owned(),
                    tls: None,
                },
            )
        })
        .collect()
}

fn timeouts(total_ms: u64) -> TimeoutConfig {
    TimeoutConfig {
        connect_ms: 1_000,
        total_ms,
        ..TimeoutConfig::default()
    }
}

async fn proxy_server(entries: &[(&str, String, &str)], total_ms: u64) -> Server {
    proxy_server_with(entries, &timeouts(total_ms)).await
}

async fn proxy_server_with(entries: &[(&str, String, &str)], timeouts: &TimeoutConfig) -> Server {
    let service = ProxyService::from_config(&upstreams(entries), timeouts).expect("proxy config");
    Server::serve(Router::new().fallback_service(service)).await
}

fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

async fn send(req: Request<Body>) -> Response<Body> {
    client().request(req).await.expect("request").map(Body::new)
}

async fn get(url: String) -> Response<Body> {
    send(Request::get(url).body(Body::empty()).expect("request")).await
}

async fn body_bytes(response: Response<Body>) -> Bytes {
    response
        .into_body()
        .collect()
        .await
        .expect("response body")
        .to_bytes()
}

async fn json(response: Response<Body>) -> Value {
    let bytes = body_bytes(response).await;
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {bytes:?}"))
}

fn header_values(echoed: &Value, name: &str) -> Vec<String> {
    echoed["headers"][name]
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn forwards_method_path_query_and_body() {
    bounded(async {
        let up = echo_upstream("rest").await;
        let proxy = proxy_server(&[("rest", up.url(), "/api")], 5_000).await;

        let response = send(
            Request::builder()
                .method(Method::PUT)
                .uri(format!("{}/api/items/7?x=1&y=two%20words", proxy.url()))
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from("hello upstream"))
                .expect("request"),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let echoed = json(response).await;
        assert_eq!(echoed["upstream"], "rest");
        assert_eq!(echoed["method"], "PUT");
        assert_eq!(echoed["path"], "/api/items/7");
        assert_eq!(echoed["query"], "x=1&y=two%20words");
        assert_eq!(echoed["body"], "hello upstream");
        assert_eq!(header_values(&echoed, "content-type"), ["text/plain"]);
        assert_eq!(header_values(&echoed, "host"), [up.addr.to_string()]);

        proxy.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test]
async fn base_path_of_the_upstream_url_is_prepended() {
    bounded(async {
        let up = echo_upstream("based").await;
        let proxy = proxy_server(&[("based", format!("{}/base/", up.url()), "/b")], 5_000).await;

        let echoed = json(get(format!("{}/b/x?q=1", proxy.url())).await).await;
        assert_eq!(echoed["path"], "/base/b/x");
        assert_eq!(echoed["query"], "q=1");

        proxy.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test]
async fn hop_by_hop_headers_are_dropped_both_ways_and_forwarding_headers_set() {
    bounded(async {
        let up = echo_upstream("rest").await;
        let proxy = proxy_server(&[("rest", up.url(), "/")], 5_000).await;

        let response = send(
            Request::get(format!("{}/h", proxy.url()))
                .header(header::CONNECTION, "x-custom, keep-alive")
                .header("x-custom", "1")
                .header("keep-alive", "timeout=5")
                .header(header::TE, "trailers")
                .header(header::PROXY_AUTHORIZATION, "Basic Zm9vOmJhcg==")
                .header("proxy-connection", "keep-alive")
                .header("x-kept", "yes")
                .header("x-forwarded-for", "203.0.113.7")
                .header("x-forwarded-proto", "https")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);

        // Response side: what the upstream marked hop-by-hop is gone.
        let headers: HeaderMap = response.headers().clone();
        assert!(headers.get("x-upstream-hop").is_none(), "{headers:?}");
        assert!(headers.get("keep-alive").is_none(), "{headers:?}");
        assert!(headers.get(header::CONNECTION).is_none(), "{headers:?}");
        assert_eq!(headers["x-upstream-kept"], "yes");

        // Request side.
        let echoed = json(response).await;
        for dropped in [
            "connection",
            "x-custom",
            "keep-alive",
            "te",
            "proxy-authorization",
            "proxy-connection",
        ] {
            assert!(
                header_values(&echoed, dropped).is_empty(),
                "upstream saw {dropped}: {}",
                echoed["headers"]
            );
        }
        assert_eq!(header_values(&echoed, "x-kept"), ["yes"]);
        assert_eq!(
            header_values(&echoed, "x-forwarded-for"),
            ["203.0.113.7, 127.0.0.1"]
        );
        assert_eq!(header_values(&echoed, "x-forwarded-proto"), ["http"]);
        assert_eq!(
            header_values(&echoed, "x-forwarded-host"),
            [proxy.addr.to_string()]
        );
        assert_eq!(header_values(&echoed, "host"), [up.addr.to_string()]);

        proxy.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test]
async fn longest_prefix_wins_on_segment_boundaries() {
    bounded(async {
        let root = echo_upstream("root").await;
        let v1 = echo_upstream("v1").await;
        let proxy = proxy_server(&[("root", root.url(), "/"), ("v1", v1.url(), "/api/v1")], 5_000).await;

        for (path, expected) in [
            ("/api/v1", "v1"),
            ("/api/v1/users/3", "v1"),
            ("/api/v10", "root"),
            ("/api/v10/users", "root"),
            ("/api", "root"),
            ("/", "root"),
        ] {
            let echoed = json(get(format!("{}{path}", proxy.url())).await).await;
            assert_eq!(echoed["upstream"], expected, "{path}");
            assert_eq!(echoed["path"], path);
        }

        proxy.stop().await;
        root.stop().await;
        v1.stop().await;
    })
    .await;
}

#[tokio::test]
async fn unmatched_path_is_404_json() {
    bounded(async {
        let v1 = echo_upstream("v1").await;
        let proxy = proxy_server(&[("v1", v1.url(), "/api/v1")], 5_000).await;

        for path in ["/api/v10", "/api", "/other"] {
            let response = get(format!("{}{path}", proxy.url())).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
            let body = json(response).await;
            assert_eq!(body["error"]["type"], "not_found");
            assert_eq!(
                body["error"]["message"],
                format!("no upstream serves path {path}")
            );
        }

        proxy.stop().await;
        v1.stop().await;
    })
    .await;
}

#[tokio::test]
async fn upstream_connections_are_pooled() {
    bounded(async {
        let up = echo_upstream("rest").await;
        let proxy = proxy_server(&[("rest", up.url(), "/")], 5_000).await;

        let first = json(get(format!("{}/a", proxy.url())).await).await;
        let second = json(get(format!("{}/b", proxy.url())).await).await;
        assert_eq!(
            first["peer"], second["peer"],
            "the second request reuses the connection"
        );

        proxy.stop().await;
        up.stop().await;
    })
    .await;
}

type Chunks = Arc<Mutex<Option<futures::channel::mpsc::Receiver<Bytes>>>>;

/// Streams whatever the test pushes into its channel, as it arrives.
async fn streaming(State(chunks): State<Chunks>) -> Response<Body> {
    let rx = chunks
        .lock()
        .expect("lock")
        .take()
        .expect("one streaming request");
    let mut response = Response::new(Body::from_stream(rx.map(Ok::<_, Infallible>)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

#[tokio::test]
async fn response_body_streams_chunk_by_chunk() {
    bounded(async {
        let (mut tx, rx) = futures::channel::mpsc::channel::<Bytes>(4);
        let chunks: Chunks = Arc::new(Mutex::new(Some(rx)));
        let up = Server::serve(Router::new().fallback(streaming).with_state(chunks)).await;
        let proxy = proxy_server(&[("sse", up.url(), "/")], 5_000).await;

        tx.try_send(Bytes::from_static(b"data: first\n\n"))
            .expect("first chunk");
        let response = get(format!("{}/events", proxy.url())).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
        let mut body = response.into_body();

        // The first chunk arrives while the upstream has not sent the last.
        let first = tokio::time::timeout(Duration::from_secs(2), body.frame())
            .await
            .expect("first chunk arrives before the upstream finishes")
            .expect("a frame")
            .expect("no error")
            .into_data()
            .expect("data");
        assert_eq!(first, Bytes::from_static(b"data: first\n\n"));

        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.try_send(Bytes::from_static(b"data: second\n\n"))
            .expect("second chunk");
        let second = tokio::time::timeout(Duration::from_secs(2), body.frame())
            .await
            .expect("second chunk")
            .expect("a frame")
            .expect("no error")
            .into_data()
            .expect("data");
        assert_eq!(second, Bytes::from_static(b"data: second\n\n"));

        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.try_send(Bytes::from_static(b"data: last\n\n"))
            .expect("last chunk");
        drop(tx);
        let rest = body.collect().await.expect("rest").to_bytes();
        assert_eq!(rest, Bytes::from_static(b"data: last\n\n"));

        proxy.stop().await;
        up.stop().await;
    })
    .await;
}

/// A refused connection is a 502 at once: not after waiting out the
/// connect timeout (retrying, say), which is what the bound is set against.
#[tokio::test]
async fn upstream_down_is_502_at_once() {
    bounded(async {
        // A port nothing listens on: bound, then released.
        let dead = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr")
        };
        let timeouts = TimeoutConfig {
            connect_ms: 10_000,
            total_ms: 15_000,
            ..TimeoutConfig::default()
        };
        let proxy = proxy_server_with(&[("down", format!("http://{dead}"), "/")], &timeouts).await;

        let started = Instant::now();
        let response = get(format!("{}/x", proxy.url())).await;
        let elapsed = started.elapsed();
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        // A refusal takes milliseconds; the connect timeout is far above
        // anything a loaded machine adds to that.
        let connect_timeout = Duration::from_millis(timeouts.connect_ms);
        assert!(
            elapsed < connect_timeout / 4,
            "took {elapsed:?}: waited for the {connect_timeout:?} connect timeout"
        );
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = json(response).await;
        assert_eq!(body["error"]["type"], "upstream_unavailable");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(message.starts_with("upstream down is unavailable"), "{message}");

        proxy.stop().await;
    })
    .await;
}

/// The total timeout fires: a 504, not before the configured value (the
/// proxy starts counting after this test starts its clock), and not hung
/// (the upper bound is many times the value: it catches a timeout that
/// never fires, not a slow machine).
#[tokio::test]
async fn silent_upstream_is_504_after_total_timeout() {
    bounded(async {
        const TOTAL: Duration = Duration::from_millis(300);
        // Accepts connections, never reads nor answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let silent = listener.local_addr().expect("addr");
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let proxy = proxy_server(
            &[("slow", format!("http://{silent}"), "/")],
            TOTAL.as_millis() as u64,
        )
        .await;

        let started = Instant::now();
        let response = tokio::time::timeout(TOTAL * 20, get(format!("{}/x", proxy.url())))
            .await
            .expect("the total timeout fires");
        let elapsed = started.elapsed();
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
        assert!(
            elapsed >= TOTAL,
            "504 after {elapsed:?}, before the {TOTAL:?} timeout"
        );
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = json(response).await;
        assert_eq!(
            body,
            serde_json::json!({"error": {
                "type": "upstream_timeout",
                "message": "upstream slow did not answer within 300 ms",
            }})
        );

        proxy.stop().await;
        hold.abort();
    })
    .await;
}

/// 5 MB of a pattern that catches reordered or dropped chunks.
fn large_payload() -> Vec<u8> {
    (0..5 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect()
}

fn chunked(payload: &[u8]) -> Body {
    let chunks: Vec<Result<Bytes, Infallible>> = payload
        .chunks(64 * 1024)
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    Body::from_stream(futures::stream::iter(chunks))
}

#[tokio::test]
async fn large_bodies_stream_through_intact() {
    bounded(async {
        let up = echo_upstream("rest").await;
        let proxy = proxy_server(&[("rest", up.url(), "/")], 10_000).await;
        let payload = large_payload();

        // Chunked (no length known up front).
        let response = send(
            Request::post(format!("{}/upload/mirror", proxy.url()))
                .body(chunked(&payload))
                .expect("request"),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let echoed = body_bytes(response).await;
        assert_eq!(echoed.len(), payload.len());
        assert!(echoed == payload[..], "chunked body altered");

        // With Content-Length.
        let response = send(
            Request::post(format!("{}/upload/mirror", proxy.url()))
                .header(header::CONTENT_LENGTH, payload.len())
                .body(Body::from(payload.clone()))
                .expect("request"),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let echoed = body_bytes(response).await;
        assert!(echoed == payload[..], "sized body altered");

        proxy.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test]
async fn body_cut_by_a_length_limit_is_413() {
    bounded(async {
        let up = echo_upstream("rest").await;
        let proxy = Proxy::new(&timeouts(5_000)).expect("proxy");
        let table = Upstreams::new(&upstreams(&[("rest", up.url(), "/")])).expect("upstreams");
        let upstream = table.route("/upload/mirror").expect("routed").clone();

        let limited = Body::new(http_body_util::Limited::new(chunked(&large_payload()), 1_000));
        let req = Request::post("/upload/mirror").body(limited).expect("request");
        let refusal = proxy
            .forward(&upstream, req, None, Duration::from_secs(5))
            .await
            .expect_err("refused");
        let response = refusal.render(Dialect::Gateway);
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(json(response).await["error"]["type"], "payload_too_large");

        up.stop().await;
    })
    .await;
}

#[tokio::test]
async fn service_without_connect_info_sets_no_forwarded_for() {
    bounded(async {
        use tower::ServiceExt;

        let up = echo_upstream("rest").await;
        let service = ProxyService::from_config(&upstreams(&[("rest", up.url(), "/")]), &timeouts(5_000))
            .expect("proxy");
        let req = Request::get("/no-addr")
            .header(header::HOST, "gw.example")
            .header(HeaderName::from_static("x-forwarded-for"), "198.51.100.1")
            .body(Body::empty())
            .expect("request");
        let response = service.oneshot(req).await.expect("infallible");
        let echoed = json(response).await;
        assert_eq!(header_values(&echoed, "x-forwarded-for"), ["198.51.100.1"]);
        assert_eq!(header_values(&echoed, "x-forwarded-host"), ["gw.example"]);

        up.stop().await;
    })
    .await;
}

/// The `Sec-WebSocket-Key` of RFC 6455's example handshake, and the
/// `Sec-WebSocket-Accept` that answers it.
const WS_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const WS_ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// A hyper HTTP/1.1 upstream that accepts `Upgrade: websocket` with a `101`
/// (reporting the `Connection` / `Upgrade` it received in `x-seen-*`
/// headers) and then echoes raw bytes over the upgraded connection; other
/// requests get `426` with the same report.
async fn ws_upstream() -> (SocketAddr, JoinHandle<()>) {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    async fn handle(
        mut req: Request<hyper::body::Incoming>,
    ) -> Result<Response<http_body_util::Empty<Bytes>>, Infallible> {
        let seen = |name: header::HeaderName| {
            req.headers()
                .get_all(name)
                .iter()
                .map(|v| v.to_str().expect("ascii"))
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let seen_connection = seen(header::CONNECTION);
        let seen_upgrade = seen(header::UPGRADE);
        let mut response = Response::builder()
            .header("x-seen-connection", seen_connection.as_str())
            .header("x-seen-upgrade", seen_upgrade.as_str());
        if !seen_upgrade.eq_ignore_ascii_case("websocket") {
            return Ok(response
                .status(StatusCode::UPGRADE_REQUIRED)
                .body(http_body_util::Empty::new())
                .expect("response"));
        }
        let accept =
            if req.headers().get("sec-websocket-key").map(HeaderValue::as_bytes) == Some(WS_KEY.as_bytes()) {
                WS_ACCEPT
            } else {
                "unexpected-key"
            };
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let upgraded = on_upgrade.await.expect("upstream side upgraded");
            let (mut read, mut write) = tokio::io::split(TokioIo::new(upgraded));
            let _ = tokio::io::copy(&mut read, &mut write).await;
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut write).await;
        });
        response = response
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header(header::UPGRADE, "websocket")
            .header(header::CONNECTION, "Upgrade")
            .header("sec-websocket-accept", accept)
            .header("x-upstream-kept", "yes");
        Ok(response.body(http_body_util::Empty::new()).expect("response"))
    }

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handle = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(handle))
                    .with_upgrades()
                    .await;
            });
        }
    });
    (addr, handle)
}

/// The proxy served by the gateway's own accept loop
/// (`pressure_gateway::serve`, upgrades enabled).
async fn upgrading_proxy(up: SocketAddr) -> (SocketAddr, oneshot::Sender<()>, JoinHandle<()>) {
    let service = ProxyService::from_config(
        &upstreams(&[("ws", format!("http://{up}"), "/")]),
        &timeouts(5_000),
    )
    .expect("proxy config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(pressure_gateway::serve(listener, service, 65_536, async move {
        let _ = rx.await;
    }));
    (addr, tx, handle)
}

/// Reads a response head (up to the blank line) byte by byte, so that
/// nothing after it is consumed; returns the status code and the headers
/// (names lower-cased).
async fn read_head(stream: &mut tokio::net::TcpStream) -> (u16, Vec<(String, String)>) {
    use tokio::io::AsyncReadExt;

    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = stream.read_u8().await.expect("response head");
        head.push(byte);
        assert!(head.len() < 16 * 1024, "response head too long");
    }
    let text = String::from_utf8(head).expect("utf-8 head");
    let mut lines = text.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(':').expect("header line");
            (name.trim().to_ascii_lowercase(), value.trim().to_owned())
        })
        .collect();
    (status, headers)
}

fn head_value<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Opens a raw connection to `proxy`, sends a WebSocket upgrade request for
/// `/ws/chat`, and checks the `101` that comes back and what the upstream
/// saw; returns the upgraded stream.
async fn open_tunnel(proxy: SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;

    let mut stream = tokio::net::TcpStream::connect(proxy).await.expect("connect");
    let request = format!(
        "GET /ws/chat?room=1 HTTP/1.1\r\nHost: {proxy}\r\nConnection: keep-alive, Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Key: {WS_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send upgrade request");

    let (status, headers) = read_head(&mut stream).await;
    assert_eq!(status, 101, "{headers:?}");
    assert_eq!(head_value(&headers, "upgrade"), ["websocket"], "{headers:?}");
    assert_eq!(head_value(&headers, "connection"), ["upgrade"], "{headers:?}");
    assert_eq!(head_value(&headers, "sec-websocket-accept"), [WS_ACCEPT]);
    assert_eq!(head_value(&headers, "x-upstream-kept"), ["yes"]);
    // What the upstream received: the upgrade, without the other connection
    // options of the client.
    assert_eq!(head_value(&headers, "x-seen-connection"), ["upgrade"]);
    assert_eq!(head_value(&headers, "x-seen-upgrade"), ["websocket"]);
    stream
}

/// Writes `message` into the tunnel and reads the echo back.
async fn round_trip(stream: &mut tokio::net::TcpStream, message: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    stream.write_all(message).await.expect("write");
    let mut echoed = vec![0u8; message.len()];
    stream.read_exact(&mut echoed).await.expect("echo");
    assert_eq!(echoed, message);
}

/// Streams 256 KiB through the tunnel while reading the echo, then closes
/// the client's side: the upstream's echo ends, which closes the tunnel.
async fn stream_and_close(stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let payload = large_payload()[..256 * 1024].to_vec();
    let (mut read, mut write) = stream.into_split();
    let expected = payload.clone();
    let writer = tokio::spawn(async move {
        write.write_all(&payload).await.expect("write payload");
        write.shutdown().await.expect("shutdown");
    });
    let mut echoed = Vec::new();
    read.read_to_end(&mut echoed).await.expect("read to the end");
    writer.await.expect("writer");
    assert_eq!(echoed.len(), expected.len());
    assert!(echoed == expected, "payload altered in the tunnel");
}

#[tokio::test]
async fn websocket_upgrade_is_tunnelled_both_ways() {
    bounded(async {
        let (up, up_task) = ws_upstream().await;
        let (proxy, stop, proxy_task) = upgrading_proxy(up).await;

        let mut stream = open_tunnel(proxy).await;
        // Raw bytes go through the tunnel and come back, several times.
        for message in [&b"hello through the tunnel"[..], b"\x00\x01\x02\xff binary", b"x"] {
            round_trip(&mut stream, message).await;
        }
        // Plain requests still go through while the tunnel is open (the
        // upgraded upstream connection is not handed back to the pool).
        for _ in 0..3 {
            let response = get(format!("http://{proxy}/plain")).await;
            assert_eq!(response.status(), StatusCode::UPGRADE_REQUIRED);
            assert_eq!(response.headers()["x-seen-upgrade"], "");
        }
        round_trip(&mut stream, b"still open").await;
        stream_and_close(stream).await;

        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(6), proxy_task)
            .await
            .expect("proxy stops")
            .expect("proxy task");
        up_task.abort();
    })
    .await;
}

#[tokio::test]
async fn websocket_tunnels_through_the_whole_gateway_without_holding_a_slot() {
    bounded(async {
        let (up, up_task) = ws_upstream().await;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let addr = listener.local_addr().expect("addr");
        let admin_addr = admin.local_addr().expect("admin addr");
        // One request at a time on the service: an open tunnel must not hold
        // that slot.
        let config = serde_json::json!({ "gateway": {
            "listen": addr.to_string(),
            "upstreams": { "ws": { "url": format!("http://{up}"), "pathPrefix": "/" } },
            "admin": { "listen": admin_addr.to_string() },
            "pressure": { "perService": { "ws": { "maxConcurrentRequests": 1 } } },
        }});
        let config = pressure_gateway::config::parse_in(&config.to_string(), std::path::Path::new("."))
            .expect("config");
        let gateway = pressure_gateway::Gateway::build(config, std::path::Path::new("."))
            .await
            .expect("gateway");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(gateway.serve(listener, admin, async {
            let _ = stopped.await;
        }));

        let mut stream = open_tunnel(addr).await;
        round_trip(&mut stream, b"through the layers").await;
        for _ in 0..3 {
            let response = get(format!("http://{addr}/plain")).await;
            assert_eq!(response.status(), StatusCode::UPGRADE_REQUIRED);
        }
        round_trip(&mut stream, b"still open").await;
        let metrics = body_bytes(get(format!("http://{admin_addr}/metrics")).await).await;
        let metrics = String::from_utf8_lossy(&metrics);
        assert!(
            metrics.contains("pressure_gateway_bypassed_total{kind=\"websocket\"} 1\n"),
            "{metrics}"
        );
        // The upgrade request was counted like any other (so upgrade floods
        // are limited), then gave its slot back at the 101.
        assert!(
            metrics.contains("pressure_gateway_allowed_total{layer=\"pre_auth\"} 4\n"),
            "{metrics}"
        );
        stream_and_close(stream).await;

        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("gateway stops")
            .expect("gateway task");
        up_task.abort();
    })
    .await;
}

#[tokio::test]
async fn refused_or_foreign_upgrades_are_plain_requests() {
    use tokio::io::AsyncWriteExt;

    bounded(async {
        let (up, up_task) = ws_upstream().await;
        let (proxy, stop, proxy_task) = upgrading_proxy(up).await;

        // `Upgrade: h2c` is not tunnelled: it is dropped as hop-by-hop, and
        // the upstream's refusal comes back as an ordinary response.
        let mut stream = tokio::net::TcpStream::connect(proxy).await.expect("connect");
        let request = format!(
            "GET /x HTTP/1.1\r\nHost: {proxy}\r\nConnection: Upgrade, HTTP2-Settings\r\n\
             Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nContent-Length: 0\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("send");
        let (status, headers) = read_head(&mut stream).await;
        assert_eq!(status, 426, "{headers:?}");
        assert_eq!(head_value(&headers, "x-seen-connection"), [""]);
        assert_eq!(head_value(&headers, "x-seen-upgrade"), [""]);
        assert!(head_value(&headers, "upgrade").is_empty(), "{headers:?}");

        // `Upgrade: websocket` without `Connection: upgrade` is not an
        // upgrade request either.
        let response = get_with(format!("http://{proxy}/y"), &[(header::UPGRADE, "websocket")]).await;
        assert_eq!(response.status(), StatusCode::UPGRADE_REQUIRED);
        assert_eq!(response.headers()["x-seen-upgrade"], "");

        // Called without hyper's upgrade handle (no connection to upgrade),
        // a WebSocket request is forwarded as a plain one.
        {
            use tower::ServiceExt;
            let service = ProxyService::from_config(
                &upstreams(&[("ws", format!("http://{up}"), "/")]),
                &timeouts(5_000),
            )
            .expect("proxy");
            let req = Request::get("/z")
                .header(header::CONNECTION, "upgrade")
                .header(header::UPGRADE, "websocket")
                .header("sec-websocket-key", WS_KEY)
                .body(Body::empty())
                .expect("request");
            let response = service.oneshot(req).await.expect("infallible");
            assert_eq!(response.status(), StatusCode::UPGRADE_REQUIRED);
            assert_eq!(response.headers()["x-seen-upgrade"], "");
        }

        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(6), proxy_task)
            .await
            .expect("proxy stops")
            .expect("proxy task");
        up_task.abort();
    })
    .await;
}

async fn get_with(url: String, headers: &[(header::HeaderName, &str)]) -> Response<Body> {
    let mut req = Request::get(url);
    for (name, value) in headers {
        req = req.header(name, *value);
    }
    send(req.body(Body::empty()).expect("request")).await
}
