//! The dashboard's endpoints: the summary (top N tenants only, whatever
//! their number), the event stream, the page and its assets (no data, no
//! token), and the token the data routes require.

use super::*;

/// A request with any headers; the reply.
async fn send(server: &Server, method: Method, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", server.addr));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        server
            .client
            .request(req.body(Empty::<Bytes>::new()).expect("request")),
    )
    .await
    .expect("answer in time")
    .expect("http");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).expect("utf-8 body"),
    }
}

fn header_of(reply: &Reply, name: header::HeaderName) -> &str {
    reply
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Tenants registered, and the few of them that were refused.
const TENANTS: usize = 100_000;
const HOT: usize = 40;

/// Denials of hot tenant `i` (after one admission): 1 to 13, with ties.
fn hot_denials(i: usize) -> u64 {
    1 + (i * 7 % 13) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_lists_the_top_tenants_only() {
    // Room for every tenant: none is evicted while the test counts them.
    let broker = ResourceBroker::builder(AnyBackend::Memory(MemoryBackend::new()))
        .max_lazy_resources(2 * TENANTS)
        .build();
    broker
        .register_limit(ROUTE, Limits::default().requests_per_minute(2))
        .expect("route");
    let template = LimitTemplate::new(&Limits::default().requests_per_minute(1)).expect("template");
    for i in 0..TENANTS {
        broker
            .lazy_limit(&format!("gateway:tenant:cold-{i:05}"), &template)
            .expect("tenant");
    }
    // A thousand tenants admitted once; HOT tenants admitted once, then refused.
    for i in 0..1000 {
        assert!(take(&broker, &format!("gateway:tenant:cold-{i:05}"))
            .await
            .is_some());
    }
    let mut expected: Vec<(String, u64, u64)> = Vec::new();
    for i in 0..HOT {
        let id = format!("hot-{i:02}");
        let resource = format!("gateway:tenant:{id}");
        broker.lazy_limit(&resource, &template).expect("hot tenant");
        assert!(take(&broker, &resource).await.is_some());
        for _ in 0..hot_denials(i) {
            assert!(take(&broker, &resource).await.is_none());
        }
        expected.push((id, 1, hot_denials(i)));
    }
    assert!(take(&broker, ROUTE).await.is_some());
    // Most denied first; ties by id (all hot tenants were admitted once).
    expected.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));

    let server = Server::start(state(broker, Arc::new(GatewayMetrics::new()), None)).await;

    let reply = server.get("/admin/pressure/summary").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(header_of(&reply, header::CACHE_CONTROL), "no-store");
    let summary = reply.json();
    // The full stats of these tenants are about 20 MB; the summary lists 20.
    assert!(
        reply.body.len() < 32 * 1024,
        "summary of {} bytes",
        reply.body.len()
    );

    assert_eq!(summary["top"], 20);
    let resources = summary["resources"].as_array().expect("resources");
    assert_eq!(resources.len(), 1, "only the configured resources: {resources:?}");
    assert_eq!(resources[0]["resource"], ROUTE);
    assert_eq!(resources[0]["allowed"], 1);
    assert_eq!(
        resources[0]["usage"]["requestsPerMinute"], 1,
        "usage read from the store"
    );
    assert_eq!(resources[0]["limits"]["requestsPerMinute"], 2);

    let tenants = &summary["tenants"];
    let denied_total: u64 = (0..HOT).map(hot_denials).sum();
    assert_eq!(tenants["count"], TENANTS + HOT);
    assert_eq!(tenants["allowed"], 1000 + HOT);
    assert_eq!(tenants["denied"], denied_total);
    assert_eq!(tenants["denying"], HOT);
    let top: Vec<(String, u64, u64)> = tenants["top"]
        .as_array()
        .expect("top")
        .iter()
        .map(|t| {
            assert_eq!(
                t["resource"].as_str().map(|r| r.strip_prefix("gateway:tenant:")),
                Some(t["tenant"].as_str())
            );
            assert_eq!(t["limits"]["requestsPerMinute"], 1);
            (
                t["tenant"].as_str().expect("id").to_owned(),
                t["allowed"].as_u64().expect("allowed"),
                t["denied"].as_u64().expect("denied"),
            )
        })
        .collect();
    assert_eq!(top, expected[..20]);
    assert_eq!(tenants["top"][0]["usage"]["requestsPerMinute"], 1);

    assert_eq!(summary["llm"], Value::Null);
    assert_eq!(
        summary["health"],
        serde_json::json!({"status": "ok", "ready": true, "backend": "memory", "redis": null})
    );

    // ?top= bounds the list, and is validated.
    let five = server.get("/admin/pressure/summary?top=5").await.json();
    assert_eq!(five["tenants"]["top"].as_array().map(Vec::len), Some(5));
    assert_eq!(five["tenants"]["top"][4]["tenant"], expected[4].0.as_str());
    let none = server.get("/admin/pressure/summary?top=0").await.json();
    assert_eq!(none["tenants"]["top"], serde_json::json!([]));
    assert_eq!(none["tenants"]["count"], TENANTS + HOT);
    for bad in ["201", "-1", "many"] {
        let reply = server.get(&format!("/admin/pressure/summary?top={bad}")).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "top={bad}");
        assert_eq!(reply.json()["error"]["type"], "bad_request");
    }

    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_sends_a_summary_per_tick() {
    let broker = memory_broker();
    broker
        .register_limit(ROUTE, Limits::default().requests_per_minute(2))
        .expect("route");
    let server = Server::start(state(broker.clone(), Arc::new(GatewayMetrics::new()), None)).await;

    let reply = server.get("/admin/pressure/events?everyMs=10").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json()["error"]["type"], "bad_request");

    let req = Request::get(format!(
        "http://{}/admin/pressure/events?everyMs=250&top=3",
        server.addr
    ))
    .body(Empty::<Bytes>::new())
    .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(5), server.client.request(req))
        .await
        .expect("head in time")
        .expect("http");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let mut body = resp.into_body();
    let mut text = String::new();
    let mut summaries = Vec::new();
    while summaries.len() < 2 {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("an event within 5 s")
            .expect("stream open")
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            text.push_str(std::str::from_utf8(&data).expect("utf-8"));
        }
        while let Some(end) = text.find("\n\n") {
            let event: String = text.drain(..end + 2).collect();
            if event.lines().any(|l| l == "event: summary") {
                let data = event
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .expect("data line");
                summaries.push(serde_json::from_str::<Value>(data).expect("JSON data"));
                // Between two events, one admission the next must show.
                assert!(take(&broker, ROUTE).await.is_some());
            }
        }
    }
    assert_eq!(summaries[0]["top"], 3);
    assert_eq!(summaries[0]["resources"][0]["allowed"], 0);
    assert_eq!(summaries[1]["resources"][0]["allowed"], 1);
    drop(body);

    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_page_is_static_and_its_data_needs_the_token() {
    let token = "s3cret/to ken";
    let server = Server::start(state(
        memory_broker(),
        Arc::new(GatewayMetrics::new()),
        Some(token),
    ))
    .await;

    // `/` is the dashboard, query kept.
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(header_of(&reply, header::LOCATION), "/dashboard");
    let reply = server.get("/?token=abc&top=5").await;
    assert_eq!(header_of(&reply, header::LOCATION), "/dashboard?token=abc&top=5");

    // The page holds no data: served without the token, locked down, and
    // it sets no cookie (cookies are not scoped by port).
    for path in ["/dashboard", "/dashboard?token=anything"] {
        let reply = server.get(path).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(
            header_of(&reply, header::CONTENT_TYPE),
            "text/html; charset=utf-8"
        );
        let csp = header_of(&reply, header::CONTENT_SECURITY_POLICY);
        assert!(
            csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"),
            "{csp}"
        );
        assert_eq!(header_of(&reply, header::REFERRER_POLICY), "no-referrer");
        assert!(reply.headers.get(header::SET_COOKIE).is_none());
        assert!(reply.body.contains(r#"src="/dashboard/app.js""#));
        assert!(reply.body.contains(r#"href="/dashboard/style.css""#));
    }

    // Its data needs the header; a cookie never stands in for it.
    let bearer = format!("Bearer {token}");
    for path in ["/admin/pressure/summary", "/admin/pressure/events"] {
        let reply = server.get(path).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(reply.body.contains("/dashboard?token="), "{}", reply.body);
        assert!(!reply.body.contains("s3cret"), "the token never echoes");
        let reply = send(
            &server,
            Method::GET,
            path,
            &[("cookie", "pressure_admin_token=s3cret%2Fto%20ken")],
        )
        .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path} with a cookie");
    }
    let reply = send(
        &server,
        Method::GET,
        "/admin/pressure/summary",
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);

    // The assets.
    let script = server.get("/dashboard/app.js").await;
    assert_eq!(script.status, StatusCode::OK);
    assert_eq!(
        header_of(&script, header::CONTENT_TYPE),
        "text/javascript; charset=utf-8"
    );
    assert!(script.body.contains("/admin/pressure/events"));
    assert!(script.body.contains("/admin/pressure/summary"));
    let style = server.get("/dashboard/style.css").await;
    assert_eq!(style.status, StatusCode::OK);
    assert_eq!(header_of(&style, header::CONTENT_TYPE), "text/css; charset=utf-8");

    server.shutdown().await;
}
