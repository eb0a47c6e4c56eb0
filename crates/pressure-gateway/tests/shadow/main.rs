//! Shadow limits (`"shadow": true` on a limits object) end to end, over
//! real sockets, per layer and per backend: a shadow limit of `N` per
//! window sent `N + K` requests admits all of them, counts exactly `K`
//! would-be refusals (`shadowDenied`, `pressure_shadow_denied_total`), and
//! consumes nothing for them (usage stays `N`); the same limit enforcing
//! refuses exactly `K` of the same requests in the same run; a reload that
//! switches the limit to enforcing keeps its counters (the next request is
//! refused, the window being full); a live tenant override can switch it.

use super::harness::{with_resources, Decisions};
use super::nested::Store;
use super::support::{self, bounded, hs256_auth, token, Capture, Reply, TestGateway, TestUpstream};
use bytes::Bytes;
use http_body_util::Full;
use pressure_testkit::{RedisCluster, RedisServer};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The limit of every shadow resource here, per minute.
const N: u64 = 4;
/// Requests sent beyond it.
const K: u64 = 3;

/// A layer under test: where its limits object sits in the config, which
/// resource it makes, and how a request reaches it.
#[derive(Debug, Clone, Copy)]
enum Layer {
    Route,
    Service,
    Tenant,
    /// An API key's own limit beside its tenant's (a two-level nest).
    ApiKey,
}

const KEY: &str = "pk_shadow_0123456789abcdef";

fn sha256(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Layer {
    /// The gateway section with this layer's limit (`shadow` as given) on
    /// `store`.
    fn config(self, up: &TestUpstream, store: &Store, prefix: &str, shadow: bool) -> Value {
        let limits = json!({ "requestsPerMinute": N, "shadow": shadow });
        let pressure = match self {
            Layer::Route => json!({ "perRoute": [
                { "resource": "gateway:route:shadow", "pathPrefix": "/shadow", "limits": limits },
                { "resource": "gateway:route:real", "pathPrefix": "/real",
                  "limits": { "requestsPerMinute": N } },
            ] }),
            Layer::Service => json!({ "perService": { "demo": limits } }),
            Layer::Tenant => json!({ "perTenant": { "enabled": true, "limits": limits } }),
            Layer::ApiKey => {
                json!({ "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 1000 } } })
            }
        };
        let mut cfg = support::demo_config(up, pressure);
        cfg["backend"] = store.backend(prefix);
        match self {
            Layer::Tenant => cfg["auth"] = hs256_auth(),
            Layer::ApiKey => {
                cfg["auth"] = json!({ "apiKeys": [{
                    "sha256": sha256(KEY), "tenant": "acme", "name": "shadowed", "limits": limits
                }] });
            }
            _ => {}
        }
        cfg
    }

    /// The JSON pointer of the limits' `shadow` key in the config file.
    fn pointer(self) -> &'static str {
        match self {
            Layer::Route => "/gateway/pressure/perRoute/0/limits/shadow",
            Layer::Service => "/gateway/pressure/perService/demo/shadow",
            Layer::Tenant => "/gateway/pressure/perTenant/limits/shadow",
            Layer::ApiKey => "/gateway/auth/apiKeys/0/limits/shadow",
        }
    }

    fn resource(self) -> &'static str {
        match self {
            Layer::Route => "gateway:route:shadow",
            Layer::Service => "gateway:service:demo",
            Layer::Tenant => "gateway:tenant:t1",
            Layer::ApiKey => "gateway:apikey:shadowed",
        }
    }

    async fn send(self, gw: &TestGateway) -> Reply {
        let (path, header) = match self {
            Layer::Route => ("/shadow/x", None),
            Layer::Service => ("/api/x", None),
            Layer::Tenant => ("/t", Some(("authorization", format!("Bearer {}", token("t1"))))),
            Layer::ApiKey => ("/k", Some(("x-api-key", KEY.to_owned()))),
        };
        let mut req = support::get_request(&gw.url(path));
        if let Some((name, value)) = header {
            req.headers_mut()
                .insert(name, http::HeaderValue::from_str(&value).expect("header value"));
        }
        Reply::read(gw.send(req).await).await
    }
}

/// `n` requests one after the other: their statuses.
async fn send_n(layer: Layer, gw: &TestGateway, n: u64) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(layer.send(gw).await.status.as_u16());
    }
    out
}

/// The whole contract for one layer on one store.
async fn shadow_layer(layer: Layer, store: Store, prefix: &str) {
    let dir = tempfile::tempdir().expect("scratch dir");
    let file = dir.path().join("gateway.json");
    let up = TestUpstream::demo().await;
    let gw = TestGateway::start_from_file(layer.config(&up, &store, prefix, true), &file).await;
    let statuses = send_n(layer, &gw, N + K).await;
    assert!(
        statuses.iter().all(|s| *s == 200),
        "{layer:?}: all admitted: {statuses:?}"
    );
    let s = gw.stats(layer.resource()).await;
    assert!(s.limits.shadow, "{layer:?}: {s:?}");
    assert_eq!(
        s.shadow_denied, K,
        "{layer:?}: the would-be refusals, exactly: {s:?}"
    );
    assert_eq!(
        (s.allowed, s.denied),
        (N, K),
        "{layer:?}: decided as a real limit: {s:?}"
    );
    assert_eq!(
        s.usage.get("requestsPerMinute"),
        Some(&N),
        "{layer:?}: nothing consumed by the shadow denials: {s:?}"
    );
    let metrics = gw.admin_get("/metrics").await;
    let page = String::from_utf8_lossy(&metrics.body).into_owned();
    let label = support_label(layer.resource());
    let line =
        format!("pressure_shadow_denied_total{{resource=\"{label}\",dimension=\"requestsPerMinute\"}} {K}");
    assert!(page.contains(&line), "{layer:?}: {line} missing:\n{page}");
    let admin = gw.admin_get("/admin/pressure/stats").await;
    let listed = admin.json()["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["resource"] == layer.resource())
        .cloned()
        .unwrap_or_else(|| panic!("{layer:?}: not in the admin stats"));
    assert_eq!(listed["shadowDenied"], json!(K), "{listed}");
    assert_eq!(listed["limits"]["shadow"], json!(true), "{listed}");
    // The dashboard's summary carries the would-be refusals too.
    let summary = gw.admin_get("/admin/pressure/summary").await.json();
    let shown = match layer {
        Layer::Tenant => summary["tenants"]["shadowDenied"].clone(),
        _ => summary["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["resource"] == layer.resource())
            .map_or(Value::Null, |r| r["shadowDenied"].clone()),
    };
    assert_eq!(shown, json!(K), "{layer:?}: {summary}");

    if let Layer::Route = layer {
        // The same requests on the same limit enforcing, in the same run.
        let real: Vec<u16> = {
            let mut out = Vec::new();
            for _ in 0..N + K {
                out.push(gw.get("/real/x").await.status.as_u16());
            }
            out
        };
        assert_eq!(
            real.iter().filter(|s| **s == 429).count(),
            usize::try_from(K).expect("small")
        );
        let r = gw.stats("gateway:route:real").await;
        assert_eq!((r.allowed, r.denied, r.shadow_denied), (N, K, 0), "{r:?}");
    }

    // Reload: the limit enforces from now on, its counters kept.
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read config")).expect("JSON");
    *cfg.pointer_mut(layer.pointer()).expect("the shadow key") = json!(false);
    std::fs::write(&file, cfg.to_string()).expect("write config");
    gw.gateway().reload().expect("reload");
    let refused = layer.send(&gw).await;
    assert_eq!(
        refused.status, 429,
        "{layer:?}: the window is still full after the reload"
    );
    let s = gw.stats(layer.resource()).await;
    assert!(!s.limits.shadow, "{layer:?}: {s:?}");
    assert_eq!(
        (s.allowed, s.denied, s.shadow_denied),
        (N, K + 1, K),
        "{layer:?}: kept: {s:?}"
    );
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&N), "{layer:?}: {s:?}");

    gw.stop().await;
    up.stop().await;
}

/// The metrics label of a resource (tenants folded).
fn support_label(resource: &str) -> &str {
    if resource.starts_with("gateway:tenant:") {
        "gateway:tenant:*"
    } else {
        resource
    }
}

async fn cluster() -> Store {
    Store::Cluster(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .expect("cluster starts"),
    )
}

macro_rules! per_store {
    ($($name:ident => $layer:expr),* $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    bounded(shadow_layer($layer, Store::Memory, "")).await;
                }
            )*
        }
        mod redis {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let prefix = concat!("shadow-", stringify!($name));
                    bounded(shadow_layer($layer, Store::Redis(RedisServer::start()), prefix)).await;
                }
            )*
        }
        mod cluster {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let prefix = concat!("shadow-", stringify!($name));
                    bounded(shadow_layer($layer, cluster().await, prefix)).await;
                }
            )*
        }
    };
}

per_store! {
    route => Layer::Route,
    service => Layer::Service,
    tenant => Layer::Tenant,
    api_key => Layer::ApiKey,
}

/// The denial log line of a shadow denial says so (current-thread runtime:
/// the capture is the thread's subscriber).
#[tokio::test]
async fn the_denial_line_says_shadow() {
    let capture = Capture::default();
    let _guard = capture.install();
    let up = TestUpstream::demo().await;
    let gw = TestGateway::start(Layer::Route.config(&up, &Store::Memory, "", true)).await;
    let statuses = send_n(Layer::Route, &gw, N + 1).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let lines: Vec<Value> = capture
        .lines()
        .into_iter()
        .filter(|l| l["fields"]["message"] == "request denied")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let f = &lines[0]["fields"];
    assert_eq!(f["shadow"], json!(true), "{f}");
    assert_eq!(f["resource"], "gateway:route:shadow", "{f}");
    assert_eq!(f["dimension"], "requestsPerMinute", "{f}");
    gw.stop().await;
    up.stop().await;
}

/// A tenant's limits switched to shadow by a live override admit, counted;
/// switched back, the usage kept refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_override_switches_a_tenant_to_shadow_and_back() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(Layer::Tenant.config(&up, &Store::Memory, "", false)).await;
        let before = send_n(Layer::Tenant, &gw, N + 1).await;
        assert_eq!(before.iter().filter(|s| **s == 429).count(), 1, "{before:?}");
        let put = put_limits(&gw, "t1", json!({ "requestsPerMinute": N, "shadow": true })).await;
        assert!(put.status.is_success(), "{:?}", put.json());
        let during = send_n(Layer::Tenant, &gw, K).await;
        assert!(during.iter().all(|s| *s == 200), "{during:?}");
        let s = gw.stats("gateway:tenant:t1").await;
        assert_eq!((s.allowed, s.denied, s.shadow_denied), (N, 1 + K, K), "{s:?}");
        assert_eq!(s.usage.get("requestsPerMinute"), Some(&N), "{s:?}");
        let put = put_limits(&gw, "t1", json!({ "requestsPerMinute": N })).await;
        assert!(put.status.is_success(), "{:?}", put.json());
        assert_eq!(Layer::Tenant.send(&gw).await.status, 429);
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

async fn put_limits(gw: &TestGateway, tenant: &str, limits: Value) -> Reply {
    let req = http::Request::put(format!(
        "http://{}/admin/pressure/tenants/{tenant}/limits",
        gw.admin
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(Full::new(Bytes::from(limits.to_string())))
    .expect("request");
    Reply::read(gw.send(req).await).await
}

/// The decision API: a shadow resource answers `allowed` to every acquire
/// and counts the would-be refusals, nothing consumed; the same limit
/// enforcing refuses exactly `K`.
async fn the_decision_api_admits_a_shadow_resource(store: Store) {
    let mut section = with_resources(json!({
        "jobs": { "requestsPerMinute": N, "shadow": true },
        "real": { "requestsPerMinute": N },
    }));
    section["backend"] = store.backend("shadow-decisions");
    let d = Decisions::start(section).await;
    for _ in 0..N + K {
        let ok = d.acquire(json!({ "resource": "jobs" })).await;
        assert_eq!(ok.status, 200, "{:?}", ok.json());
        assert_eq!(ok.json()["allowed"], true);
    }
    let mut refused = 0;
    for _ in 0..N + K {
        if d.acquire(json!({ "resource": "real" })).await.status == 429 {
            refused += 1;
        }
    }
    assert_eq!(refused, K, "the same limit enforcing refuses exactly K");
    let s = d.gw.stats("jobs").await;
    assert_eq!((s.allowed, s.denied, s.shadow_denied), (N, K, K), "{s:?}");
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&N), "{s:?}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_api_admits_a_shadow_resource_in_memory() {
    bounded(the_decision_api_admits_a_shadow_resource(Store::Memory)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_api_admits_a_shadow_resource_on_redis() {
    bounded(the_decision_api_admits_a_shadow_resource(Store::Redis(
        RedisServer::start(),
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_api_admits_a_shadow_resource_on_a_cluster() {
    bounded(async { the_decision_api_admits_a_shadow_resource(cluster().await).await }).await;
}

/// A model whose limits are in shadow mode: its limiter refuses past `N`
/// a minute, the attempts go anyway (every call answered by the model),
/// the would-be refusals counted, nothing consumed for them.
async fn a_shadow_model_limit_lets_the_attempts_go(store: Store) {
    let mock = super::llm::Mock::start().await;
    let mut section = super::llm::config(&mock, json!({}));
    section["llm"]["models"][0]["limits"] = json!({ "requestsPerMinute": N, "shadow": true });
    section["backend"] = store.backend("shadow-model");
    let gw = TestGateway::start(section).await;
    let body = json!({ "model": "support", "messages": [{ "role": "user", "content": "hello" }] });
    for _ in 0..N + K {
        let req = http::Request::post(gw.url("/v1/chat/completions"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let reply = Reply::read(gw.send(req).await).await;
        assert_eq!(reply.status, 200, "{:?}", reply.json());
    }
    assert_eq!(mock.hits_of("good"), usize::try_from(N + K).expect("small"));
    let s = gw
        .stats(&pressure_llm::reservation::resource_id("mock", "good"))
        .await;
    assert!(s.limits.shadow, "{s:?}");
    assert_eq!((s.allowed, s.denied, s.shadow_denied), (N, K, K), "{s:?}");
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&N), "{s:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_model_limit_lets_the_attempts_go_in_memory() {
    bounded(a_shadow_model_limit_lets_the_attempts_go(Store::Memory)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_model_limit_lets_the_attempts_go_on_redis() {
    bounded(a_shadow_model_limit_lets_the_attempts_go(Store::Redis(
        RedisServer::start(),
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_model_limit_lets_the_attempts_go_on_a_cluster() {
    bounded(async { a_shadow_model_limit_lets_the_attempts_go(cluster().await).await }).await;
}

/// With `rateLimitHeaders`, an admitted request past a shadow limit says
/// what enforcing would do: nothing remaining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ratelimit_header_shows_the_shadow_limit_spent() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let mut cfg = Layer::Route.config(&up, &Store::Memory, "", true);
        cfg["pressure"]["rateLimitHeaders"] = json!(true);
        let gw = TestGateway::start(cfg).await;
        let mut last = None;
        for _ in 0..=N {
            let reply = gw.get("/shadow/x").await;
            assert_eq!(reply.status, 200);
            last = reply.header("ratelimit").map(str::to_owned);
        }
        let header = last.expect("a RateLimit header");
        assert!(header.starts_with("\"requestsPerMinute\";r=0;"), "{header}");
        gw.stop().await;
        up.stop().await;
    })
    .await;
}
