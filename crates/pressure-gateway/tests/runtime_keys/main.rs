//! API keys issued at runtime (`gateway.auth.runtimeKeys`,
//! `/admin/pressure/keys`), through real gateways:
//!
//! * one gateway in memory: a key issued by the admin API names its tenant
//!   at once (charged to it), is never shown again (nor its digest), takes
//!   new limits live (usage kept), is `401 key_expired` once expired, `403
//!   use_case_not_allowed` outside its use cases, and `401` once revoked; a
//!   config key works beside;
//! * hostile bodies, paths and queries: each a clear 4xx in the admin
//!   error shape, nothing stored, nothing echoed;
//! * two gateways on one Redis (`pressure-testkit`'s own `redis-server`):
//!   a key issued on one works on the other within 1 s; revoked on one, it
//!   is refused by both within 1 s, while a request already in flight
//!   with it finishes `200`.

use super::support;

use axum::routing::get;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use pressure_testkit::RedisServer;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Once;
use std::time::Duration;
use support::{bounded, Reply, TestGateway, TestUpstream};
use tokio::time::Instant;

const ADMIN_TOKEN_ENV: &str = "PRESSURE_GATEWAY_TESTS_RUNTIME_KEYS_ADMIN_TOKEN";
const ADMIN_TOKEN: &str = "runtime-keys-admin-token";
const CONFIG_KEY: &str = "sk-test-config-key-0123456789abcdef";

/// How long another gateway may take to learn of a key or its revocation.
const PROPAGATION_BOUND: Duration = Duration::from_secs(1);

fn admin_token_env() -> &'static str {
    static SET: Once = Once::new();
    SET.call_once(|| std::env::set_var(ADMIN_TOKEN_ENV, ADMIN_TOKEN));
    ADMIN_TOKEN_ENV
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A gateway on `backend` issuing runtime keys, with one config key (of
/// tenant `cfg`) and every tenant at 100 requests a minute.
fn config(up: &TestUpstream, backend: Value) -> Value {
    json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        "backend": backend,
        "auth": {
            "required": true,
            "runtimeKeys": true,
            "apiKeys": [{ "sha256": sha256(CONFIG_KEY), "tenant": "cfg", "name": "cfgkey" }],
        },
        "admin": { "tokenEnv": admin_token_env() },
        "pressure": { "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 100 } } },
    })
}

/// [`config`] in memory with two use cases that park their requests
/// (`202`, no provider needed).
fn memory_config(up: &TestUpstream) -> Value {
    let mut cfg = config(up, json!({ "type": "memory" }));
    let park = json!({ "chain": [{ "manualQueue": true }] });
    cfg["llm"] = json!({ "useCases": { "later": park, "other": park } });
    cfg
}

/// `method path` on `gw`'s admin listener with `body` and, unless `None`,
/// the admin token.
async fn admin(gw: &TestGateway, method: Method, path: &str, body: &str, token: Option<&str>) -> Reply {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", gw.admin))
        .header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

/// Issues a key on `gw`; its document (with `key`).
async fn create(gw: &TestGateway, body: Value) -> Value {
    let r = admin(
        gw,
        Method::POST,
        "/admin/pressure/keys",
        &body.to_string(),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    r.json()
}

fn key_path(id: &str) -> String {
    format!("/admin/pressure/keys/{id}")
}

/// `method` of `/admin/pressure/keys/{id}`.
async fn on_key(gw: &TestGateway, method: Method, id: &str, body: &str) -> Reply {
    admin(gw, method, &key_path(id), body, Some(ADMIN_TOKEN)).await
}

/// `GET path` through `gw`'s proxy with `x-api-key: key`.
async fn with_key(gw: &TestGateway, path: &str, key: &str) -> Reply {
    let mut req = support::get_request(&gw.url(path));
    req.headers_mut()
        .insert("x-api-key", key.parse().expect("header"));
    Reply::read(gw.send(req).await).await
}

/// `GET path` through `gw`'s proxy with `Authorization: Bearer key`.
async fn with_bearer(gw: &TestGateway, path: &str, key: &str) -> Reply {
    let mut req = support::get_request(&gw.url(path));
    let value = format!("Bearer {key}").parse().expect("header");
    req.headers_mut().insert("authorization", value);
    Reply::read(gw.send(req).await).await
}

/// A chat completion of `model` through `gw` with `key`.
async fn chat(gw: &TestGateway, key: &str, model: &str) -> Reply {
    let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
    let req = Request::post(gw.url("/v1/chat/completions"))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

/// Requests with `key` on `gw` until one answers `want`, for at most
/// `bound`; the statuses seen before.
async fn until(gw: &TestGateway, key: &str, want: StatusCode, bound: Duration) -> Vec<StatusCode> {
    let deadline = Instant::now() + bound;
    let mut seen = Vec::new();
    loop {
        let status = with_key(gw, "/", key).await.status;
        if status == want {
            return seen;
        }
        seen.push(status);
        assert!(Instant::now() < deadline, "no {want} within {bound:?}: {seen:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The `used` of `dimension` in a document's `usage`.
fn used(doc: &Value, dimension: &str) -> Option<u64> {
    doc["usage"]
        .as_array()?
        .iter()
        .find(|row| row["dimension"] == dimension)?["used"]
        .as_u64()
}

/// `text` holds neither `key` nor its digest.
fn assert_secret_free(text: &str, key: &str) {
    assert!(!text.contains(key), "the key is shown: {text}");
    assert!(!text.contains(&sha256(key)), "the digest is shown: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_key_works_changes_expires_and_dies_in_memory() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(memory_config(&up)).await;

        let doc = create(
            &gw,
            json!({ "tenant": "acme", "name": "ci", "limits": { "requestsPerMinute": 1 } }),
        )
        .await;
        let key = doc["key"].as_str().expect("the key").to_owned();
        let id = doc["id"].as_str().expect("an id").to_owned();
        assert!(key.starts_with("sk-pr-") && !key.contains('.'), "{key}");
        assert!(doc.get("sha256").is_none(), "{doc}");
        assert_eq!(doc["resource"], "gateway:apikey:ci");

        assert_eq!(with_key(&gw, "/", &key).await.status, StatusCode::OK);
        let tenant = admin(
            &gw,
            Method::GET,
            "/admin/pressure/tenants/acme/limits",
            "",
            Some(ADMIN_TOKEN),
        )
        .await;
        assert_eq!(
            used(&tenant.json(), "requestsPerMinute"),
            Some(1),
            "charged to its tenant"
        );
        let refused = with_key(&gw, "/", &key).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.json()["error"]["resource"], "gateway:apikey:ci");

        // Raised live, the usage kept.
        let r = on_key(&gw, Method::PATCH, &id, r#"{"limits":{"requestsPerMinute":3}}"#).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        assert_eq!(with_key(&gw, "/", &key).await.status, StatusCode::OK);
        let shown = on_key(&gw, Method::GET, &id, "").await;
        assert_eq!(shown.status, StatusCode::OK);
        assert_secret_free(&String::from_utf8_lossy(&shown.body), &key);
        let shown = shown.json();
        assert_eq!(used(&shown, "requestsPerMinute"), Some(2), "{shown}");
        assert_eq!(shown["limits"]["requestsPerMinute"], 3);
        let list = admin(
            &gw,
            Method::GET,
            "/admin/pressure/keys?tenant=acme",
            "",
            Some(ADMIN_TOKEN),
        )
        .await;
        assert_secret_free(&String::from_utf8_lossy(&list.body), &key);
        assert_eq!(list.json()["keys"][0]["id"], id.as_str());

        // The config's keys work beside.
        assert_eq!(with_key(&gw, "/", CONFIG_KEY).await.status, StatusCode::OK);

        // Use cases.
        let scoped = create(&gw, json!({ "tenant": "acme", "useCases": ["later"] })).await;
        let scoped = scoped["key"].as_str().expect("the key");
        assert_eq!(chat(&gw, scoped, "later").await.status, StatusCode::ACCEPTED);
        let outside = chat(&gw, scoped, "other").await;
        assert_eq!(outside.status, StatusCode::FORBIDDEN, "{:?}", outside.body);
        assert_eq!(outside.json()["error"]["code"], "use_case_not_allowed");
        assert_eq!(
            chat(&gw, &key, "other").await.status,
            StatusCode::ACCEPTED,
            "no list: every use case"
        );
        let models = with_bearer(&gw, "/v1/models", scoped).await.json();
        assert_eq!(models["data"].as_array().map(Vec::len), Some(1), "{models}");
        assert_eq!(models["data"][0]["id"], "later");
        let hidden = with_bearer(&gw, "/v1/models/other", scoped).await;
        assert_eq!(hidden.status, StatusCode::FORBIDDEN);
        let all = with_bearer(&gw, "/v1/models", CONFIG_KEY).await.json();
        assert_eq!(all["data"].as_array().map(Vec::len), Some(2), "{all}");

        // Expiry: two seconds from now, then 401 key_expired.
        let soon = (time::OffsetDateTime::now_utc() + time::Duration::seconds(2))
            .format(&time::format_description::well_known::Rfc3339)
            .expect("a date");
        let expiring = create(&gw, json!({ "tenant": "expiry", "expiresAt": soon })).await;
        let expiring = expiring["key"].as_str().expect("the key");
        let before = until(&gw, expiring, StatusCode::UNAUTHORIZED, Duration::from_secs(10)).await;
        // Admitted until then (or refused by its tenant's 100 a minute).
        assert!(
            before
                .iter()
                .all(|s| matches!(*s, StatusCode::OK | StatusCode::TOO_MANY_REQUESTS)),
            "{before:?}"
        );
        let expired = with_key(&gw, "/", expiring).await;
        assert_eq!(expired.json()["error"]["code"], "key_expired");

        // Revoked: the next request is an unknown key's 401.
        let r = on_key(&gw, Method::DELETE, &id, "").await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        let gone = with_key(&gw, "/", &key).await;
        assert_eq!(gone.status, StatusCode::UNAUTHORIZED);
        assert_eq!(gone.json()["error"]["code"], "invalid_api_key");
        assert_eq!(
            on_key(&gw, Method::GET, &id, "").await.status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            on_key(&gw, Method::DELETE, &id, "").await.status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            on_key(&gw, Method::PATCH, &id, "{}").await.status,
            StatusCode::NOT_FOUND
        );

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_and_store_nothing() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(memory_config(&up)).await;
        let kept = create(&gw, json!({ "tenant": "acme", "name": "kept" })).await;
        let kept_id = kept["id"].as_str().expect("an id").to_owned();
        let kept_key = kept["key"].as_str().expect("the key").to_owned();

        let huge = format!(r#"{{"tenant":"{}"}}"#, "a".repeat(100 * 1024));
        let bodies: Vec<(String, StatusCode, Option<&str>)> = vec![
            ("nope".into(), StatusCode::BAD_REQUEST, Some("(body)")),
            ("[]".into(), StatusCode::BAD_REQUEST, Some("(body)")),
            ("{}".into(), StatusCode::BAD_REQUEST, Some("(body)")),
            (r#"{"tenant":5}"#.into(), StatusCode::BAD_REQUEST, Some("tenant")),
            (
                r#"{"tenant":"a","sha256":"00"}"#.into(),
                StatusCode::BAD_REQUEST,
                Some("sha256"),
            ),
            (r#"{"tenant":""}"#.into(), StatusCode::BAD_REQUEST, Some("tenant")),
            (
                json!({ "tenant": "a".repeat(257) }).to_string(),
                StatusCode::BAD_REQUEST,
                Some("tenant"),
            ),
            (
                r#"{"tenant":"a","name":"no spaces"}"#.into(),
                StatusCode::BAD_REQUEST,
                Some("name"),
            ),
            (
                r#"{"tenant":"a","name":"kept"}"#.into(),
                StatusCode::CONFLICT,
                None,
            ),
            (
                r#"{"tenant":"a","name":"cfgkey"}"#.into(),
                StatusCode::CONFLICT,
                None,
            ),
            (
                r#"{"tenant":"a","useCases":["nope"]}"#.into(),
                StatusCode::BAD_REQUEST,
                Some("useCases[0]"),
            ),
            (
                r#"{"tenant":"a","useCases":"later"}"#.into(),
                StatusCode::BAD_REQUEST,
                Some("useCases"),
            ),
            (
                r#"{"tenant":"a","expiresAt":"yesterday"}"#.into(),
                StatusCode::BAD_REQUEST,
                Some("expiresAt"),
            ),
            (
                r#"{"tenant":"a","expiresAt":"2001-01-01T00:00:00Z"}"#.into(),
                StatusCode::BAD_REQUEST,
                Some("expiresAt"),
            ),
            (
                r#"{"tenant":"a","limits":{"requestsPerMinute":0}}"#.into(),
                StatusCode::BAD_REQUEST,
                Some("limits.requestsPerMinute"),
            ),
            (
                r#"{"tenant":"a","metadata":[1]}"#.into(),
                StatusCode::BAD_REQUEST,
                Some("metadata"),
            ),
            (
                json!({ "tenant": "a", "metadata": { "k": "x".repeat(5000) } }).to_string(),
                StatusCode::BAD_REQUEST,
                Some("metadata"),
            ),
            (huge, StatusCode::PAYLOAD_TOO_LARGE, None),
        ];
        for (body, want, path) in &bodies {
            let r = admin(&gw, Method::POST, "/admin/pressure/keys", body, Some(ADMIN_TOKEN)).await;
            let shown = &body[..body.len().min(60)];
            assert_eq!(r.status, *want, "{shown}: {:?}", r.body);
            let e = r.json();
            assert!(e["error"]["message"].is_string(), "{e}");
            if let Some(p) = path {
                assert_eq!(e["error"]["path"], *p, "{shown}: {e}");
            }
        }
        let r = admin(
            &gw,
            Method::POST,
            "/admin/pressure/keys",
            r#"{"tenant":"a"}"#,
            None,
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        let r = admin(
            &gw,
            Method::POST,
            "/admin/pressure/keys",
            r#"{"tenant":"a"}"#,
            Some("wrong"),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);

        let long = "a".repeat(10_000);
        for id in [
            "..",
            "%2E%2E",
            "%00",
            "key_%00",
            long.as_str(),
            "%E2%9C%93",
            "%FF",
            "key_0123456789ABCDEF",
            "key_0123456789abcdef",
            "key_0123456789abcdef%20",
        ] {
            for method in [Method::GET, Method::PATCH, Method::DELETE] {
                let r = on_key(&gw, method.clone(), id, r#"{"limits":null}"#).await;
                let shown = &id[..id.len().min(40)];
                assert!(r.status.is_client_error(), "{method} {shown}: {}", r.status);
                assert!(r.json()["error"]["message"].is_string(), "{method} {shown}");
                assert!(!String::from_utf8_lossy(&r.body).contains(&long), "echoed");
            }
        }
        for bad in [
            r#"{"secret":1}"#,
            r#"{"limits":{"requestsPerMinute":-1}}"#,
            r#"{"expiresAt":5}"#,
            "nope",
        ] {
            let r = on_key(&gw, Method::PATCH, &kept_id, bad).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {:?}", r.body);
        }
        for query in ["?limit=abc", "?what=1", "?limit=-1"] {
            let r = admin(
                &gw,
                Method::GET,
                &format!("/admin/pressure/keys{query}"),
                "",
                Some(ADMIN_TOKEN),
            )
            .await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}");
        }

        // Nothing of that was stored or changed.
        let list = admin(&gw, Method::GET, "/admin/pressure/keys", "", Some(ADMIN_TOKEN))
            .await
            .json();
        let ids: Vec<&str> = list["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .filter_map(|k| k["id"].as_str())
            .collect();
        assert_eq!(ids, [kept_id.as_str()], "{list}");
        assert_eq!(list["keys"][0]["limits"], Value::Null);
        assert_eq!(with_key(&gw, "/", &kept_key).await.status, StatusCode::OK);

        gw.stop().await;

        // Without runtimeKeys, none can be issued.
        let mut off = config(&up, json!({ "type": "memory" }));
        off["auth"]["runtimeKeys"] = json!(false);
        let gw = TestGateway::start(off).await;
        let r = admin(
            &gw,
            Method::POST,
            "/admin/pressure/keys",
            r#"{"tenant":"a"}"#,
            Some(ADMIN_TOKEN),
        )
        .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert!(r.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("runtimeKeys")));
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// An upstream whose `/hold` tells the test it arrived and answers only
/// once released; everything else answers at once.
async fn holding_upstream() -> (
    TestUpstream,
    tokio::sync::mpsc::UnboundedReceiver<()>,
    tokio::sync::watch::Sender<bool>,
) {
    let (arrived, arrivals) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (release, released) = tokio::sync::watch::channel(false);
    let hold = move || {
        let (arrived, mut released) = (arrived.clone(), released.clone());
        async move {
            let _ = arrived.send(());
            let _ = released.wait_for(|r| *r).await;
            "released"
        }
    };
    let router = support::test_routes().route("/hold", get(hold));
    (TestUpstream::start(router).await, arrivals, release)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_issued_on_one_gateway_works_on_the_other_and_is_revoked_on_both() {
    bounded(async {
        let redis = RedisServer::start();
        let (up, mut arrivals, release) = holding_upstream().await;
        let backend =
            json!({ "type": "redis", "url": redis.url(), "keyPrefix": "rtkeys", "timeoutMs": 1000 });
        let a = TestGateway::start(config(&up, backend.clone())).await;
        let b = TestGateway::start(config(&up, backend)).await;

        let doc = create(
            &a,
            json!({ "tenant": "acme", "name": "fleet", "limits": { "requestsPerMinute": 50 } }),
        )
        .await;
        let key = doc["key"].as_str().expect("the key").to_owned();
        let id = doc["id"].as_str().expect("an id").to_owned();
        assert_eq!(with_key(&a, "/", &key).await.status, StatusCode::OK);
        let before = until(&b, &key, StatusCode::OK, PROPAGATION_BOUND).await;
        assert!(
            before.iter().all(|s| *s == StatusCode::UNAUTHORIZED),
            "{before:?}"
        );
        // B shows it too, with the fleet's usage of its limit.
        let shown = on_key(&b, Method::GET, &id, "").await;
        assert_eq!(shown.status, StatusCode::OK);
        assert!(used(&shown.json(), "requestsPerMinute").is_some_and(|n| n >= 2));

        // A change on B applies on A.
        let r = on_key(&b, Method::PATCH, &id, r#"{"limits":{"requestsPerMinute":40}}"#).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let deadline = Instant::now() + PROPAGATION_BOUND;
        loop {
            let doc = on_key(&a, Method::GET, &id, "").await.json();
            if doc["limits"]["requestsPerMinute"] == 40 {
                break;
            }
            assert!(Instant::now() < deadline, "the change did not reach A: {doc}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        // A request in flight on A when B revokes the key finishes.
        let client = a.client();
        let mut req = support::get_request(&a.url("/hold"));
        req.headers_mut()
            .insert("x-api-key", key.parse().expect("header"));
        let in_flight = tokio::spawn(async move { client.request(req).await.map(|r| r.status()) });
        tokio::time::timeout(Duration::from_secs(10), arrivals.recv())
            .await
            .expect("the held request reached the upstream")
            .expect("the upstream runs");
        let r = on_key(&b, Method::DELETE, &id, "").await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        assert_eq!(
            with_key(&b, "/", &key).await.status,
            StatusCode::UNAUTHORIZED,
            "B at once"
        );
        let before = until(&a, &key, StatusCode::UNAUTHORIZED, PROPAGATION_BOUND).await;
        assert!(
            before
                .iter()
                .all(|s| matches!(*s, StatusCode::OK | StatusCode::TOO_MANY_REQUESTS)),
            "{before:?}"
        );
        release.send_replace(true);
        let finished = in_flight.await.expect("joined").expect("answered");
        assert_eq!(finished, StatusCode::OK, "the request in flight finishes");
        assert_eq!(
            on_key(&a, Method::GET, &id, "").await.status,
            StatusCode::NOT_FOUND
        );
        a.stop().await;
        b.stop().await;
        up.stop().await;
    })
    .await;
}
