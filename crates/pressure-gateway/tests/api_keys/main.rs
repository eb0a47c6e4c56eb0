//! API keys (`gateway.auth.apiKeys`) end to end, over real sockets: a key
//! names its tenant by `x-api-key` or a dot-less `Authorization: Bearer`,
//! is charged to that tenant's resource (shared by every key of it), and
//! to its own limit all or nothing; an unknown or revoked key is `401`
//! `invalid_api_key`; a JWT still works beside keys; and no log line,
//! error body or upstream request ever carries a key.

use super::support;

use axum::routing::get;
use http::{header, HeaderMap, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::Duration;
use support::{bounded, get_request, hs256_auth, token, Capture, Reply, TestGateway, TestUpstream};

const ACME_CI: &str = "sk-test-acme-ci-5f0c2b9e4d7a1c3e8b6f";
const ACME_BATCH: &str = "sk-test-acme-batch-9a8b7c6d5e4f3a2b1c0d";
const GLOBEX: &str = "sk-test-globex-0f1e2d3c4b5a69788796";
const UNKNOWN: &str = "sk-test-unknown-11223344556677889900";

const ACME: &str = "gateway:tenant:acme";

/// `printf %s "$key" | sha256sum`.
fn sha256(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An `apiKeys` entry.
fn entry(key: &str, tenant: &str, name: Option<&str>, limits: Option<Value>) -> Value {
    let mut e = json!({ "sha256": sha256(key), "tenant": tenant });
    if let Some(n) = name {
        e["name"] = json!(n);
    }
    if let Some(l) = limits {
        e["limits"] = l;
    }
    e
}

/// The three test keys: two of `acme` (`ci`, `batch`), one of `globex`
/// (unnamed); `batch_limits` are the `batch` key's own.
fn keys(batch_limits: Option<Value>) -> Value {
    json!([
        entry(ACME_CI, "acme", Some("ci"), None),
        entry(ACME_BATCH, "acme", Some("batch"), batch_limits),
        entry(GLOBEX, "globex", None, None),
    ])
}

/// An upstream whose `/headers` answers the credential headers it got
/// (absent: `null`), beside the demo routes. Every test starts here, so
/// the global subscriber is installed first of all.
async fn upstream() -> TestUpstream {
    support::quiet_global_subscriber();
    async fn headers(h: HeaderMap) -> axum::Json<Value> {
        let of = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
        axum::Json(json!({ "authorization": of("authorization"), "xApiKey": of("x-api-key") }))
    }
    TestUpstream::start(support::test_routes().route("/headers", get(headers))).await
}

/// A gateway in front of `up` with `auth` and per-tenant `tenant_limits`.
fn config(up: &TestUpstream, auth: Value, tenant_limits: Value) -> Value {
    let mut cfg = support::demo_config(
        up,
        json!({ "perTenant": { "enabled": true, "limits": tenant_limits } }),
    );
    cfg["auth"] = auth;
    cfg
}

/// `GET path` with one header.
async fn get_with(gw: &TestGateway, path: &str, name: &'static str, value: &str) -> Reply {
    let mut req = get_request(&gw.url(path));
    req.headers_mut()
        .insert(name, value.parse().expect("header value"));
    Reply::read(gw.send(req).await).await
}

/// `GET path` with `x-api-key: key`.
async fn with_key(gw: &TestGateway, path: &str, key: &str) -> Reply {
    get_with(gw, path, "x-api-key", key).await
}

/// `GET path` with `Authorization: Bearer credential`.
async fn with_bearer(gw: &TestGateway, path: &str, credential: &str) -> Reply {
    get_with(gw, path, "authorization", &format!("Bearer {credential}")).await
}

/// `reply` is the 401 of an unknown key, and does not echo it.
fn assert_invalid_key(reply: &Reply, key: &str) {
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{reply:?}");
    assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
    let body = reply.json();
    assert_eq!(body["error"]["type"], "unauthorized", "{body}");
    assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
    let text = String::from_utf8_lossy(&reply.body);
    assert!(!text.contains(key), "the body echoes the key: {text}");
}

/// `pressure_gateway_unauthorized_total{reason}` from `/metrics`.
async fn unauthorized(gw: &TestGateway, reason: &str) -> u64 {
    let metrics = gw.admin_get("/metrics").await;
    let prefix = format!("pressure_gateway_unauthorized_total{{reason=\"{reason}\"}} ");
    String::from_utf8_lossy(&metrics.body)
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_names_its_tenant_by_either_header_and_never_reaches_the_upstream() {
    bounded(async {
        let up = upstream().await;
        let auth = json!({ "apiKeys": keys(None) });
        let gw = TestGateway::start(config(&up, auth, json!({ "requestsPerMinute": 100 }))).await;

        let by_header = with_key(&gw, "/headers", ACME_CI).await;
        assert_eq!(by_header.status, StatusCode::OK, "{by_header:?}");
        assert_eq!(
            by_header.json(),
            json!({ "authorization": null, "xApiKey": null }),
            "the key is removed before the request is forwarded"
        );
        let by_bearer = with_bearer(&gw, "/headers", ACME_BATCH).await;
        assert_eq!(by_bearer.status, StatusCode::OK, "{by_bearer:?}");
        assert_eq!(
            by_bearer.json(),
            json!({ "authorization": null, "xApiKey": null })
        );

        let acme = gw.stats(ACME).await;
        assert_eq!((acme.allowed, acme.denied), (2, 0), "both keys charge acme");
        assert!(acme.lazy, "a key's tenant is registered lazily, as a JWT's");
        assert_eq!(with_key(&gw, "/", GLOBEX).await.status, StatusCode::OK);
        assert_eq!(gw.stats("gateway:tenant:globex").await.allowed, 1);

        // Without a credential: anonymous (auth not required), no tenant.
        assert_eq!(gw.get("/").await.status, StatusCode::OK);
        assert_eq!(gw.stats(ACME).await.allowed, 2);

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_are_401_invalid_api_key() {
    bounded(async {
        let up = upstream().await;
        let auth = json!({ "required": true, "apiKeys": keys(None) });
        let gw = TestGateway::start(config(&up, auth, json!({ "requestsPerMinute": 100 }))).await;

        assert_invalid_key(&with_key(&gw, "/", UNKNOWN).await, UNKNOWN);
        assert_invalid_key(&with_bearer(&gw, "/", UNKNOWN).await, UNKNOWN);
        // Without `jwt`, a dotted bearer credential is a key too (unknown).
        assert_invalid_key(&with_bearer(&gw, "/", "a.b.c").await, "a.b.c");
        // A known key with a byte more or less is another key.
        let longer = format!("{ACME_CI}x");
        assert_invalid_key(&with_key(&gw, "/", &longer).await, &longer);
        assert_invalid_key(&with_key(&gw, "/", &ACME_CI[1..]).await, &ACME_CI[1..]);
        assert_eq!(unauthorized(&gw, "invalid_api_key").await, 5);

        // Required: no credential at all is 401 `missing`.
        let none = gw.get("/").await;
        assert_eq!(none.status, StatusCode::UNAUTHORIZED);
        assert_eq!(none.json()["error"]["code"], "missing");
        // An Authorization that is not Bearer is refused, not skipped.
        let basic = get_with(&gw, "/", "authorization", "Basic dXNlcjpwYXNz").await;
        assert_eq!(basic.status, StatusCode::UNAUTHORIZED);

        assert_eq!(with_key(&gw, "/", ACME_CI).await.status, StatusCode::OK);
        let acme = gw.stats(ACME).await;
        assert_eq!(
            (acme.allowed, acme.denied),
            (1, 0),
            "refused keys charge no tenant"
        );
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_keys_of_one_tenant_share_its_quota() {
    bounded(async {
        let up = upstream().await;
        let auth = json!({ "apiKeys": keys(None) });
        let gw = TestGateway::start(config(&up, auth, json!({ "requestsPerMinute": 5 }))).await;

        let mut seen = Vec::new();
        for i in 0..6 {
            let key = if i % 2 == 0 { ACME_CI } else { ACME_BATCH };
            seen.push(with_key(&gw, "/", key).await);
        }
        let statuses: Vec<u16> = seen.iter().map(|r| r.status.as_u16()).collect();
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
        let denied = seen[5].json();
        assert_eq!(denied["error"]["resource"], ACME, "{denied}");
        assert_eq!(denied["error"]["dimension"], "requestsPerMinute", "{denied}");
        // Either key is refused now; another tenant's key is not.
        assert_eq!(
            with_bearer(&gw, "/", ACME_CI).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(with_key(&gw, "/", GLOBEX).await.status, StatusCode::OK);
        let acme = gw.stats(ACME).await;
        assert_eq!((acme.allowed, acme.denied), (5, 2));

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_own_limit_refuses_while_its_tenant_has_room() {
    bounded(async {
        let up = upstream().await;
        let auth = json!({ "apiKeys": keys(Some(json!({ "requestsPerMinute": 2 }))) });
        let gw = TestGateway::start(config(&up, auth, json!({ "requestsPerMinute": 10 }))).await;

        let statuses = [
            with_key(&gw, "/", ACME_BATCH).await,
            with_key(&gw, "/", ACME_BATCH).await,
            with_key(&gw, "/", ACME_BATCH).await,
        ];
        assert_eq!(
            statuses.iter().map(|r| r.status.as_u16()).collect::<Vec<_>>(),
            [200, 200, 429]
        );
        let denied = statuses[2].json();
        assert_eq!(denied["error"]["resource"], "gateway:apikey:batch", "{denied}");
        // The key's refusal took nothing of its tenant's quota.
        let acme = gw.stats(ACME).await;
        assert_eq!((acme.allowed, acme.denied), (2, 0));
        let batch = gw.stats("gateway:apikey:batch").await;
        assert_eq!((batch.allowed, batch.denied), (2, 1));
        // The tenant's other key still has the tenant's room.
        assert_eq!(with_key(&gw, "/", ACME_CI).await.status, StatusCode::OK);
        assert_eq!(gw.stats(ACME).await.allowed, 3);

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// All or nothing, with concurrency: a request the tenant refuses gives
/// back what the key's own limit took (its lease and its rate count), and
/// one the key refuses never touches the tenant; every slot is free once
/// the streams end. On `backend` (the `gateway.backend` section).
async fn no_slot_leaks_on(backend: Value) {
    const BATCH: &str = "gateway:apikey:batch";
    bounded(async {
        let up = upstream().await;
        let own = json!({ "maxConcurrentRequests": 1, "requestsPerMinute": 100 });
        let auth = json!({ "apiKeys": keys(Some(own)) });
        let mut cfg = config(
            &up,
            auth,
            json!({ "maxConcurrentRequests": 1, "requestsPerMinute": 100 }),
        );
        cfg["backend"] = backend;
        let gw = TestGateway::start(cfg).await;
        let open = |key: &str| {
            let mut req = get_request(&gw.url("/forever"));
            req.headers_mut()
                .insert("x-api-key", key.parse().expect("header"));
            gw.send(req)
        };

        // The tenant's one slot is held by the other key: the key grants,
        // the tenant refuses, and the key's grant is given back.
        let ci_stream = open(ACME_CI).await;
        assert_eq!(ci_stream.status(), StatusCode::OK);
        let refused = with_key(&gw, "/", ACME_BATCH).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.json()["error"]["resource"], ACME);
        // On Redis the key's lease is released by a call settled after the
        // 429 went out: wait for it (bounded), as for the streams below.
        let batch = gw.await_idle(BATCH, Duration::from_secs(5)).await;
        assert_eq!(batch.active, Some(0), "{batch:?}");
        assert_eq!(batch.usage.get("requestsPerMinute"), Some(&0), "{batch:?}");
        assert_eq!(batch.usage.get("maxConcurrentRequests"), Some(&0), "{batch:?}");
        drop(ci_stream);
        gw.await_idle(ACME, Duration::from_secs(5)).await;

        // The key's one slot is held by its own stream: the key refuses,
        // and its tenant is not charged at all.
        let batch_stream = open(ACME_BATCH).await;
        assert_eq!(batch_stream.status(), StatusCode::OK);
        let before = gw.stats(ACME).await;
        let refused = with_key(&gw, "/", ACME_BATCH).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.json()["error"]["resource"], BATCH);
        let after = gw.stats(ACME).await;
        assert_eq!((after.allowed, after.denied), (before.allowed, before.denied));
        assert_eq!(after.active, Some(1), "only the stream holds the tenant");
        drop(batch_stream);

        gw.await_idle(ACME, Duration::from_secs(5)).await;
        gw.await_idle(BATCH, Duration::from_secs(5)).await;
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_either_limit_leaks_no_slot_of_the_other() {
    no_slot_leaks_on(json!({ "type": "memory" })).await;
}

/// The same on Redis: the refund of the key's grant is settled in the
/// store the fleet shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_either_limit_leaks_no_slot_of_the_other_on_redis() {
    let redis = pressure_testkit::RedisServer::start();
    no_slot_leaks_on(json!({ "type": "redis", "url": redis.url(), "timeoutMs": 1000 })).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_removed_by_a_reload_is_refused_right_after() {
    bounded(async {
        let dir = tempfile::tempdir().expect("scratch dir");
        let file = dir.path().join("gateway.json");
        let up = upstream().await;
        let auth = json!({ "apiKeys": keys(Some(json!({ "requestsPerMinute": 50 }))) });
        let gw =
            TestGateway::start_from_file(config(&up, auth, json!({ "requestsPerMinute": 100 })), &file).await;
        assert_eq!(with_key(&gw, "/", ACME_BATCH).await.status, StatusCode::OK);
        assert_eq!(with_key(&gw, "/", ACME_CI).await.status, StatusCode::OK);

        // Revoke `batch` in the file and reload (what SIGHUP runs).
        let mut cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read config")).expect("JSON");
        let remaining: Vec<Value> = cfg["gateway"]["auth"]["apiKeys"]
            .as_array()
            .expect("apiKeys")
            .iter()
            .filter(|k| k["name"] != "batch")
            .cloned()
            .collect();
        cfg["gateway"]["auth"]["apiKeys"] = json!(remaining);
        std::fs::write(&file, cfg.to_string()).expect("write config");
        let outcome = gw.gateway().reload().expect("reload");
        assert_eq!(outcome.removed, ["gateway:apikey:batch"]);

        assert_invalid_key(&with_key(&gw, "/", ACME_BATCH).await, ACME_BATCH);
        assert_invalid_key(&with_bearer(&gw, "/", ACME_BATCH).await, ACME_BATCH);
        assert_eq!(with_key(&gw, "/", ACME_CI).await.status, StatusCode::OK);
        assert!(
            !gw.resource_ids()
                .await
                .contains(&"gateway:apikey:batch".to_owned()),
            "the revoked key's resource goes"
        );

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwt_still_works_beside_keys_and_authorization_wins() {
    bounded(async {
        let up = upstream().await;
        let mut auth = hs256_auth();
        auth["apiKeys"] = keys(None);
        let gw = TestGateway::start(config(&up, auth, json!({ "requestsPerMinute": 100 }))).await;

        let jwt = token("initech");
        let by_jwt = with_bearer(&gw, "/headers", &jwt).await;
        assert_eq!(by_jwt.status, StatusCode::OK);
        assert_eq!(
            by_jwt.json()["authorization"],
            format!("Bearer {jwt}"),
            "a JWT is forwarded as before"
        );
        assert_eq!(gw.stats("gateway:tenant:initech").await.allowed, 1);
        // A dot-less bearer credential is a key.
        assert_eq!(with_bearer(&gw, "/", ACME_CI).await.status, StatusCode::OK);
        assert_eq!(gw.stats(ACME).await.allowed, 1);
        // A dotted one is a JWT: a bad one is an invalid token, not a key.
        let bad = with_bearer(&gw, "/", "not.a.jwt").await;
        assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
        assert_eq!(bad.json()["error"]["code"], "invalid");

        // Both: Authorization wins, x-api-key is not read (nor removed).
        let mut req = get_request(&gw.url("/headers"));
        req.headers_mut().insert(
            header::AUTHORIZATION,
            format!("Bearer {jwt}").parse().expect("header"),
        );
        req.headers_mut()
            .insert("x-api-key", UNKNOWN.parse().expect("header"));
        let both = Reply::read(gw.send(req).await).await;
        assert_eq!(both.status, StatusCode::OK, "{both:?}");
        assert_eq!(both.json()["xApiKey"], UNKNOWN);
        assert_eq!(gw.stats("gateway:tenant:initech").await.allowed, 2);
        assert_eq!(gw.stats(ACME).await.allowed, 1);

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// The gateway runs on this test's thread, so the thread-local capture
/// sees every line it writes: access lines, denials, 401s. None carries a
/// key; the access line names the key by its label.
#[tokio::test(flavor = "current_thread")]
async fn keys_never_reach_the_logs() {
    let capture = Capture::default();
    let _guard = capture.install();
    bounded(async {
        let up = upstream().await;
        let auth = json!({ "apiKeys": keys(Some(json!({ "requestsPerMinute": 1 }))) });
        let mut cfg = config(&up, auth, json!({ "requestsPerMinute": 100 }));
        cfg["accessLog"] = json!({ "enabled": true });
        let gw = TestGateway::start(cfg).await;

        assert_eq!(with_key(&gw, "/", ACME_CI).await.status, StatusCode::OK);
        assert_eq!(with_bearer(&gw, "/", GLOBEX).await.status, StatusCode::OK);
        assert_eq!(with_key(&gw, "/", ACME_BATCH).await.status, StatusCode::OK);
        assert_eq!(
            with_key(&gw, "/", ACME_BATCH).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_invalid_key(&with_key(&gw, "/", UNKNOWN).await, UNKNOWN);
        assert_invalid_key(&with_bearer(&gw, "/", UNKNOWN).await, UNKNOWN);
        gw.stop().await;
        up.stop().await;
    })
    .await;

    let lines = capture.lines();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    for key in [ACME_CI, ACME_BATCH, GLOBEX, UNKNOWN] {
        assert!(!text.contains(key), "a log line carries {key}:\n{text}");
        assert!(
            !text.contains(&sha256(key)),
            "a log line carries a whole hash:\n{text}"
        );
    }
    let access: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "pressure::access")
        .collect();
    assert_eq!(access.len(), 6, "{text}");
    let key_ids: Vec<&str> = access
        .iter()
        .map(|l| l["fields"]["key_id"].as_str().unwrap_or("-"))
        .collect();
    let globex_id = &sha256(GLOBEX)[..8];
    assert_eq!(key_ids, ["ci", globex_id, "batch", "batch", "-", "-"]);
    let denial = lines
        .iter()
        .find(|l| l["target"] == "pressure::denial")
        .unwrap_or_else(|| panic!("the key's 429 is logged:\n{text}"));
    assert_eq!(denial["fields"]["resource"], "gateway:apikey:batch", "{denial}");
    assert_eq!(denial["fields"]["namespace_id"], "acme", "{denial}");
}
