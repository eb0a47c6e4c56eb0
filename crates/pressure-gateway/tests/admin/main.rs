//! The admin listener over real sockets: stats JSON, `/metrics` parsed as
//! Prometheus text, tenant aggregation, the bearer token, 404/405 bodies and
//! `/healthz` (including `degraded` when Redis goes away).

mod dashboard;

use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pressure_core::{
    AcquireOptions, Acquisition, LimitTemplate, Limits, MemoryBackend, Permit, ResourceBroker, ResourceConfig,
};
use pressure_gateway::backend::{AnyBackend, Broker};
use pressure_gateway::{admin_router as router, AdminState};
use pressure_gateway::{GatewayMetrics, Layer};
use pressure_redis::{FailureMode, RedisBackend, RedisConfig};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

// ---------------------------------------------------------------- harness

struct Server {
    addr: SocketAddr,
    client: Client<HttpConnector, Empty<Bytes>>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(state: AdminState) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, router(state))
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        let client = Client::builder(TokioExecutor::new()).build_http();
        Self {
            addr,
            client,
            stop,
            task,
        }
    }

    async fn request(&self, method: Method, path: &str, auth: Option<&str>) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        if let Some(a) = auth {
            req = req.header(header::AUTHORIZATION, a);
        }
        let req = req.body(Empty::<Bytes>::new()).expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(5), self.client.request(req))
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

    async fn get(&self, path: &str) -> Reply {
        self.request(Method::GET, path, None).await
    }

    async fn shutdown(self) {
        drop(self.client);
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("server stops")
            .expect("server task")
            .expect("server io");
    }
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn json(&self) -> Value {
        assert!(
            self.content_type().starts_with("application/json"),
            "content-type {:?} of {}",
            self.content_type(),
            self.body
        );
        serde_json::from_str(&self.body).expect("JSON body")
    }
}

fn memory_broker() -> Broker {
    ResourceBroker::builder(AnyBackend::Memory(MemoryBackend::new())).build()
}

fn state(broker: Broker, metrics: Arc<GatewayMetrics>, token: Option<&str>) -> AdminState {
    AdminState {
        broker,
        metrics,
        token: token.map(str::to_owned),
        redis: None,
        llm: None,
        control: None,
    }
}

async fn take(broker: &Broker, resource: &str) -> Option<Permit<AnyBackend>> {
    match broker
        .try_acquire(resource, AcquireOptions::default())
        .await
        .expect("registered")
    {
        Acquisition::Granted(p) => Some(p),
        Acquisition::Denied(_) => None,
    }
}

// ------------------------------------------------ Prometheus text parser

type Labels = Vec<(String, String)>;

/// Samples of a Prometheus text (0.0.4) page, by (name, sorted labels).
/// Panics on anything the format does not allow.
fn parse_prometheus(text: &str) -> BTreeMap<(String, Labels), f64> {
    fn valid_name(n: &str) -> bool {
        let mut chars = n.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    fn valid_label(n: &str) -> bool {
        valid_name(n) && !n.contains(':')
    }
    fn number(v: &str) -> Option<f64> {
        match v {
            "+Inf" => Some(f64::INFINITY),
            "-Inf" => Some(f64::NEG_INFINITY),
            "NaN" => Some(f64::NAN),
            _ => v.parse().ok(),
        }
    }

    assert!(text.ends_with('\n'), "page ends with a newline");
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut sampled: HashSet<String> = HashSet::new();
    let mut samples = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let at = format!("line {}: {line:?}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.trim_start();
            if comment == "EOF" {
                assert_eq!(i + 1, lines.len(), "# EOF only at the very end; {at}");
            } else if let Some(rest) = comment.strip_prefix("HELP ") {
                let name = rest.split(' ').next().unwrap_or("");
                assert!(valid_name(name), "HELP name; {at}");
                assert!(helps.insert(name.to_owned()), "second HELP; {at}");
            } else if let Some(rest) = comment.strip_prefix("TYPE ") {
                let parts: Vec<&str> = rest.split(' ').collect();
                assert_eq!(parts.len(), 2, "TYPE name type; {at}");
                assert!(valid_name(parts[0]), "TYPE name; {at}");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&parts[1]),
                    "TYPE kind; {at}"
                );
                assert!(!sampled.contains(parts[0]), "TYPE after samples; {at}");
                assert!(
                    types.insert(parts[0].to_owned(), parts[1].to_owned()).is_none(),
                    "second TYPE; {at}"
                );
            }
            continue;
        }
        // name{label="value",...} value [timestamp]
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        assert!(valid_name(name), "metric name; {at}");
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let end = loop {
                // label name
                let start = chars.peek().map(|&(j, _)| j).expect("label or }");
                if body[start..].starts_with('}') {
                    break start + 1;
                }
                let eq = body[start..].find('=').expect("label=") + start;
                let key = &body[start..eq];
                assert!(valid_label(key), "label name {key:?}; {at}");
                while chars.peek().is_some_and(|&(j, _)| j <= eq) {
                    chars.next();
                }
                assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "quoted value; {at}");
                let mut value = String::new();
                loop {
                    match chars.next().expect("closing quote").1 {
                        '"' => break,
                        '\\' => match chars.next().expect("escape").1 {
                            '\\' => value.push('\\'),
                            '"' => value.push('"'),
                            'n' => value.push('\n'),
                            c => panic!("bad escape \\{c}; {at}"),
                        },
                        '\n' => panic!("raw newline in a label value; {at}"),
                        c => value.push(c),
                    }
                }
                labels.push((key.to_owned(), value));
                match chars.next().expect(", or }") {
                    (_, ',') => {}
                    (j, '}') => break j + 1,
                    (_, c) => panic!("unexpected {c:?} after a label; {at}"),
                }
            };
            rest = &body[end..];
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        assert!(rest.starts_with(' '), "space before the value; {at}");
        assert!(matches!(fields.len(), 1 | 2), "value [timestamp]; {at}");
        let value = number(fields[0]).unwrap_or_else(|| panic!("numeric value; {at}"));
        if let Some(ts) = fields.get(1) {
            assert!(ts.parse::<i64>().is_ok(), "timestamp; {at}");
        }
        // In 0.0.4 a counter or gauge sample carries its family's name.
        assert!(
            types.contains_key(name),
            "sample {name} has no TYPE of its own name; {at}"
        );
        let mut keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), labels.len(), "duplicate label; {at}");
        sampled.insert(name.to_owned());
        labels.sort();
        assert!(
            samples.insert((name.to_owned(), labels), value).is_none(),
            "duplicate series; {at}"
        );
    }
    samples
}

fn sample(samples: &BTreeMap<(String, Labels), f64>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut key: Labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    key.sort();
    samples.get(&(name.to_owned(), key)).copied()
}

fn series_of<'a>(samples: &'a BTreeMap<(String, Labels), f64>, name: &str) -> Vec<&'a Labels> {
    samples
        .keys()
        .filter(|(n, _)| n == name)
        .map(|(_, l)| l)
        .collect()
}

// ------------------------------------------------------------------ tests

const ROUTE: &str = "gateway:route:webhooks";
const QUEUE: &str = "llm:openai:gpt";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_metrics_report_the_broker() {
    let broker = memory_broker();
    broker
        .register_limit(
            ROUTE,
            Limits::default()
                .requests_per_minute(2)
                .max_concurrent_requests(10),
        )
        .expect("limit resource");
    broker
        .register(
            QUEUE,
            ResourceConfig::new(Limits::default().max_concurrent_requests(3)),
        )
        .expect("queue resource");
    let template = LimitTemplate::new(&Limits::default().requests_per_minute(1)).expect("template");
    broker
        .lazy_limit("gateway:tenant:a", &template)
        .expect("tenant a");
    broker
        .lazy_limit("gateway:tenant:b", &template)
        .expect("tenant b");

    // route: 2 granted (held), 1 denied; queue: 1 granted (held);
    // tenants: 1 granted + 2 denied each.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(take(&broker, ROUTE).await.expect("within the limit"));
    }
    assert!(take(&broker, ROUTE).await.is_none(), "third request of 2/min");
    held.push(take(&broker, QUEUE).await.expect("queue has room"));
    for tenant in ["gateway:tenant:a", "gateway:tenant:b"] {
        assert!(take(&broker, tenant).await.is_some());
        assert!(take(&broker, tenant).await.is_none());
        assert!(take(&broker, tenant).await.is_none());
    }

    let metrics = Arc::new(GatewayMetrics::new());
    metrics.allowed(Layer::PreAuth);
    metrics.allowed(Layer::PreAuth);
    metrics.allowed(Layer::Tenant);
    metrics.denied(ROUTE, Layer::PreAuth);
    for t in ["gateway:tenant:a", "gateway:tenant:b", "gateway:tenant:a"] {
        metrics.denied(t, Layer::Tenant);
    }
    metrics.unauthorized("invalid");
    metrics.bypassed("websocket");
    metrics.bypassed("sse");
    metrics.upstream_error("timeout");

    let server = Server::start(state(broker.clone(), Arc::clone(&metrics), None)).await;

    // ---- the LLM page needs gateway.llm
    let reply = server.get("/admin/pressure/llm").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.json()["error"]["type"], "no_llm");

    // ---- stats
    let reply = server.get("/admin/pressure/stats").await;
    assert_eq!(reply.status, StatusCode::OK);
    let stats = reply.json();
    let resources = stats["resources"].as_array().expect("resources array");
    let ids: Vec<&str> = resources
        .iter()
        .map(|r| r["resource"].as_str().expect("id"))
        .collect();
    assert_eq!(
        ids,
        [
            "gateway:route:webhooks",
            "gateway:tenant:a",
            "gateway:tenant:b",
            QUEUE
        ]
    );
    let by_id = |id: &str| resources.iter().find(|r| r["resource"] == id).expect("resource");
    let route = by_id(ROUTE);
    assert_eq!(route["kind"], "limit");
    assert_eq!(route["allowed"], 2);
    assert_eq!(route["denied"], 1);
    assert_eq!(route["active"], 2);
    assert_eq!(route["lazy"], false);
    assert_eq!(route["limits"]["requestsPerMinute"], 2);
    // A limit resource has no queue: null, not zero, and present.
    assert_eq!(route.get("queued"), Some(&Value::Null));
    assert_eq!(route.get("waitTimeMs"), Some(&Value::Null));
    let queue = by_id(QUEUE);
    assert_eq!(queue["kind"], "queue");
    assert_eq!(queue["queued"], 0);
    assert_eq!(queue["active"], 1);
    let tenant = by_id("gateway:tenant:a");
    assert_eq!(tenant["kind"], "limit");
    assert_eq!(tenant["lazy"], true);
    assert_eq!(tenant["active"], Value::Null);
    assert_eq!(tenant["denied"], 2);

    // ---- metrics
    let reply = server.get("/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply.content_type().starts_with("text/plain; version=0.0.4"),
        "{}",
        reply.content_type()
    );
    let m = parse_prometheus(&reply.body);
    let s = |name: &str, labels: &[(&str, &str)]| {
        sample(&m, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", reply.body))
    };
    // gateway counters
    assert_eq!(s("pressure_gateway_allowed_total", &[("layer", "pre_auth")]), 2.0);
    assert_eq!(s("pressure_gateway_allowed_total", &[("layer", "tenant")]), 1.0);
    assert_eq!(
        s(
            "pressure_gateway_denied_total",
            &[("resource", ROUTE), ("layer", "pre_auth")]
        ),
        1.0
    );
    assert_eq!(
        s(
            "pressure_gateway_denied_total",
            &[("resource", "gateway:tenant:*"), ("layer", "tenant")]
        ),
        3.0
    );
    assert_eq!(series_of(&m, "pressure_gateway_denied_total").len(), 2);
    assert_eq!(
        s("pressure_gateway_unauthorized_total", &[("reason", "invalid")]),
        1.0
    );
    assert_eq!(
        s("pressure_gateway_bypassed_total", &[("kind", "websocket")]),
        1.0
    );
    assert_eq!(s("pressure_gateway_bypassed_total", &[("kind", "sse")]), 1.0);
    assert_eq!(
        s("pressure_gateway_upstream_errors_total", &[("kind", "timeout")]),
        1.0
    );
    // broker numbers, tenants folded into one series
    assert_eq!(s("pressure_resource_allowed_total", &[("resource", ROUTE)]), 2.0);
    assert_eq!(s("pressure_resource_denied_total", &[("resource", ROUTE)]), 1.0);
    assert_eq!(s("pressure_resource_allowed_total", &[("resource", QUEUE)]), 1.0);
    assert_eq!(s("pressure_resource_denied_total", &[("resource", QUEUE)]), 0.0);
    assert_eq!(
        s(
            "pressure_resource_allowed_total",
            &[("resource", "gateway:tenant:*")]
        ),
        2.0
    );
    assert_eq!(
        s(
            "pressure_resource_denied_total",
            &[("resource", "gateway:tenant:*")]
        ),
        4.0
    );
    assert_eq!(
        s(
            "pressure_backend_errors_total",
            &[("resource", "gateway:tenant:*")]
        ),
        0.0
    );
    assert_eq!(series_of(&m, "pressure_resource_denied_total").len(), 3);
    assert!(
        !reply.body.contains("gateway:tenant:a") && !reply.body.contains("gateway:tenant:b"),
        "no per-tenant series"
    );
    assert_eq!(s("pressure_active_permits", &[("resource", ROUTE)]), 2.0);
    assert_eq!(s("pressure_active_permits", &[("resource", QUEUE)]), 1.0);
    assert_eq!(
        series_of(&m, "pressure_active_permits").len(),
        2,
        "tenants have no concurrency limit"
    );
    assert_eq!(s("pressure_queue_queued", &[("resource", QUEUE)]), 0.0);
    assert_eq!(
        series_of(&m, "pressure_queue_queued").len(),
        1,
        "queue resources only"
    );
    assert!(!reply.body.contains("pressure_redis_"), "no Redis configured");

    // Released permits show at the next scrape.
    drop(held);
    let m = parse_prometheus(&server.get("/metrics").await.body);
    assert_eq!(
        sample(&m, "pressure_active_permits", &[("resource", ROUTE)]),
        Some(0.0)
    );
    assert_eq!(
        sample(&m, "pressure_active_permits", &[("resource", QUEUE)]),
        Some(0.0)
    );

    // ---- health, unknown routes, wrong methods
    let reply = server.get("/healthz").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json(), serde_json::json!({"status": "ok"}));

    let reply = server.get("/admin/nope").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.json()["error"]["type"], "not_found");

    let reply = server.request(Method::POST, "/metrics", None).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.json()["error"]["type"], "method_not_allowed");

    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_guards_everything_but_healthz() {
    let broker = memory_broker();
    broker
        .register_limit(ROUTE, Limits::default().requests_per_second(5))
        .expect("limit");
    let server = Server::start(state(
        broker,
        Arc::new(GatewayMetrics::new()),
        Some("s3cret-token"),
    ))
    .await;

    for path in ["/admin/pressure/stats", "/admin/pressure/summary", "/metrics"] {
        for auth in [
            None,
            Some("Bearer wrong"),
            Some("Bearer s3cret-toke"),
            Some("Bearer s3cret-token2"),
            Some("Basic s3cret-token"),
            Some("s3cret-token"),
            Some("Bearer "),
        ] {
            let reply = server.request(Method::GET, path, auth).await;
            assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path} with {auth:?}");
            let challenge = reply
                .headers
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            assert!(
                challenge.starts_with("Bearer"),
                "{path} with {auth:?}: {challenge:?}"
            );
            assert_eq!(reply.json()["error"]["type"], "unauthorized");
            assert!(!reply.body.contains("s3cret"), "the token never echoes");
        }
        for auth in ["Bearer s3cret-token", "bearer s3cret-token"] {
            let reply = server.request(Method::GET, path, Some(auth)).await;
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "{path} with {auth:?}: {}",
                reply.body
            );
        }
    }
    let reply = server
        .request(Method::GET, "/metrics", Some("Bearer s3cret-token"))
        .await;
    parse_prometheus(&reply.body);

    let reply = server.get("/healthz").await;
    assert_eq!(reply.status, StatusCode::OK, "healthz needs no token");
    assert_eq!(reply.json(), serde_json::json!({"status": "ok"}));

    server.shutdown().await;
}

// --------------------------------------------------------- Redis health

/// A TCP proxy in front of Redis that can be cut, to take Redis away from
/// one backend without touching the server.
struct CuttableProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
    conns: Arc<parking_lot::Mutex<Vec<JoinHandle<()>>>>,
}

impl CuttableProxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        let conns: Arc<parking_lot::Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let tracked = Arc::clone(&conns);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tracked.lock().push(tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                }));
            }
        });
        Self { addr, task, conns }
    }

    /// Closes every connection and stops accepting new ones.
    fn cut(&self) {
        self.task.abort();
        for c in self.conns.lock().drain(..) {
            c.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_redis_degraded_but_stays_up() {
    // A redis-server of the test's own: a plain redis:// address for the
    // proxy, whatever PRESSURE_REDIS_URL points the other tests at.
    let own = pressure_testkit::RedisServer::start();
    let proxy = CuttableProxy::start(format!("127.0.0.1:{}", own.port())).await;
    let backend = RedisBackend::connect(RedisConfig {
        url: format!("redis://{}", proxy.addr),
        failure_mode: FailureMode::Closed,
        // Generous: the cut proxy fails calls at once; a slow machine must
        // not fail the first, healthy one.
        timeout_ms: 1_000,
        key_prefix: format!("pressure-admin-test-{}", std::process::id()),
        ..RedisConfig::default()
    })
    .await
    .expect("connect through the proxy");
    let broker: Broker = ResourceBroker::builder(AnyBackend::Redis(backend.clone())).build();
    broker
        .register_limit("gateway:service:rest", Limits::default().requests_per_minute(100))
        .expect("limit");
    assert!(
        take(&broker, "gateway:service:rest").await.is_some(),
        "Redis answers"
    );

    let server = Server::start(AdminState {
        broker: broker.clone(),
        metrics: Arc::new(GatewayMetrics::new()),
        token: None,
        redis: Some(backend.clone()),
        llm: None,
        control: None,
    })
    .await;
    let reply = server.get("/healthz").await;
    assert_eq!(reply.json(), serde_json::json!({"status": "ok"}));
    let m = parse_prometheus(&server.get("/metrics").await.body);
    assert_eq!(sample(&m, "pressure_redis_healthy", &[]), Some(1.0));
    assert_eq!(sample(&m, "pressure_redis_transitions_total", &[]), Some(0.0));
    assert_eq!(sample(&m, "pressure_redis_cancelled_calls_total", &[]), Some(0.0));
    assert_eq!(sample(&m, "pressure_redis_cancel_releases_total", &[]), Some(0.0));

    proxy.cut();
    let t0 = tokio::time::Instant::now();
    while backend.status().healthy {
        assert!(t0.elapsed() < Duration::from_secs(5), "the backend never noticed");
        let _ = broker
            .try_acquire("gateway:service:rest", AcquireOptions::default())
            .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let reply = server.get("/healthz").await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "the gateway is up; the failure mode applies"
    );
    let health = reply.json();
    assert_eq!(
        (&health["status"], &health["redis"]),
        (&serde_json::json!("degraded"), &serde_json::json!("unavailable"))
    );
    assert!(
        health["url"].as_str().is_some_and(|u| u.starts_with("redis://")),
        "{health}"
    );
    assert!(
        health["error"].as_str().is_some_and(|e| !e.is_empty()),
        "the real cause: {health}"
    );
    let m = parse_prometheus(&server.get("/metrics").await.body);
    assert_eq!(sample(&m, "pressure_redis_healthy", &[]), Some(0.0));
    assert!(sample(&m, "pressure_redis_failures_total", &[]).is_some_and(|v| v >= 1.0));
    assert!(sample(&m, "pressure_redis_transitions_total", &[]).is_some_and(|v| v >= 1.0));
    assert!(sample(&m, "pressure_redis_fallbacks_total", &[]).is_some());

    // The dashboard's summary says the same, and still answers.
    let summary = server.get("/admin/pressure/summary").await.json();
    let h = &summary["health"];
    assert_eq!(
        (&h["status"], &h["backend"]),
        (&serde_json::json!("degraded"), &serde_json::json!("redis"))
    );
    assert_eq!(h["redis"]["healthy"], false, "{summary}");
    assert_eq!(h["redis"]["url"], health["url"], "{summary}");
    assert!(
        h["redis"]["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{summary}"
    );
    assert_eq!(summary["resources"][0]["resource"], "gateway:service:rest");

    server.shutdown().await;
}
