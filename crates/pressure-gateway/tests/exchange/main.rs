//! The gateway's own HTTP/1.1 exchange with `http://` upstreams, over real
//! sockets, against an upstream that writes its answers byte by byte as
//! scripted: every framing reaches the client whole (length, chunked with
//! extensions and trailers, to the close, after a `100 Continue`, the
//! answer to `HEAD`); a connection is kept exactly when it may be (counted
//! by the upstream's accepts); a kept connection that closes unanswered is
//! retried for an idempotent request only; unframeable answers are `502
//! bad_response`; request bodies arrive with their length, large or not.

use super::support;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use support::{bounded, get_request, Reply, TestGateway};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the scripted upstream does with a request.
enum Then {
    /// Writes the bytes and reads the connection's next request.
    Answer(Vec<u8>),
    /// Writes the bytes and closes the connection.
    AnswerAndClose(Vec<u8>),
    /// Closes the connection without a byte.
    Close,
}

/// A request as the upstream received it.
#[derive(Debug, Clone)]
struct Received {
    head: String,
    body: Vec<u8>,
    /// Which request of its connection it was (0 for the first).
    nth_on_conn: usize,
}

/// An upstream on `127.0.0.1:0` whose answers `script` decides from each
/// request (and its place on its connection); it counts the connections
/// it accepted and keeps what it received.
struct Scripted {
    addr: std::net::SocketAddr,
    accepts: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
    task: JoinHandle<()>,
}

impl Scripted {
    async fn start(script: fn(&Received) -> Then) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepts = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (counted, kept) = (Arc::clone(&accepts), Arc::clone(&received));
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(conn, script, Arc::clone(&kept)));
            }
        });
        Self {
            addr,
            accepts,
            received,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().expect("lock").clone()
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one connection's requests as `script` says.
async fn serve(mut conn: TcpStream, script: fn(&Received) -> Then, kept: Arc<Mutex<Vec<Received>>>) {
    let mut buf = Vec::new();
    for nth_on_conn in 0.. {
        let Some(request) = read_request(&mut conn, &mut buf, nth_on_conn).await else {
            return;
        };
        let then = script(&request);
        kept.lock().expect("lock").push(request);
        match then {
            Then::Answer(bytes) => {
                if conn.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Then::AnswerAndClose(bytes) => {
                let _ = conn.write_all(&bytes).await;
                return;
            }
            Then::Close => return,
        }
    }
}

/// The next request on the connection (head, and a body of its
/// `content-length`), or `None` at its end.
async fn read_request(conn: &mut TcpStream, buf: &mut Vec<u8>, nth_on_conn: usize) -> Option<Received> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.parse().expect("a length"));
            while buf.len() < end + 4 + length {
                let mut more = [0u8; 65536];
                let n = conn.read(&mut more).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&more[..n]);
            }
            let body = buf[end + 4..end + 4 + length].to_vec();
            buf.drain(..end + 4 + length);
            return Some(Received {
                head,
                body,
                nth_on_conn,
            });
        }
        let mut more = [0u8; 65536];
        let n = conn.read(&mut more).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&more[..n]);
    }
}

/// The request line's path.
fn path(request: &Received) -> &str {
    request.head.split(' ').nth(1).unwrap_or_default()
}

/// `(status, body)` of `GET path`.
async fn get(gw: &TestGateway, path: &str) -> (StatusCode, Bytes) {
    let reply = gw.get(path).await;
    (reply.status, reply.body)
}

fn gateway_for(up: &Scripted) -> serde_json::Value {
    json!({ "upstreams": { "up": { "url": up.url(), "pathPrefix": "/" } } })
}

/// The same, large, pattern on both sides of a body test.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn framings(request: &Received) -> Then {
    let answer = |bytes: &[u8]| Then::Answer(bytes.to_vec());
    match path(request) {
        "/length" => answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
        "/chunked" => answer(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
        ),
        "/continue" => answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        "/head" => answer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"),
        "/large" => {
            let body = pattern(1 << 20);
            let mut bytes = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
            bytes.extend_from_slice(&body);
            Then::Answer(bytes)
        }
        "/until-close" => Then::AnswerAndClose(b"HTTP/1.1 200 OK\r\n\r\nuntil the close".to_vec()),
        "/close-asked" => answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"),
        "/extra" => answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"),
        "/two-lengths" => answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"),
        "/bad-chunk" => answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
        "/huge-head" => Then::Answer(
            format!("HTTP/1.1 200 OK\r\nx-big: {}\r\nContent-Length: 0\r\n\r\n", "a".repeat(70_000)).into_bytes(),
        ),
        _ => answer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
    }
}

/// Every framing reaches the client whole, and the connection is kept
/// through all of them: one accept for the whole run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_framing_reaches_the_client_whole_on_one_kept_connection() {
    bounded(async {
        let up = Scripted::start(framings).await;
        let gw = TestGateway::start(gateway_for(&up)).await;
        for _ in 0..3 {
            assert_eq!(get(&gw, "/length").await, (StatusCode::OK, Bytes::from("hello")));
            assert_eq!(
                get(&gw, "/chunked").await,
                (StatusCode::OK, Bytes::from("hello world"))
            );
            assert_eq!(get(&gw, "/continue").await, (StatusCode::OK, Bytes::from("ok")));
            let head = Request::builder()
                .method(Method::HEAD)
                .uri(gw.url("/head"))
                .body(Full::new(Bytes::new()))
                .expect("request");
            let reply = Reply::read(gw.send(head).await).await;
            assert_eq!(reply.status, StatusCode::OK);
            assert_eq!(reply.header("content-length"), Some("9"));
            assert!(reply.body.is_empty());
            let (status, body) = get(&gw, "/large").await;
            assert_eq!(status, StatusCode::OK);
            assert!(body == pattern(1 << 20), "1 MiB arrived intact");
        }
        assert_eq!(up.accepts(), 1, "one kept connection served every answer");
        gw.stop().await;
    })
    .await;
}

/// A connection is not kept when its answer ends at the close, asks for
/// the close, or carries more than its length: the next request opens a
/// new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_not_kept_when_it_may_not_be() {
    bounded(async {
        let up = Scripted::start(framings).await;
        let gw = TestGateway::start(gateway_for(&up)).await;
        assert_eq!(
            get(&gw, "/until-close").await,
            (StatusCode::OK, Bytes::from("until the close"))
        );
        assert_eq!(get(&gw, "/length").await.0, StatusCode::OK);
        assert_eq!(
            up.accepts(),
            2,
            "the close-delimited answer's connection was not reused"
        );
        assert_eq!(
            get(&gw, "/close-asked").await,
            (StatusCode::OK, Bytes::from("ok"))
        );
        assert_eq!(get(&gw, "/length").await.0, StatusCode::OK);
        assert_eq!(up.accepts(), 3, "Connection: close was honoured");
        assert_eq!(get(&gw, "/extra").await, (StatusCode::OK, Bytes::from("ok")));
        assert_eq!(get(&gw, "/length").await, (StatusCode::OK, Bytes::from("hello")));
        assert_eq!(up.accepts(), 4, "bytes beyond the length closed the connection");
        gw.stop().await;
    })
    .await;
}

/// Answers that cannot be framed, or whose head is over 64 KiB, are `502
/// bad_response` (before the head) or a cut body (after it), and their
/// connections are not reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unframeable_answers_are_refused_and_their_connections_closed() {
    bounded(async {
        let up = Scripted::start(framings).await;
        let gw = TestGateway::start(gateway_for(&up)).await;
        for path in ["/two-lengths", "/huge-head"] {
            let reply = gw.get(path).await;
            assert_eq!(reply.status, StatusCode::BAD_GATEWAY, "{path}");
            assert_eq!(reply.json()["error"]["type"], "upstream_error", "{path}");
        }
        // The invalid chunk comes with the head: the gateway may find it
        // before it wrote the head (the connection to the client is cut
        // then) or after (the body is cut).
        match gw.client().request(get_request(&gw.url("/bad-chunk"))).await {
            Ok(cut) => assert!(
                http_body_util::BodyExt::collect(cut.into_body()).await.is_err(),
                "an invalid chunk cuts the body"
            ),
            Err(error) => assert!(format!("{error:?}").contains("IncompleteMessage"), "{error:?}"),
        }
        assert_eq!(get(&gw, "/length").await, (StatusCode::OK, Bytes::from("hello")));
        assert_eq!(up.accepts(), 4, "no such connection was reused");
        let metrics = gw.admin_get("/metrics").await;
        let metrics = String::from_utf8_lossy(&metrics.body);
        assert!(
            metrics.contains(
                "pressure_gateway_upstream_failures_total{upstream=\"up\",kind=\"bad_response\"} 2"
            ),
            "{metrics}"
        );
        gw.stop().await;
    })
    .await;
}

/// The second request on each connection is met with a close, no byte
/// answered: the kept connection went stale just as it was reused.
fn stale_on_reuse(request: &Received) -> Then {
    if request.nth_on_conn > 0 {
        return Then::Close;
    }
    Then::Answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec())
}

/// A kept connection that closes before a byte of its answer: an
/// idempotent request is sent again on a new connection (and answered);
/// a `POST` is not (it may have been acted on) and is `502 reset`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_idempotent_requests_are_sent_again_when_a_kept_connection_closes() {
    bounded(async {
        let up = Scripted::start(stale_on_reuse).await;
        let gw = TestGateway::start(gateway_for(&up)).await;
        assert_eq!(get(&gw, "/a").await, (StatusCode::OK, Bytes::from("ok")));
        assert_eq!(
            get(&gw, "/b").await,
            (StatusCode::OK, Bytes::from("ok")),
            "sent again"
        );
        assert_eq!(up.accepts(), 2);
        let post = Request::builder()
            .method(Method::POST)
            .uri(gw.url("/c"))
            .body(Full::new(Bytes::from("payload")))
            .expect("request");
        let reply = Reply::read(gw.send(post).await).await;
        assert_eq!(reply.status, StatusCode::BAD_GATEWAY, "{:?}", reply.body);
        assert_eq!(up.accepts(), 2, "the POST was not sent again");
        let posts: Vec<_> = up
            .received()
            .into_iter()
            .filter(|r| r.head.starts_with("POST"))
            .collect();
        assert_eq!(posts.len(), 1, "{posts:?}");
        let metrics = gw.admin_get("/metrics").await;
        let metrics = String::from_utf8_lossy(&metrics.body);
        assert!(
            metrics.contains("pressure_gateway_upstream_failures_total{upstream=\"up\",kind=\"reset\"} 1"),
            "{metrics}"
        );
        gw.stop().await;
    })
    .await;
}

fn closes_when_idle(_: &Received) -> Then {
    Then::AnswerAndClose(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec())
}

/// An upstream that closes a kept connection while it idles (after an
/// answer that did not say so): the next request finds it closed at
/// checkout and goes on a new one, for any method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_while_idle_is_not_used() {
    bounded(async {
        let up = Scripted::start(closes_when_idle).await;
        let gw = TestGateway::start(gateway_for(&up)).await;
        for n in 1..=3 {
            assert_eq!(get(&gw, "/a").await, (StatusCode::OK, Bytes::from("ok")));
            // The close reaches the gateway's side.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let post = Request::builder()
                .method(Method::POST)
                .uri(gw.url("/p"))
                .body(Full::new(Bytes::from("x")))
                .expect("request");
            assert_eq!(gw.send(post).await.status(), StatusCode::OK);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            assert_eq!(up.accepts(), 2 * n);
        }
        gw.stop().await;
    })
    .await;
}

fn echo_length(request: &Received) -> Then {
    let body = format!(
        "{} {}",
        request.body.len(),
        request.body == pattern(request.body.len())
    );
    Then::Answer(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes())
}

/// Request bodies arrive whole with their length, written with the head
/// or after it; a bodiless `POST` says `content-length: 0`, a `GET` says
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_arrive_whole_with_their_length() {
    bounded(async {
        let up = Scripted::start(echo_length).await;
        let gw = TestGateway::start(json!({
            "upstreams": { "up": { "url": up.url(), "pathPrefix": "/" } },
            "limits": { "maxBodyBytes": 4_000_000 },
        }))
        .await;
        for len in [0usize, 1, 16 * 1024, 16 * 1024 + 1, 3_000_000] {
            let post = Request::builder()
                .method(Method::POST)
                .uri(gw.url("/body"))
                .body(Full::new(Bytes::from(pattern(len))))
                .expect("request");
            let reply = Reply::read(gw.send(post).await).await;
            assert_eq!(reply.status, StatusCode::OK);
            assert_eq!(reply.body, Bytes::from(format!("{len} true")));
        }
        assert_eq!(get(&gw, "/nothing").await.0, StatusCode::OK);
        let received = up.received();
        let lengths: Vec<_> = received
            .iter()
            .map(|r| {
                r.head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .map(str::to_owned)
            })
            .collect();
        let want: Vec<Option<String>> = ["0", "1", "16384", "16385", "3000000"]
            .iter()
            .map(|l| Some((*l).to_owned()))
            .chain([None])
            .collect();
        assert_eq!(lengths, want);
        assert!(received
            .iter()
            .all(|r| r.head.lines().any(|l| l == format!("host: {}", up.addr))));
        assert_eq!(up.accepts(), 1);
        gw.stop().await;
    })
    .await;
}

/// A `CONNECT` to the gateway is refused (`400`) before any upstream is
/// contacted: the exchange, which writes origin-form targets, never sees
/// one (and would hand it to hyper's connection if it did).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_is_refused_before_the_upstream() {
    bounded(async {
        let up = Scripted::start(framings).await;
        let gw = TestGateway::start(gateway_for(&up)).await;
        let mut client = TcpStream::connect(gw.addr).await.expect("connect to the gateway");
        let request = format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n", up.addr);
        client.write_all(request.as_bytes()).await.expect("write");
        let mut answer = vec![0u8; 1024];
        let n = client.read(&mut answer).await.expect("read");
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
        assert_eq!(get(&gw, "/length").await.0, StatusCode::OK);
        let lines: Vec<String> = up
            .received()
            .iter()
            .filter_map(|r| r.head.lines().next().map(str::to_owned))
            .collect();
        assert_eq!(
            lines,
            ["GET /length HTTP/1.1"],
            "only the GET reached the upstream"
        );
        gw.stop().await;
    })
    .await;
}
