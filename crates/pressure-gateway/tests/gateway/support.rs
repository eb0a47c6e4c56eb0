//! The harness of the gateway tests: a whole [`Gateway`] served on
//! `127.0.0.1:0` (proxy and admin listeners) in front of a test upstream,
//! a hyper client, raw-TCP exchanges for hostile input, HS256 tokens, a
//! tracing capture, and stats polling. Every server is stopped by the test
//! (or aborted when dropped by a failing one).

use axum::body::Body;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use futures::future::join_all;
use http::{header, HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use pressure_core::ResourceStats;
use pressure_gateway::{Gateway, Serving};
use serde_json::{json, Value};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Upper bound on any one test.
pub(crate) const TEST_BOUND: Duration = Duration::from_secs(30);

/// Runs `test`, failing it when it outlives [`TEST_BOUND`].
pub(crate) async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(TEST_BOUND, test)
        .await
        .expect("test exceeded its time bound");
}

// ---------------------------------------------------------------- upstream

/// A server on `127.0.0.1:0`, stopped by [`TestUpstream::stop`].
pub(crate) struct TestUpstream {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestUpstream {
    /// Serves `router`.
    pub(crate) async fn start(router: Router) -> Self {
        quiet_global_subscriber();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Self {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The demo upstream plus the test routes of [`test_routes`].
    pub(crate) async fn demo() -> Self {
        Self::start(test_routes()).await
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Graceful shutdown, aborted after a second (the gateway's pooled
    /// connections may hold it open).
    pub(crate) async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(Duration::from_secs(1), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

impl Drop for TestUpstream {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// [`pressure_mock::demo_upstream::router`] (JSON echo, `/slow`,
/// `/events`) plus routes that end only when the client goes away:
///
/// * `/forever`: an octet stream, one chunk every 50 ms, without end;
/// * `/events/forever`: a `text/event-stream`, one event every 50 ms,
///   without end;
/// * `/delay-head`: the response head comes after 20 s;
/// * `/late`: the response head comes after 1 s;
/// * `/big`: a 32 MiB body, as fast as the client reads it;
/// * `/collect`: reads the whole request body, then answers its length;
/// * `/ws/echo`: accepts an `Upgrade: websocket` with `101` and echoes raw
///   bytes over the upgraded connection (no WebSocket framing: the gateway
///   splices bytes and never looks inside).
pub(crate) fn test_routes() -> Router {
    Router::new()
        .route("/ws/echo", get(ws_echo))
        .route("/big", get(|| async { vec![b'x'; 32 << 20] }))
        .route(
            "/late",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                "late"
            }),
        )
        .route(
            "/collect",
            axum::routing::post(|body: Bytes| async move { format!("{} bytes", body.len()) }),
        )
        .route("/forever", get(|| async { endless("application/octet-stream") }))
        .route("/events/forever", get(|| async { endless("text/event-stream") }))
        .route(
            "/delay-head",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(20)).await;
                "late"
            }),
        )
        .fallback_service(pressure_mock::demo_upstream::router())
}

async fn ws_echo(mut req: axum::extract::Request) -> Response {
    let wants = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if !wants {
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body(Body::from("upgrade required"))
            .expect("400");
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            let (mut read, mut write) = tokio::io::split(TokioIo::new(upgraded));
            let _ = tokio::io::copy(&mut read, &mut write).await;
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "upgrade")
        .body(Body::empty())
        .expect("101")
}

fn endless(content_type: &'static str) -> Response {
    let chunks = futures::stream::unfold(0u64, |i| async move {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some((
            Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {i}\n\n"))),
            i + 1,
        ))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from_stream(chunks))
        .expect("endless response")
}

/// A `gateway` config section with one upstream `demo` on `/` and the given
/// `pressure` section (`listen` and `admin.listen` are filled in by
/// [`TestGateway::start`]).
pub(crate) fn demo_config(upstream: &TestUpstream, pressure: Value) -> Value {
    json!({
        "upstreams": { "demo": { "url": upstream.url(), "pathPrefix": "/" } },
        "pressure": pressure,
    })
}

// ---------------------------------------------------------------- gateway

/// The test client: plain HTTP/1.1, pooled.
pub(crate) type TestClient = Client<HttpConnector, Full<Bytes>>;

/// A gateway serving on `127.0.0.1:0`, stopped by [`TestGateway::stop`].
pub(crate) struct TestGateway {
    /// The proxy listener.
    pub(crate) addr: SocketAddr,
    /// The admin listener.
    pub(crate) admin: SocketAddr,
    gateway: Gateway,
    client: TestClient,
    serving: Option<Serving>,
}

impl TestGateway {
    /// Binds both listeners, writes their addresses into `section` (the
    /// `gateway` key of the config), parses and builds the gateway, and
    /// serves it.
    pub(crate) async fn start(section: Value) -> Self {
        Self::start_with(section, None).await
    }

    /// As [`start`](Self::start), but the config (listeners filled in) is
    /// written to `file` and the gateway started from it, so that
    /// `Gateway::reload` — what `SIGHUP`, `--watch` and the admin reload
    /// run — re-reads it.
    #[allow(dead_code)]
    pub(crate) async fn start_from_file(section: Value, file: &Path) -> Self {
        Self::start_with(section, Some(file)).await
    }

    async fn start_with(mut section: Value, file: Option<&Path>) -> Self {
        quiet_global_subscriber();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let addr = listener.local_addr().expect("proxy addr");
        let admin = admin_listener.local_addr().expect("admin addr");
        section["listen"] = json!(addr.to_string());
        section["admin"]["listen"] = json!(admin.to_string());
        let text = json!({ "gateway": section }).to_string();
        let config = pressure_gateway::config::parse_in(&text, Path::new("."))
            .unwrap_or_else(|e| panic!("invalid test config: {e}\n{text}"));
        let mut gateway = Gateway::build(config, Path::new("."))
            .await
            .expect("gateway builds");
        if let Some(file) = file {
            std::fs::write(file, &text).expect("write the config file");
            gateway = gateway.with_source(file);
        }
        let serving = gateway.clone().spawn(listener, admin_listener);
        Self {
            addr,
            admin,
            gateway,
            client: Client::builder(TokioExecutor::new()).build_http(),
            serving: Some(serving),
        }
    }

    /// The gateway being served (for the decision listener's tests).
    #[allow(dead_code)]
    pub(crate) fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// The URL of `path` on the proxy listener.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A client of its own (a fresh pool).
    pub(crate) fn client(&self) -> TestClient {
        self.client.clone()
    }

    /// `GET path` on the proxy listener; the response with its body unread.
    pub(crate) async fn open(&self, path: &str) -> http::Response<Incoming> {
        self.send(get_request(&self.url(path))).await
    }

    /// Sends `req` and returns the response with its body unread.
    pub(crate) async fn send(&self, req: Request<Full<Bytes>>) -> http::Response<Incoming> {
        self.client.request(req).await.expect("gateway answers")
    }

    /// `GET path` on the proxy listener, body read.
    pub(crate) async fn get(&self, path: &str) -> Reply {
        Reply::read(self.open(path).await).await
    }

    /// `GET path` on the admin listener, body read.
    pub(crate) async fn admin_get(&self, path: &str) -> Reply {
        let resp = self
            .client
            .request(get_request(&format!("http://{}{path}", self.admin)))
            .await
            .expect("admin answers");
        Reply::read(resp).await
    }

    /// `n` concurrent `GET path`s (each with `headers`), bodies read.
    pub(crate) async fn burst(&self, n: usize, path: &str, headers: &[(&str, &str)]) -> Vec<Reply> {
        join_all((0..n).map(|_| async {
            let mut req = get_request(&self.url(path));
            for (name, value) in headers {
                req.headers_mut().insert(
                    http::HeaderName::from_bytes(name.as_bytes()).expect("header name"),
                    http::HeaderValue::from_str(value).expect("header value"),
                );
            }
            Reply::read(self.send(req).await).await
        }))
        .await
    }

    /// The broker's snapshot of `resource`.
    pub(crate) async fn stats(&self, resource: &str) -> ResourceStats {
        self.gateway
            .broker()
            .resource_stats(resource)
            .await
            .unwrap_or_else(|e| panic!("stats of {resource}: {e}"))
    }

    /// Every resource id the broker knows.
    pub(crate) async fn resource_ids(&self) -> Vec<String> {
        self.gateway
            .broker()
            .stats()
            .await
            .into_iter()
            .map(|s| s.resource)
            .collect()
    }

    /// Polls `resource` until it holds no permit — `active` is 0 and so is
    /// its `maxConcurrentRequests` usage (the lease count; a snapshot taken
    /// while a permit drops may see one updated before the other) — for at
    /// most `within`, and returns that snapshot; fails with the last one
    /// otherwise.
    pub(crate) async fn await_idle(&self, resource: &str, within: Duration) -> ResourceStats {
        let deadline = Instant::now() + within;
        loop {
            let s = self.stats(resource).await;
            if s.active == Some(0) && s.usage.get("maxConcurrentRequests") == Some(&0) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{resource} still holds permits after {within:?}: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops serving and waits for the server task (bounded).
    pub(crate) async fn stop(mut self) {
        if let Some(serving) = self.serving.take() {
            assert!(
                serving.stop(Duration::from_secs(10)).await,
                "the gateway did not shut down within 10 s"
            );
        }
    }
}

/// A `GET url` request with an empty body.
pub(crate) fn get_request(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).expect("request")
}

/// A WebSocket upgrade request for `url` (the key is the RFC 6455 sample).
pub(crate) fn upgrade_request(url: &str) -> Request<Full<Bytes>> {
    Request::get(url)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "Upgrade")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .body(Full::default())
        .expect("upgrade request")
}

/// Completes the upgrade of a `101` response and checks that bytes go
/// through the tunnel and come back; returns the open tunnel.
pub(crate) async fn echo_through(resp: http::Response<Incoming>, message: &[u8]) -> TokioIo<Upgraded> {
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    let mut tunnel = TokioIo::new(hyper::upgrade::on(resp).await.expect("client side upgraded"));
    tunnel.write_all(message).await.expect("write through the tunnel");
    let mut echoed = vec![0u8; message.len()];
    tunnel.read_exact(&mut echoed).await.expect("read the echo");
    assert_eq!(echoed, message);
    tunnel
}

/// A response read to its end.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    /// Reads `resp`'s body to the end.
    pub(crate) async fn read(resp: http::Response<Incoming>) -> Self {
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("response body").to_bytes();
        Self {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }

    /// A header as text (`None` when absent).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().expect("ASCII header"))
    }
}

/// How many of `replies` have `status`.
pub(crate) fn count(replies: &[Reply], status: StatusCode) -> usize {
    replies.iter().filter(|r| r.status == status).count()
}

/// The statuses of `replies` (for failure messages).
pub(crate) fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status.as_u16()).collect()
}

/// Reads the next data chunk of a streaming response; `None` at its end.
pub(crate) async fn next_chunk(resp: &mut http::Response<Incoming>) -> Option<Bytes> {
    loop {
        let frame = resp.body_mut().frame().await?.expect("body frame");
        if let Ok(data) = frame.into_data() {
            return Some(data);
        }
    }
}

// ---------------------------------------------------------------- raw TCP

/// Writes `request` on a fresh connection to `addr` (write errors are
/// ignored: the server may close early on hostile input) and returns the
/// status code of the response head it answers with.
pub(crate) async fn raw_status(addr: SocketAddr, request: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let _ = stream.write_all(request).await;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer within 5 s")
        {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if head.is_empty() => panic!("no answer: {e}"),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&head);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP/1.1 response head: {text:?}"))
}

/// A port on 127.0.0.1 that nothing listens on (bound, then released).
pub(crate) async fn dead_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr").port()
}

// ---------------------------------------------------------------- JWT

/// The environment variable holding the HS256 secret of these tests (a
/// name no other suite uses).
pub(crate) const JWT_SECRET_ENV: &str = "PRESSURE_GATEWAY_TESTS_GATEWAY_HS256_SECRET";
const JWT_SECRET: &str = "gateway-integration-tests-secret-0123456789";

/// Sets [`JWT_SECRET_ENV`] (once) and returns its name.
pub(crate) fn jwt_secret_env() -> &'static str {
    static SET: Once = Once::new();
    SET.call_once(|| std::env::set_var(JWT_SECRET_ENV, JWT_SECRET));
    JWT_SECRET_ENV
}

/// An `auth` section verifying HS256 tokens signed with the test secret;
/// tokens optional.
pub(crate) fn hs256_auth() -> Value {
    json!({
        "required": false,
        "jwt": { "algorithms": ["HS256"], "secretEnv": jwt_secret_env() },
    })
}

/// An HS256 token naming `tenant` in `namespaceId`, valid for an hour.
pub(crate) fn token(tenant: &str) -> String {
    let claims = json!({
        "namespaceId": tenant,
        "exp": jsonwebtoken::get_current_timestamp() + 3600,
    });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).expect("HMAC key"),
    )
    .expect("sign token")
}

// ---------------------------------------------------------------- tracing

/// A `tracing` writer that keeps everything written in memory.
#[derive(Debug, Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("capture lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs (once) a global subscriber that enables INFO and writes
/// nowhere. Without one, a test on another thread that reaches a log
/// callsite first with no subscriber at all can leave it cached as
/// disabled, and a [`Capture`] on its own thread misses lines (seen: a
/// window's denial lines, whenever another test producing 429s ran beside
/// it). Every test starts an upstream or a gateway, which install it first.
pub(crate) fn quiet_global_subscriber() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let sink = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish();
        // Another global subscriber (a test binary's own) does as well.
        let _ = tracing::subscriber::set_global_default(sink);
    });
}

impl Capture {
    /// Installs a JSON `fmt` subscriber writing here as the default of the
    /// current thread (until the guard is dropped).
    pub(crate) fn install(&self) -> tracing::subscriber::DefaultGuard {
        quiet_global_subscriber();
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// Every line written so far, parsed.
    pub(crate) fn lines(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().expect("capture lock").clone()).expect("UTF-8 log");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("log line is not JSON ({e}): {l}")))
            .collect()
    }
}
