//! The whole gateway over real sockets: `Gateway::build` from a JSON config
//! and `serve` on `127.0.0.1:0`, in front of the demo upstream (plus a few
//! endless test routes). Covers route-over-service resolution, exact counts
//! under concurrent bursts (per service, per tenant), the 429's headers,
//! permits held by streaming bodies and released on abort, WebSocket
//! tunnels and SSE streams that give their slot back at the head, the
//! denial log, hostile input, and the admin listener. Every test stops its
//! servers and is bounded in time.

use super::support;

use http::{header, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use support::{
    bounded, count, demo_config, echo_through, get_request, hs256_auth, next_chunk, raw_status, statuses,
    token, upgrade_request, Capture, Reply, TestGateway, TestUpstream,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

const GITHUB: &str = "gateway:route:webhooks-github";
const SERVICE: &str = "gateway:service:demo";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_limit_beats_service_limit() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perService": { "demo": { "requestsPerSecond": 100 } },
                "perRoute": [{
                    "resource": GITHUB,
                    "pathPrefix": "/webhooks/github",
                    "limits": { "requestsPerSecond": 3 },
                }],
            }),
        ))
        .await;

        let replies = gw.burst(10, "/webhooks/github/x", &[]).await;
        assert_eq!(count(&replies, StatusCode::OK), 3, "{:?}", statuses(&replies));
        assert_eq!(
            count(&replies, StatusCode::TOO_MANY_REQUESTS),
            7,
            "{:?}",
            statuses(&replies)
        );
        for ok in replies.iter().filter(|r| r.status == StatusCode::OK) {
            assert_eq!(ok.json()["path"], "/webhooks/github/x");
        }
        for denied in replies
            .iter()
            .filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        {
            assert_eq!(denied.json()["error"]["resource"], GITHUB);
        }
        let route = gw.stats(GITHUB).await;
        assert_eq!((route.allowed, route.denied), (3, 7));
        let service = gw.stats(SERVICE).await;
        assert_eq!(
            (service.allowed, service.denied),
            (0, 0),
            "the route's traffic never touches the service"
        );

        let other = gw.get("/other").await;
        assert_eq!(other.status, StatusCode::OK);
        assert_eq!(other.json()["path"], "/other");
        let service = gw.stats(SERVICE).await;
        assert_eq!((service.allowed, service.denied), (1, 0));
        let route = gw.stats(GITHUB).await;
        assert_eq!((route.allowed, route.denied), (3, 7), "/other is not the route's");

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_service_limit_is_exact_under_a_concurrent_burst() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({ "perService": { "demo": { "requestsPerMinute": 20 } } }),
        ))
        .await;

        let replies = gw.burst(50, "/api/items", &[]).await;
        assert_eq!(count(&replies, StatusCode::OK), 20, "{:?}", statuses(&replies));
        assert_eq!(
            count(&replies, StatusCode::TOO_MANY_REQUESTS),
            30,
            "{:?}",
            statuses(&replies)
        );
        let s = gw.stats(SERVICE).await;
        assert_eq!((s.allowed, s.denied), (20, 30));
        assert_eq!(s.usage.get("requestsPerMinute"), Some(&20));
        for denied in replies
            .iter()
            .filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        {
            assert_eq!(denied.json()["error"]["dimension"], "requestsPerMinute");
        }

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_tenant_limit_is_exact_under_a_concurrent_burst() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let mut cfg = demo_config(
            &up,
            json!({ "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 5 } } }),
        );
        cfg["auth"] = hs256_auth();
        let gw = TestGateway::start(cfg).await;
        let bearer = |tenant: &str| format!("Bearer {}", token(tenant));

        let a = gw
            .burst(12, "/tenant/a", &[("authorization", &bearer("tenant-a"))])
            .await;
        assert_eq!(count(&a, StatusCode::OK), 5, "{:?}", statuses(&a));
        assert_eq!(count(&a, StatusCode::TOO_MANY_REQUESTS), 7, "{:?}", statuses(&a));
        for denied in a.iter().filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS) {
            let body = denied.json();
            assert_eq!(body["error"]["resource"], "gateway:tenant:tenant-a");
            assert_eq!(body["error"]["dimension"], "requestsPerMinute");
        }

        let b = gw
            .burst(5, "/tenant/b", &[("authorization", &bearer("tenant-b"))])
            .await;
        assert_eq!(count(&b, StatusCode::OK), 5, "{:?}", statuses(&b));

        let ta = gw.stats("gateway:tenant:tenant-a").await;
        assert_eq!((ta.allowed, ta.denied), (5, 7));
        assert!(ta.lazy, "tenant resources are registered lazily");
        let tb = gw.stats("gateway:tenant:tenant-b").await;
        assert_eq!((tb.allowed, tb.denied), (5, 0));

        // No token: anonymous, passes, and is charged to no tenant.
        let anonymous = gw.burst(10, "/anonymous", &[]).await;
        assert_eq!(
            count(&anonymous, StatusCode::OK),
            10,
            "{:?}",
            statuses(&anonymous)
        );
        let mut tenants: Vec<String> = gw
            .resource_ids()
            .await
            .into_iter()
            .filter(|id| id.starts_with("gateway:tenant:"))
            .collect();
        tenants.sort();
        assert_eq!(tenants, ["gateway:tenant:tenant-a", "gateway:tenant:tenant-b"]);
        let ta = gw.stats("gateway:tenant:tenant-a").await;
        assert_eq!((ta.allowed, ta.denied), (5, 7));

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// Sends `GET path` one at a time until one is refused (at most `tries`).
async fn first_denial(gw: &TestGateway, path: &str, tries: usize) -> Reply {
    for _ in 0..tries {
        let r = gw.get(path).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            return r;
        }
        assert_eq!(r.status, StatusCode::OK);
    }
    panic!("{path}: no 429 in {tries} requests");
}

/// A wait for one window is never longer than the window: a per-minute
/// limit exhausted answers `Retry-After` (and the `RateLimit` field's `t`)
/// of at most 60 s (it was `61` or `62`: a full window plus the sub-window
/// the limit was spent in). That a retry after the wait is admitted is the
/// backends' contract check `window_burst_wait_is_at_most_the_window`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_minute_wait_is_at_most_a_minute() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perRoute": [{
                    "resource": "gateway:route:minute",
                    "pathPrefix": "/minute",
                    "limits": { "requestsPerMinute": 2 },
                }],
            }),
        ))
        .await;
        let denied = first_denial(&gw, "/minute", 10).await;
        let retry_after: u64 = denied
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .expect("Retry-After is an integer");
        assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
        assert_eq!(
            denied.header("ratelimit-policy"),
            Some("\"requestsPerMinute\";q=2;w=60")
        );
        assert_eq!(
            denied.header("ratelimit"),
            Some(format!("\"requestsPerMinute\";r=0;t={retry_after}").as_str())
        );
        let wait_ms = denied.json()["error"]["retryAfterMs"]
            .as_u64()
            .expect("retryAfterMs");
        assert!(wait_ms <= 60_000, "retryAfterMs {wait_ms}");
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_carry_retry_after_and_ratelimit_headers() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perRoute": [
                    {
                        "resource": "gateway:route:window",
                        "pathPrefix": "/window",
                        "limits": { "requestsPerSecond": 2 },
                    },
                    {
                        "resource": "gateway:route:gcra",
                        "pathPrefix": "/gcra",
                        "limits": { "requestsPerSecond": 10, "algorithm": "gcra", "burst": 1 },
                    },
                ],
            }),
        ))
        .await;

        // Window: W = 1 s, so the wait is at most W plus one sub-window.
        let denied = first_denial(&gw, "/window", 10).await;
        let retry_after: u64 = denied
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .expect("Retry-After is an integer");
        assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
        assert_eq!(
            denied.header("ratelimit-policy"),
            Some("\"requestsPerSecond\";q=2;w=1")
        );
        assert_eq!(
            denied.header("ratelimit"),
            Some(format!("\"requestsPerSecond\";r=0;t={retry_after}").as_str())
        );
        assert_eq!(denied.header("content-type"), Some("application/json"));
        let body = denied.json();
        assert_eq!(body["error"]["type"], "rate_limited");
        assert_eq!(body["error"]["resource"], "gateway:route:window");
        assert_eq!(body["error"]["dimension"], "requestsPerSecond");
        let wait_ms = body["error"]["retryAfterMs"].as_u64().expect("retryAfterMs");
        assert!(
            wait_ms <= retry_after * 1000,
            "{wait_ms} ms rounds up to {retry_after} s"
        );

        // GCRA, burst 1 at 10/s: the next slot is at most 100 ms away.
        let denied = first_denial(&gw, "/gcra", 20).await;
        assert_eq!(denied.header("retry-after"), Some("1"));
        assert_eq!(
            denied.header("ratelimit-policy"),
            Some("\"requestsPerSecond\";q=10;w=1")
        );
        assert_eq!(denied.header("ratelimit"), Some("\"requestsPerSecond\";r=0;t=1"));
        let body = denied.json();
        assert_eq!(body["error"]["type"], "rate_limited");
        assert!(body["error"]["retryAfterMs"].as_u64().expect("retryAfterMs") <= 100);

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_body_holds_its_slot_until_it_ends() {
    bounded(async {
        const SLOW: &str = "gateway:route:slow";
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perRoute": [{
                    "resource": SLOW,
                    "pathPrefix": "/slow",
                    "limits": { "maxConcurrentRequests": 1 },
                }],
            }),
        ))
        .await;

        let mut first = gw.open("/slow").await;
        assert_eq!(first.status(), StatusCode::OK);
        let chunk = next_chunk(&mut first).await.expect("first chunk");
        assert_eq!(&chunk[..], b"chunk 0\n");
        let s = gw.stats(SLOW).await;
        assert_eq!(s.active, Some(1), "the streaming body holds the permit");
        assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&1));

        let second = gw.get("/slow").await;
        assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(second.json()["error"]["dimension"], "maxConcurrentRequests");

        let mut rest = Vec::new();
        while let Some(chunk) = next_chunk(&mut first).await {
            rest.extend_from_slice(&chunk);
        }
        assert!(
            String::from_utf8_lossy(&rest).ends_with("chunk 4\n"),
            "the whole body arrives: {rest:?}"
        );
        let s = gw.await_idle(SLOW, Duration::from_secs(2)).await;
        assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));

        let third = gw.get("/slow").await;
        assert_eq!(third.status, StatusCode::OK);
        let s = gw.await_idle(SLOW, Duration::from_secs(2)).await;
        assert_eq!((s.allowed, s.denied), (2, 1));

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_requests_give_their_slots_back() {
    bounded(async {
        const SLOW: &str = "gateway:route:slow";
        const FOREVER: &str = "gateway:route:forever";
        const DELAYED: &str = "gateway:route:delay-head";
        let up = TestUpstream::demo().await;
        let limits = json!({ "maxConcurrentRequests": 1000 });
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perRoute": [
                    { "resource": SLOW, "pathPrefix": "/slow", "limits": limits },
                    { "resource": FOREVER, "pathPrefix": "/forever", "limits": limits },
                    { "resource": DELAYED, "pathPrefix": "/delay-head", "limits": limits },
                ],
            }),
        ))
        .await;

        // 1,000 requests on /slow, 100 at a time, each dropped after its head.
        for _ in 0..10 {
            let heads = futures::future::join_all((0..100).map(|_| gw.open("/slow"))).await;
            for head in heads {
                assert_eq!(head.status(), StatusCode::OK);
            }
        }
        let s = gw.await_idle(SLOW, Duration::from_secs(5)).await;
        assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));
        assert_eq!((s.allowed, s.denied), (1000, 0));

        // Bodies that never end: only the client going away releases them.
        let mut open = Vec::new();
        for _ in 0..100 {
            let mut resp = gw.open("/forever").await;
            assert_eq!(resp.status(), StatusCode::OK);
            next_chunk(&mut resp).await.expect("a chunk");
            open.push(resp);
        }
        assert_eq!(gw.stats(FOREVER).await.active, Some(100));
        drop(open);
        let s = gw.await_idle(FOREVER, Duration::from_secs(5)).await;
        assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));
        assert_eq!(s.allowed, 100);

        // Heads that come after 20 s: the client gives up after 50 ms.
        let aborted = futures::future::join_all(
            (0..50).map(|_| tokio::time::timeout(Duration::from_millis(50), gw.open("/delay-head"))),
        )
        .await;
        assert!(aborted.iter().all(Result::is_err), "no head arrives within 50 ms");
        let s = gw.await_idle(DELAYED, Duration::from_secs(5)).await;
        assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));
        assert!(s.allowed <= 50, "{s:?}");

        // The same, deterministically: 20 requests known to be admitted
        // and waiting for their head when their tasks are aborted.
        let before = s.allowed;
        let waiting: Vec<_> = (0..20)
            .map(|_| {
                let client = gw.client();
                let req = get_request(&gw.url("/delay-head"));
                tokio::spawn(async move { client.request(req).await.map(|r| r.status()) })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while gw.stats(DELAYED).await.active != Some(20) {
            assert!(
                Instant::now() < deadline,
                "20 requests in flight: {:?}",
                gw.stats(DELAYED).await
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for task in &waiting {
            task.abort();
        }
        for task in waiting {
            assert!(
                task.await.is_err_and(|e| e.is_cancelled()),
                "no head before the abort"
            );
        }
        let s = gw.await_idle(DELAYED, Duration::from_secs(5)).await;
        assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));
        assert_eq!(s.allowed, before + 20);

        // The route still admits.
        let ok = gw.get("/slow").await;
        assert_eq!(ok.status, StatusCode::OK);
        gw.await_idle(SLOW, Duration::from_secs(2)).await;

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// Upgrades are counted like any request (so a flood of them is limited),
/// but a tunnel gives its concurrency slot back at the `101`: open tunnels
/// never hold the route's `maxConcurrentRequests`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_tunnels_release_their_slot_at_the_101() {
    bounded(async {
        const WS: &str = "gateway:route:ws";
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perRoute": [{
                    "resource": WS,
                    "pathPrefix": "/ws",
                    "limits": { "maxConcurrentRequests": 1, "requestsPerMinute": 3 },
                }],
            }),
        ))
        .await;

        let first = gw.send(upgrade_request(&gw.url("/ws/echo"))).await;
        let mut first = echo_through(first, b"ping 1").await;
        let s = gw.stats(WS).await;
        assert_eq!((s.allowed, s.denied, s.active), (1, 0, Some(0)), "{s:?}");
        assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));

        // A second tunnel while the first is open: the slot is free.
        let second = gw.send(upgrade_request(&gw.url("/ws/echo"))).await;
        let second = echo_through(second, b"ping 2").await;
        // And a plain request on the same route.
        let plain = gw.get("/ws/plain").await;
        assert_eq!(plain.status, StatusCode::OK);
        let s = gw.stats(WS).await;
        assert_eq!((s.allowed, s.denied, s.active), (3, 0, Some(0)), "{s:?}");

        // Both tunnels still carry bytes.
        first.write_all(b"still open").await.expect("write");
        let mut echoed = [0u8; 10];
        first.read_exact(&mut echoed).await.expect("echo");
        assert_eq!(&echoed, b"still open");

        // Upgrades spend the rate dimensions: the fourth in a minute is refused.
        let flood = Reply::read(gw.send(upgrade_request(&gw.url("/ws/echo"))).await).await;
        assert_eq!(flood.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(flood.json()["error"]["dimension"], "requestsPerMinute");
        let s = gw.stats(WS).await;
        assert_eq!((s.allowed, s.denied, s.active), (3, 1, Some(0)), "{s:?}");

        drop(first);
        drop(second);
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_release_their_slot_at_the_head() {
    bounded(async {
        const EVENTS: &str = "gateway:route:events";
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perRoute": [{
                    "resource": EVENTS,
                    "pathPrefix": "/events",
                    "limits": { "maxConcurrentRequests": 1 },
                }],
            }),
        ))
        .await;

        // An SSE stream that never ends, held open for the whole test.
        let mut endless = gw.open("/events/forever").await;
        assert_eq!(endless.status(), StatusCode::OK);
        assert_eq!(
            endless.headers().get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"text/event-stream"[..])
        );
        next_chunk(&mut endless).await.expect("an event");
        let s = gw.stats(EVENTS).await;
        assert_eq!(s.active, Some(0), "released at the response head: {s:?}");

        // The demo's /events, admitted while the other stream still flows.
        let mut events = gw.open("/events").await;
        assert_eq!(events.status(), StatusCode::OK);
        let mut text = Vec::new();
        while let Some(chunk) = next_chunk(&mut events).await {
            text.extend_from_slice(&chunk);
        }
        assert!(String::from_utf8_lossy(&text).starts_with("data: event 0\n\n"));
        next_chunk(&mut endless)
            .await
            .expect("the endless stream still flows");

        let s = gw.stats(EVENTS).await;
        assert_eq!((s.allowed, s.denied, s.active), (2, 0, Some(0)));
        drop(endless);

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// The gateway runs on this test's thread (current-thread runtime), so the
/// thread-local subscriber sees every event it emits.
#[tokio::test(flavor = "current_thread")]
async fn denials_are_logged_with_their_fields_and_allowed_requests_are_not() {
    let capture = Capture::default();
    let _guard = capture.install();
    bounded(async {
        const LOGGED: &str = "gateway:route:logged";
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perRoute": [{
                    "resource": LOGGED,
                    "pathPrefix": "/logged",
                    "limits": { "requestsPerMinute": 3 },
                }],
            }),
        ))
        .await;

        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(gw.get("/logged").await.status);
        }
        assert_eq!(
            seen,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::TOO_MANY_REQUESTS,
            ]
        );
        gw.stop().await;
        up.stop().await;
    })
    .await;

    let lines = capture.lines();
    let denials: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "pressure::denial")
        .collect();
    assert_eq!(denials.len(), 2, "{lines:#?}");
    for line in &denials {
        let fields = &line["fields"];
        assert_eq!(fields["resource"], "gateway:route:logged", "{line}");
        assert_eq!(fields["layer"], "pre_auth", "{line}");
        assert!(fields["wait_time_ms"].is_u64(), "{line}");
        assert_eq!(fields["namespace_id"], "", "{line}");
        assert_eq!(fields["dimension"], "requestsPerMinute", "{line}");
        assert_eq!(line["level"], "INFO", "{line}");
    }
    let from_gateway: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"].as_str().is_some_and(|t| t.starts_with("pressure")))
        .collect();
    assert_eq!(from_gateway.len(), 2, "allowed requests log nothing: {lines:#?}");
}

/// A flood writes at most the budget of lines per resource per second, and
/// one summary per window with the count it left out: every denial is
/// either a line or counted in a summary, none twice. The gateway runs on
/// the test's thread, so the capture sees the flusher's summary too.
#[tokio::test(flavor = "current_thread")]
async fn a_denial_flood_is_logged_within_its_budget_with_a_summary() {
    const FLOOD: &str = "gateway:route:flood";
    const BUDGET: usize = 5;
    const SENT: usize = 120;
    let capture = Capture::default();
    let _guard = capture.install();
    bounded(async {
        let up = TestUpstream::demo().await;
        let mut cfg = demo_config(
            &up,
            json!({
                "perRoute": [{
                    "resource": FLOOD,
                    "pathPrefix": "/flood",
                    "limits": { "requestsPerMinute": 1 },
                }],
            }),
        );
        cfg["denialLog"] = json!({ "linesPerResourcePerSecond": BUDGET });
        let gw = TestGateway::start(cfg).await;
        let mut denied = 0;
        for _ in 0..SENT {
            if gw.get("/flood").await.status == StatusCode::TOO_MANY_REQUESTS {
                denied += 1;
            }
        }
        assert_eq!(denied, SENT - 1);
        // The flusher closes the last window about a second after it began.
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        gw.stop().await;
        up.stop().await;
    })
    .await;

    let lines = capture.lines();
    let of = |message: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["target"] == "pressure::denial" && l["fields"]["message"] == message)
            .collect()
    };
    let logged = of("request denied");
    let summaries = of("denials suppressed");
    assert!(
        !summaries.is_empty(),
        "a flood past the budget is summed up: {lines:#?}"
    );
    assert!(
        logged.len() <= BUDGET * (summaries.len() + 1),
        "at most {BUDGET} lines per window: {} lines, {} windows",
        logged.len(),
        summaries.len()
    );
    let mut suppressed = 0;
    for s in &summaries {
        let f = &s["fields"];
        assert_eq!(f["resource"], FLOOD, "{s}");
        assert_eq!(f["layer"], "pre_auth", "{s}");
        assert_eq!(f["window_ms"], 1_000, "{s}");
        suppressed += f["suppressed"].as_u64().expect("suppressed");
    }
    assert_eq!(
        logged.len() + usize::try_from(suppressed).expect("count"),
        SENT - 1,
        "every denial is a line or counted once"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn tenant_denials_are_logged_with_the_namespace() {
    let capture = Capture::default();
    let _guard = capture.install();
    bounded(async {
        let up = TestUpstream::demo().await;
        let mut cfg = demo_config(
            &up,
            json!({ "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 1 } } }),
        );
        cfg["auth"] = hs256_auth();
        let gw = TestGateway::start(cfg).await;
        let bearer = format!("Bearer {}", token("ns-logged"));
        let mut seen = Vec::new();
        for _ in 0..2 {
            let mut req = get_request(&gw.url("/t"));
            req.headers_mut()
                .insert(header::AUTHORIZATION, bearer.parse().expect("header"));
            seen.push(Reply::read(gw.send(req).await).await.status);
        }
        assert_eq!(seen, [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]);
        gw.stop().await;
        up.stop().await;
    })
    .await;

    let lines = capture.lines();
    let denials: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "pressure::denial")
        .collect();
    assert_eq!(denials.len(), 1, "{lines:#?}");
    let fields = &denials[0]["fields"];
    assert_eq!(fields["resource"], "gateway:tenant:ns-logged");
    assert_eq!(fields["layer"], "tenant");
    assert_eq!(fields["namespace_id"], "ns-logged");
    assert!(fields["wait_time_ms"].as_u64().expect("wait_time_ms") > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_or_broken_input_is_answered_not_panicked_on() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let down = support::dead_port().await;
        let gw = TestGateway::start(json!({
            "upstreams": {
                "demo": { "url": up.url(), "pathPrefix": "/" },
                "down": { "url": format!("http://127.0.0.1:{down}"), "pathPrefix": "/down" },
            },
            "limits": { "maxHeaderBytes": 8192, "maxBodyBytes": 1024 },
            "timeouts": { "connectMs": 500, "totalMs": 5000 },
        }))
        .await;

        // A 20 KB header.
        let big = format!(
            "GET / HTTP/1.1\r\nHost: gw\r\nX-Big: {}\r\n\r\n",
            "a".repeat(20 * 1024)
        );
        assert_eq!(raw_status(gw.addr, big.as_bytes()).await, 431);

        // A declared body over maxBodyBytes: refused before it is sent.
        let declared = "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 100000\r\n\r\n";
        assert_eq!(raw_status(gw.addr, declared.as_bytes()).await, 413);

        // Not HTTP at all.
        assert_eq!(raw_status(gw.addr, b"GARBAGE\r\n\r\n").await, 400);

        // Nothing listens on the upstream's port.
        let started = Instant::now();
        let refused = gw.get("/down/x").await;
        let took = started.elapsed();
        assert_eq!(refused.status, StatusCode::BAD_GATEWAY);
        assert_eq!(refused.json()["error"]["type"], "upstream_unavailable");
        assert!(took < Duration::from_secs(1), "502 took {took:?}");

        // Still serving.
        let ok = gw.get("/still/alive").await;
        assert_eq!(ok.status, StatusCode::OK);
        assert_eq!(ok.json()["path"], "/still/alive");

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_listener_serves_health_and_stats() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(
            &up,
            json!({
                "perService": { "demo": { "requestsPerSecond": 50 } },
                "perRoute": [
                    {
                        "resource": GITHUB,
                        "pathPrefix": "/webhooks/github",
                        "limits": { "requestsPerSecond": 100, "maxConcurrentRequests": 200 },
                    },
                    {
                        "resource": "gateway:route:stripe",
                        "pathPrefix": "/webhooks/stripe",
                        "limits": { "requestsPerMinute": 60 },
                    },
                ],
            }),
        ))
        .await;

        let health = gw.admin_get("/healthz").await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.json(), json!({ "status": "ok" }));

        assert_eq!(gw.get("/webhooks/github/push").await.status, StatusCode::OK);
        let stats = gw.admin_get("/admin/pressure/stats").await;
        assert_eq!(stats.status, StatusCode::OK);
        assert_eq!(stats.header("content-type"), Some("application/json"));
        let body = stats.json();
        let resources = body["resources"].as_array().expect("resources");
        let find = |id: &str| -> Value {
            resources
                .iter()
                .find(|r| r["resource"] == id)
                .cloned()
                .unwrap_or_else(|| panic!("{id} missing from {body}"))
        };
        for id in [GITHUB, "gateway:route:stripe", SERVICE] {
            let r = find(id);
            assert_eq!(r["kind"], "limit", "{r}");
            assert_eq!(r.get("queued"), Some(&Value::Null), "{r}");
            assert_eq!(r.get("waitTimeMs"), Some(&Value::Null), "{r}");
        }
        let github = find(GITHUB);
        assert_eq!(github["limits"]["requestsPerSecond"], 100);
        assert_eq!(github["limits"]["maxConcurrentRequests"], 200);
        assert_eq!(github["allowed"], 1);
        assert_eq!(find("gateway:route:stripe")["limits"]["requestsPerMinute"], 60);
        assert_eq!(find(SERVICE)["allowed"], 0);

        gw.stop().await;
        up.stop().await;
    })
    .await;
}
