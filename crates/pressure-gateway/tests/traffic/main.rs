//! Traffic observability over real sockets: request counters by route,
//! upstream and status class after known traffic, the latency histogram's
//! count, upstream failures by cause, the in-flight gauge during a slow
//! upstream, the access log's fields, and the optional `RateLimit` headers
//! on successful responses.

use super::support;

use http::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;
use support::{bounded, dead_port, get_request, token, Capture, Reply, TestGateway, TestUpstream};
use tokio::time::Instant;

const ROUTE: &str = "gateway:route:limited";

/// The value of the sample `series` (exact name and labels as written) on
/// `/metrics`, if present.
async fn metric(gw: &TestGateway, series: &str) -> Option<f64> {
    let reply = gw.admin_get("/metrics").await;
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Polls `/metrics` until `series` equals `want` (a response's metrics are
/// settled when its body ends on the server side, which can trail the
/// client's read by a moment); fails after 5 s with the last value.
async fn await_metric(gw: &TestGateway, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = metric(gw, series).await;
        if got == Some(want) {
            return;
        }
        if Instant::now() >= deadline {
            let page = String::from_utf8_lossy(&gw.admin_get("/metrics").await.body).into_owned();
            panic!("{series} is {got:?}, want {want}\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn limited(up: &TestUpstream, extra: Value) -> Value {
    let mut cfg = json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        "pressure": { "perRoute": [{
            "resource": ROUTE, "pathPrefix": "/limited",
            "limits": { "requestsPerMinute": 3 } }] },
    });
    if let (Some(c), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_traffic_gives_exact_counts_and_histogram() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(limited(&up, json!({}))).await;
        let mut codes = Vec::new();
        for _ in 0..5 {
            codes.push(gw.get("/limited/x").await.status.as_u16());
        }
        assert_eq!(codes, [200, 200, 200, 429, 429]);
        // One request without a route resource, one 404-free 400 before routing.
        assert_eq!(gw.get("/other").await.status, StatusCode::OK);
        assert_eq!(gw.get("/a/%2F/b").await.status, StatusCode::BAD_REQUEST);

        let r = |upstream: &str, status: &str| {
            format!("pressure_gateway_requests_total{{route=\"{ROUTE}\",upstream=\"{upstream}\",status=\"{status}\"}}")
        };
        await_metric(&gw, &r("demo", "2xx"), 3.0).await;
        await_metric(&gw, &r("demo", "4xx"), 2.0).await;
        await_metric(
            &gw,
            "pressure_gateway_requests_total{route=\"none\",upstream=\"demo\",status=\"2xx\"}",
            1.0,
        )
        .await;
        await_metric(
            &gw,
            "pressure_gateway_requests_total{route=\"none\",upstream=\"none\",status=\"4xx\"}",
            1.0,
        )
        .await;
        assert_eq!(metric(&gw, &r("demo", "5xx")).await, None);
        let h = "pressure_gateway_request_duration_seconds";
        await_metric(&gw, &format!("{h}_count{{route=\"{ROUTE}\"}}"), 5.0).await;
        await_metric(&gw, &format!("{h}_bucket{{route=\"{ROUTE}\",le=\"+Inf\"}}"), 5.0).await;
        let sum = metric(&gw, &format!("{h}_sum{{route=\"{ROUTE}\"}}")).await;
        assert!(sum.is_some_and(|s| s > 0.0), "{sum:?}");
        await_metric(&gw, "pressure_gateway_in_flight_requests", 0.0).await;
        let page = String::from_utf8_lossy(&gw.admin_get("/metrics").await.body).into_owned();
        assert!(page.contains(&format!("# TYPE {h} histogram\n")), "{page}");
        assert!(
            page.contains("# TYPE pressure_gateway_requests_total counter\n"),
            "{page}"
        );
        assert!(!page.contains("/limited/x"), "raw paths never become labels");
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_counts_as_connect_refused() {
    bounded(async {
        let port = dead_port().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "dead": { "url": format!("http://127.0.0.1:{port}"), "pathPrefix": "/" } },
        }))
        .await;
        assert_eq!(gw.get("/x").await.status, StatusCode::BAD_GATEWAY);
        assert_eq!(gw.get("/y").await.status, StatusCode::BAD_GATEWAY);
        await_metric(
            &gw,
            "pressure_gateway_upstream_failures_total{upstream=\"dead\",kind=\"connect_refused\"}",
            2.0,
        )
        .await;
        await_metric(
            &gw,
            "pressure_gateway_requests_total{route=\"none\",upstream=\"dead\",status=\"5xx\"}",
            2.0,
        )
        .await;
        // The coarse family of before is kept.
        await_metric(
            &gw,
            "pressure_gateway_upstream_errors_total{kind=\"unavailable\"}",
            2.0,
        )
        .await;
        gw.stop().await;
    })
    .await;
}

/// Upstreams that accept connections and then fail: one closes without an
/// answer and one cuts its body short (both `reset`, not refused), one
/// answers garbage (`bad_response`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closes_and_cut_bodies_count_as_reset_and_garbage_as_bad_response() {
    bounded(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let closing = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let closing_addr = closing.local_addr().expect("addr");
        let garbage = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let garbage_addr = garbage.local_addr().expect("addr");
        let short = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let short_addr = short.local_addr().expect("addr");
        // The cut comes once the client has the head: a close that arrives
        // with the head could make the gateway drop the response before it
        // wrote its head (a different failure, and a race in this test).
        let head_seen = std::sync::Arc::new(tokio::sync::Notify::new());
        let cut_now = std::sync::Arc::clone(&head_seen);
        let tasks = [
            tokio::spawn(async move {
                // A head promising 100 bytes, 10 of them, then the close.
                while let Ok((mut s, _)) = short.accept().await {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                        .await;
                    cut_now.notified().await;
                }
            }),
            tokio::spawn(async move {
                while let Ok((mut s, _)) = closing.accept().await {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    drop(s);
                }
            }),
            tokio::spawn(async move {
                while let Ok((mut s, _)) = garbage.accept().await {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(b"NOT HTTP AT ALL\r\n\r\n").await;
                }
            }),
        ];
        let gw = TestGateway::start(json!({
            "upstreams": {
                "closing": { "url": format!("http://{closing_addr}"), "pathPrefix": "/closing" },
                "garbage": { "url": format!("http://{garbage_addr}"), "pathPrefix": "/garbage" },
                "short": { "url": format!("http://{short_addr}"), "pathPrefix": "/short" },
            },
        }))
        .await;
        assert_eq!(gw.get("/closing").await.status, StatusCode::BAD_GATEWAY);
        assert_eq!(gw.get("/garbage").await.status, StatusCode::BAD_GATEWAY);
        let cut = gw.open("/short").await;
        assert_eq!(cut.status(), StatusCode::OK);
        head_seen.notify_one();
        assert!(
            http_body_util::BodyExt::collect(cut.into_body()).await.is_err(),
            "the body was cut short"
        );
        await_metric(
            &gw,
            "pressure_gateway_upstream_failures_total{upstream=\"short\",kind=\"reset\"}",
            1.0,
        )
        .await;
        await_metric(
            &gw,
            "pressure_gateway_upstream_failures_total{upstream=\"closing\",kind=\"reset\"}",
            1.0,
        )
        .await;
        await_metric(
            &gw,
            "pressure_gateway_upstream_failures_total{upstream=\"garbage\",kind=\"bad_response\"}",
            1.0,
        )
        .await;
        gw.stop().await;
        for t in tasks {
            t.abort();
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_gauge_counts_a_slow_request() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        }))
        .await;
        await_metric(&gw, "pressure_gateway_in_flight_requests", 0.0).await;
        let client = gw.client();
        let url = gw.url("/late");
        let slow = tokio::spawn(async move {
            let resp = client.request(get_request(&url)).await.expect("answered");
            Reply::read(resp).await.status
        });
        await_metric(&gw, "pressure_gateway_in_flight_requests", 1.0).await;
        assert_eq!(slow.await.expect("task"), StatusCode::OK);
        await_metric(&gw, "pressure_gateway_in_flight_requests", 0.0).await;
        await_metric(
            &gw,
            "pressure_gateway_request_duration_seconds_bucket{route=\"none\",le=\"0.5\"}",
            0.0,
        )
        .await;
        await_metric(
            &gw,
            "pressure_gateway_request_duration_seconds_bucket{route=\"none\",le=\"2.5\"}",
            1.0,
        )
        .await;
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// A client that hangs up while the upstream is still thinking: counted
/// once, as 499 (`4xx`), and the gauge comes back to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_the_head_counts_as_499_and_leaves_the_gauge() {
    bounded(async {
        use tokio::io::AsyncWriteExt;
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        }))
        .await;
        let mut s = tokio::net::TcpStream::connect(gw.addr).await.expect("connect");
        s.write_all(b"GET /late HTTP/1.1\r\nHost: gw\r\n\r\n")
            .await
            .expect("write");
        await_metric(&gw, "pressure_gateway_in_flight_requests", 1.0).await;
        drop(s);
        await_metric(&gw, "pressure_gateway_in_flight_requests", 0.0).await;
        await_metric(
            &gw,
            "pressure_gateway_requests_total{route=\"none\",upstream=\"demo\",status=\"4xx\"}",
            1.0,
        )
        .await;
        assert_eq!(
            metric(
                &gw,
                "pressure_gateway_requests_total{route=\"none\",upstream=\"demo\",status=\"2xx\"}"
            )
            .await,
            None
        );
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn the_access_log_has_one_line_per_request_with_its_fields() {
    let capture = Capture::default();
    let _guard = capture.install();
    // Callsites first hit by a parallel test on a thread without a
    // subscriber may have cached "never"; recompute with ours installed.
    tracing::callsite::rebuild_interest_cache();
    bounded(async {
        let up = TestUpstream::demo().await;
        let mut cfg = limited(
            &up,
            json!({ "accessLog": { "enabled": true }, "auth": support::hs256_auth() }),
        );
        cfg["pressure"]["perTenant"] = json!({ "enabled": true, "limits": { "requestsPerMinute": 100 } });
        let gw = TestGateway::start(cfg).await;
        let mut req = get_request(&gw.url("/limited//a/../b?access_token=secret123"));
        req.headers_mut()
            .insert("x-request-id", "client-id-1".parse().expect("value"));
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {}", token("acme")).parse().expect("value"),
        );
        let ok = Reply::read(gw.send(req).await).await;
        assert_eq!(ok.status, StatusCode::OK);
        assert_eq!(ok.header("x-request-id"), Some("client-id-1"));
        let mut bad = get_request(&gw.url("/other"));
        bad.headers_mut()
            .insert("x-request-id", "has space".parse().expect("value"));
        let other = Reply::read(gw.send(bad).await).await;
        let generated = other.header("x-request-id").expect("an id is echoed").to_owned();
        assert_ne!(generated, "has space");

        let deadline = Instant::now() + Duration::from_secs(5);
        let lines = loop {
            let lines: Vec<Value> = capture
                .lines()
                .into_iter()
                .filter(|l| l["target"] == "pressure::access")
                .collect();
            if lines.len() >= 2 || Instant::now() >= deadline {
                break lines;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(lines.len(), 2, "{lines:#?}");
        let f = &lines[0]["fields"];
        assert_eq!(f["request_id"], "client-id-1");
        assert_eq!(f["method"], "GET");
        assert_eq!(f["path"], "/limited/b");
        assert_eq!(f["route"], ROUTE);
        assert_eq!(f["upstream"], "demo");
        assert_eq!(f["status"], 200);
        assert_eq!(f["bytes_sent"], ok.body.len() as u64);
        assert_eq!(f["tenant"], "acme");
        assert_eq!(f["resource"], format!("{ROUTE},gateway:tenant:acme"));
        assert!(f["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{f}");
        assert!(f["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{f}");
        let g = &lines[1]["fields"];
        assert_eq!(g["request_id"], generated.as_str());
        assert_eq!(g["route"], "none");
        assert!(g.get("tenant").is_none(), "{g}");
        assert!(g.get("resource").is_none(), "{g}");
        for l in &lines {
            let text = l.to_string();
            assert!(!text.contains("secret123"), "the query is never logged: {text}");
            assert!(!text.contains("Bearer"), "tokens are never logged: {text}");
        }
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn no_access_log_by_default() {
    let capture = Capture::default();
    let _guard = capture.install();
    // Callsites first hit by a parallel test on a thread without a
    // subscriber may have cached "never"; recompute with ours installed.
    tracing::callsite::rebuild_interest_cache();
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(limited(&up, json!({}))).await;
        let reply = gw.get("/other").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("x-request-id"), None);
        let mut codes = Vec::new();
        for _ in 0..4 {
            codes.push(gw.get("/limited").await.status.as_u16());
        }
        assert_eq!(codes, [200, 200, 200, 429]);
        gw.stop().await;
        up.stop().await;
    })
    .await;
    // The capture does see the target (a probe of the test's own), so the
    // absence of gateway lines is the gateway's doing. (Not a gateway line:
    // a callsite first hit by a parallel test on a thread without a
    // subscriber can be cached as disabled, which would make this flaky.)
    tracing::info!(target: "pressure::access", probe = true, "probe");
    let lines: Vec<Value> = capture
        .lines()
        .into_iter()
        .filter(|l| l["target"] == "pressure::access")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["fields"]["probe"], true, "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimit_headers_on_success_when_enabled_for_the_tightest_dimension() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let mut cfg = limited(&up, json!({ "auth": support::hs256_auth() }));
        cfg["pressure"]["rateLimitHeaders"] = json!(true);
        cfg["pressure"]["perTenant"] = json!({ "enabled": true, "limits": { "requestsPerMinute": 2 } });
        let gw = TestGateway::start(cfg).await;

        let first = gw.get("/limited").await;
        assert_eq!(first.status, StatusCode::OK);
        assert_eq!(
            first.header("ratelimit-policy"),
            Some("\"requestsPerMinute\";q=3;w=60")
        );
        assert_eq!(first.header("ratelimit"), Some("\"requestsPerMinute\";r=2;t=60"));

        // With a token the tenant is charged too: its 1 of 2 left is tighter
        // than the route's 1 of 3... no: 1/2 > 1/3, so the route's wins.
        let mut req = get_request(&gw.url("/limited"));
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {}", token("t1")).parse().expect("value"),
        );
        let both = Reply::read(gw.send(req).await).await;
        assert_eq!(both.status, StatusCode::OK);
        assert_eq!(
            both.header("ratelimit-policy"),
            Some("\"requestsPerMinute\";q=3;w=60")
        );
        assert_eq!(both.header("ratelimit"), Some("\"requestsPerMinute\";r=1;t=60"));

        // A second tenant request on a path without a route limit: only
        // the tenant's quota (0 of 2 left) is charged.
        let mut req = get_request(&gw.url("/other"));
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {}", token("t1")).parse().expect("value"),
        );
        let tenant = Reply::read(gw.send(req).await).await;
        assert_eq!(tenant.status, StatusCode::OK);
        assert_eq!(
            tenant.header("ratelimit-policy"),
            Some("\"requestsPerMinute\";q=2;w=60")
        );
        assert_eq!(tenant.header("ratelimit"), Some("\"requestsPerMinute\";r=0;t=60"));

        // Uncharged requests carry none.
        let free = gw.get("/other").await;
        assert_eq!(free.header("ratelimit"), None);
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ratelimit_headers_on_success_by_default() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(limited(&up, json!({}))).await;
        let ok = gw.get("/limited").await;
        assert_eq!(ok.status, StatusCode::OK);
        assert_eq!(ok.header("ratelimit"), None);
        assert_eq!(ok.header("ratelimit-policy"), None);
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[test]
fn bad_access_log_config_names_the_json_path() {
    let e = pressure_gateway::config::parse(
        &json!({ "gateway": {
            "listen": "127.0.0.1:0",
            "upstreams": {},
            "accessLog": { "enabled": "yes" },
        }})
        .to_string(),
    )
    .expect_err("a string is not a bool");
    assert!(e.to_string().contains("gateway.accessLog.enabled"), "{e}");
    let e = pressure_gateway::config::parse(
        &json!({ "gateway": {
            "listen": "127.0.0.1:0",
            "upstreams": {},
            "accessLog": { "enable": true },
        }})
        .to_string(),
    )
    .expect_err("unknown key");
    assert!(e.to_string().contains("gateway.accessLog"), "{e}");
    let e = pressure_gateway::config::parse(
        &json!({ "gateway": {
            "listen": "127.0.0.1:0",
            "upstreams": {},
            "pressure": { "rateLimitHeaders": 1 },
        }})
        .to_string(),
    )
    .expect_err("a number is not a bool");
    assert!(e.to_string().contains("gateway.pressure.rateLimitHeaders"), "{e}");
}
