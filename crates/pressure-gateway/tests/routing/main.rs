//! One route per request, decided on the normalised path, and refusals of
//! hostile input, over real sockets: a service limit never charges another
//! upstream's traffic; every spelling of a path hits the same limit and is
//! forwarded normalised; smuggled second headers, missing `Host`, malformed
//! and stalled bodies get their 4xx (never a 5xx blamed on the upstream).

use super::support;

use http::StatusCode;
use serde_json::json;
use std::time::Duration;
use support::{bounded, raw_status, statuses, TestGateway, TestUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The regression of the probe that found the gateway charging `/api`
/// traffic to the `/` upstream's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_limit_never_charges_another_upstream() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(json!({
            "upstreams": {
                "api": { "url": up.url(), "pathPrefix": "/api" },
                "web": { "url": up.url(), "pathPrefix": "/" },
            },
            "pressure": { "perService": { "web": { "requestsPerMinute": 2 } } },
        }))
        .await;
        let api = gw.burst(6, "/api/orders", &[]).await;
        assert_eq!(statuses(&api), [200; 6], "/api has no limit of its own");
        let web = gw.stats("gateway:service:web").await;
        assert_eq!(
            (web.allowed, web.denied),
            (0, 0),
            "/api traffic never touches web's limit"
        );
        let home = gw.burst(3, "/index.html", &[]).await;
        let mut codes = statuses(&home);
        codes.sort_unstable();
        assert_eq!(codes, [200, 200, 429]);
        let web = gw.stats("gateway:service:web").await;
        assert_eq!((web.allowed, web.denied), (2, 1));
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_path_hits_the_same_limit() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
            "pressure": { "perRoute": [{
                "resource": "gateway:route:github", "pathPrefix": "/webhooks/github",
                "limits": { "requestsPerMinute": 3 } }] },
        }))
        .await;
        for _ in 0..3 {
            assert_eq!(gw.get("/webhooks/github").await.status, StatusCode::OK);
        }
        for spelling in [
            "/webhooks/github",
            "/webhooks//github",
            "/webhooks/./github",
            "/webhooks/x/../github",
            "/webhooks/%67ithub",
            "//webhooks/github/",
        ] {
            let r = gw.get(spelling).await;
            assert_eq!(
                r.status,
                StatusCode::TOO_MANY_REQUESTS,
                "{spelling}: {:?}",
                r.body
            );
            assert_eq!(
                r.json()["error"]["resource"],
                "gateway:route:github",
                "{spelling}"
            );
        }
        let s = gw.stats("gateway:route:github").await;
        assert_eq!((s.allowed, s.denied), (3, 6));
        // An encoded separator would let the upstream decode a path the
        // limits never saw.
        for smuggled in ["/webhooks%2Fgithub", "/webhooks/%2e%2e/github", "/a%zz"] {
            let r = gw.get(smuggled).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{smuggled}: {:?}", r.body);
            assert_eq!(r.json()["error"]["type"], "bad_request");
        }
        // The upstream receives the normalised path, query kept.
        let r = gw.get("/api/../internal/./x?q=%2F").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.json()["path"], "/internal/x");
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggled_heads_are_400() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        }))
        .await;
        let cases: [(&str, &[u8], u16); 4] = [
            ("plain", b"GET /x HTTP/1.1\r\nHost: gw\r\n\r\n", 200),
            (
                "two Authorization headers",
                b"GET /x HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",
                400,
            ),
            (
                "two Host headers",
                b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                400,
            ),
            ("no Host on HTTP/1.1", b"GET /x HTTP/1.1\r\n\r\n", 400),
        ];
        for (case, request, want) in cases {
            assert_eq!(raw_status(gw.addr, request).await, want, "{case}");
        }
        let old = exchange(gw.addr, "GET /x HTTP/1.0\r\n\r\n", b"", true).await;
        assert!(old.starts_with("HTTP/1.0 200"), "HTTP/1.0 needs no Host: {old}");
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// Path spellings that other servers read as a way up or as a separator:
/// Tomcat and Spring read `..;` (a dot-segment with parameters) as `..`,
/// IIS and some frameworks read `\` as `/`. Forwarded verbatim, they would
/// reach a path the limits never saw; they are refused like an escaped `/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_with_parameters_and_backslashes_are_400() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        }))
        .await;
        for target in [
            "/api/..;/internal",
            "/api/..;jsessionid=1/internal",
            "/api/.;/internal",
            "/api/..\\internal",
            "/api\\..\\internal",
            "/api/%5Cinternal",
            "/api/%5c..%5cinternal",
        ] {
            let request = format!("GET {target} HTTP/1.1\r\nHost: gw\r\n\r\n");
            assert_eq!(raw_status(gw.addr, request.as_bytes()).await, 400, "{target}");
        }
        // A `;` elsewhere in a segment is an ordinary character.
        let plain = b"GET /api/a;b/..x;y HTTP/1.1\r\nHost: gw\r\n\r\n";
        assert_eq!(raw_status(gw.addr, plain).await, 200);
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// A client that sends its body more slowly than the upstream may take to
/// answer is the client's fault (`408`), not the upstream's (`504`), and no
/// upstream connection is held for it: the body is read before the
/// upstream is contacted (as nginx buffers it, and as Envoy starts the
/// route timeout when the request is complete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_the_upstream_timeout_is_408_and_never_reaches_the_upstream() {
    bounded(async {
        // An upstream that counts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let upstream = listener.local_addr().expect("addr");
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&accepted);
        let accept = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let _held = socket;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                });
            }
        });
        let gw = TestGateway::start(json!({
            "upstreams": { "slow": { "url": format!("http://{upstream}"), "pathPrefix": "/" } },
            "timeouts": { "connectMs": 300, "totalMs": 400, "bodyReadMs": 5000 },
        }))
        .await;
        let stream = tokio::net::TcpStream::connect(gw.addr).await.expect("connect");
        let (mut rx, mut tx) = stream.into_split();
        let body = b"0123456789";
        let head = format!(
            "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        tx.write_all(head.as_bytes()).await.expect("head");
        // One byte every 150 ms: never idle for bodyReadMs, but the whole
        // body takes far longer than totalMs.
        let dribble = tokio::spawn(async move {
            for byte in body {
                tokio::time::sleep(Duration::from_millis(150)).await;
                if tx.write_all(&[*byte]).await.is_err() {
                    break;
                }
            }
            tx
        });
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), rx.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .unwrap_or(0);
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 408"), "slow body: {answer}");
        assert!(answer.contains("request_timeout"), "{answer}");
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "the upstream was contacted for a body that never completed in time"
        );
        let _ = dribble.await;
        // A body that arrives in time is forwarded as before.
        let whole = exchange(
            gw.addr,
            "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n",
            b"ok",
            true,
        )
        .await;
        assert!(
            whole.starts_with("HTTP/1.1 504"),
            "complete body, silent upstream: {whole}"
        );
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        gw.stop().await;
        accept.abort();
    })
    .await;
}

/// Sends `head` then `body` on a fresh connection and returns the response
/// head's status line.
async fn exchange(addr: std::net::SocketAddr, head: &str, body: &[u8], then_wait: bool) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(head.as_bytes()).await.expect("head");
    s.write_all(body).await.expect("body");
    if !then_wait {
        let _ = s.shutdown().await;
    }
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("an answer within 10 s")
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_body_faults_are_4xx_and_not_upstream_errors() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
            "timeouts": { "bodyReadMs": 300 },
        }))
        .await;
        let head = "POST /collect HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n";
        let malformed = exchange(gw.addr, head, b"5\r\nhello\r\nzz\r\n", true).await;
        assert!(
            malformed.starts_with("HTTP/1.1 400"),
            "malformed chunked body: {malformed}"
        );
        let stalled = exchange(gw.addr, head, b"5\r\nhello\r\n", true).await;
        assert!(stalled.starts_with("HTTP/1.1 408"), "stalled body: {stalled}");
        let metrics = String::from_utf8_lossy(&gw.admin_get("/metrics").await.body).into_owned();
        assert!(
            !metrics.contains("pressure_gateway_upstream_errors_total"),
            "{metrics}"
        );
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// HTTP/2 (h2c, prior knowledge) honours `limits.maxHeaderBytes` like
/// HTTP/1 does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_honours_max_header_bytes() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
            "limits": { "maxHeaderBytes": 8192 },
        }))
        .await;
        let client: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http();
        let small = http::Request::get(gw.url("/h2"))
            .body(http_body_util::Empty::new())
            .expect("request");
        let ok = client.request(small).await.expect("h2 answers");
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.version(), http::Version::HTTP_2);
        let big = http::Request::get(gw.url("/h2"))
            .header("x-big", "a".repeat(12 * 1024))
            .body(http_body_util::Empty::new())
            .expect("request");
        // Either the stream is refused or the answer is not a 200.
        if let Ok(r) = client.request(big).await {
            assert_ne!(
                r.status(),
                StatusCode::OK,
                "a 12 KiB header passed an 8 KiB bound (the h2 default is 16 KiB)"
            );
        }
        gw.stop().await;
        up.stop().await;
    })
    .await;
}
