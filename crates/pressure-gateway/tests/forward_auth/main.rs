//! Forward auth (`/v1/forward-auth`, docs/architecture.md#the-decision-service): the proxy's decision
//! for requests another proxy serves.
//!
//! * Directly over the decision listener: the headers each proxy sends,
//!   `204` with `RateLimit` headers, `429` (or `403` on request), a bad
//!   path `400`, the service token, and concurrency limits not charged.
//! * Behind REAL nginx (`auth_request`, with the `403` → `429` +
//!   `Retry-After` recipe of `docs/forward-auth.md`) and REAL Caddy
//!   (`forward_auth`), in front of a test upstream: route limits reach the
//!   client as `429` with `Retry-After`, tenants are separate, an invalid
//!   JWT is `401`, path tricks are charged to the normalised route. They
//!   skip (`PRESSURE_REQUIRE_NGINX`, `PRESSURE_REQUIRE_CADDY`) when the
//!   binary is missing (Debian packages `nginx`, `caddy`).

use super::{harness, support};

mod proxies;

use harness::{permit_of, Decisions};
use proxies::{find, FrontProxy, Kind};
use serde_json::{json, Value};
use std::net::SocketAddr;
use support::{bounded, hs256_auth, token, TestUpstream};

const ROUTE: &str = "gateway:route:webhooks";
const TOKEN_ENV: &str = "PRESSURE_GATEWAY_TESTS_FORWARD_AUTH_TOKEN";
const TOKEN: &str = "forward-auth-service-token-0123";

/// A gateway in front of `upstream` (never proxied to here): a route
/// `/webhooks` with 3 requests a minute and one concurrent slot, tenants
/// with 2 a minute, HS256 tokens optional, the decision token set.
fn section(upstream: &TestUpstream) -> Value {
    std::env::set_var(TOKEN_ENV, TOKEN);
    json!({
        "upstreams": { "app": { "url": upstream.url(), "pathPrefix": "/" } },
        "auth": hs256_auth(),
        "decisions": { "tokenEnv": TOKEN_ENV },
        "pressure": {
            "perRoute": [{
                "resource": ROUTE,
                "pathPrefix": "/webhooks",
                "limits": { "requestsPerMinute": 3, "maxConcurrentRequests": 1 },
            }],
            "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 2 } },
        },
    })
}

/// `/v1/forward-auth` asked directly with `headers` (the token added).
async fn ask(d: &Decisions, headers: &[(&str, &str)]) -> support::Reply {
    let mut all = vec![("x-pressure-token", TOKEN)];
    all.extend_from_slice(headers);
    d.post("/v1/forward-auth", &Value::Null, &all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_is_the_proxys_without_concurrency() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let d = Decisions::start(section(&up)).await;
        let bearer = format!("Bearer {TOKEN}");
        // Someone holds the route's only slot: forward auth does not check
        // (or take) concurrency, so it still passes on the rate.
        let held = permit_of(
            &d.post(
                "/v1/acquire",
                &json!({ "resource": ROUTE }),
                &[("authorization", &bearer)],
            )
            .await,
        );
        let ok = ask(
            &d,
            &[
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "/webhooks/github?x=1"),
            ],
        )
        .await;
        assert_eq!(ok.status, 204, "{:?}", ok.body);
        assert!(ok.body.is_empty());
        assert_eq!(
            ok.header("ratelimit-policy"),
            Some("\"requestsPerMinute\";q=3;w=60")
        );
        assert_eq!(ok.header("ratelimit"), Some("\"requestsPerMinute\";r=1;t=60"));
        let ok = ask(
            &d,
            &[
                ("x-original-method", "GET"),
                ("x-original-uri", "/x/../webhooks//a"),
            ],
        )
        .await;
        assert_eq!(ok.status, 204);
        let no = ask(&d, &[("x-original-uri", "/webhooks/b")]).await;
        assert_eq!(no.status, 429);
        assert!(no.header("retry-after").is_some());
        assert_eq!(no.json()["error"]["resource"], ROUTE);
        let forbidden = ask(
            &d,
            &[
                ("x-original-uri", "/webhooks/b"),
                ("x-pressure-deny-status", "403"),
            ],
        )
        .await;
        assert_eq!(forbidden.status, 403, "nginx's recipe");
        assert!(forbidden.header("retry-after").is_some());
        let s = d.gw.stats(ROUTE).await;
        assert_eq!((s.allowed, s.denied, s.active), (3, 2, Some(1)));
        assert_eq!(
            d.permit(&held, "release").await.status,
            401,
            "the API needs its token"
        );
        let released = d
            .post(
                &format!("/v1/permits/{held}/release"),
                &Value::Null,
                &[("authorization", &bearer)],
            )
            .await;
        assert_eq!(released.status, 204);

        // Refusals: a path the proxy refuses, a missing URI, a bad token,
        // a bad JWT; no token passes anonymously.
        assert_eq!(ask(&d, &[("x-forwarded-uri", "/a%2Fb")]).await.status, 400);
        assert_eq!(
            ask(&d, &[("x-forwarded-uri", "/%2e%2e/webhooks")]).await.status,
            400
        );
        assert_eq!(ask(&d, &[]).await.status, 400);
        let wrong = d
            .post(
                "/v1/forward-auth",
                &Value::Null,
                &[("x-forwarded-uri", "/api"), ("x-pressure-token", "nope")],
            )
            .await;
        assert_eq!(wrong.status, 401);
        let bad_jwt = ask(
            &d,
            &[("x-forwarded-uri", "/api"), ("authorization", "Bearer not.a.jwt")],
        )
        .await;
        assert_eq!(bad_jwt.status, 401);
        assert_eq!(ask(&d, &[("x-forwarded-uri", "/api")]).await.status, 204);
        d.stop().await;
        up.stop().await;
    })
    .await;
}

/// The upstream's address, for a proxy config.
fn addr_of(up: &TestUpstream) -> SocketAddr {
    up.url()
        .trim_start_matches("http://")
        .parse()
        .expect("upstream address")
}

/// The scenario behind a real `kind` proxy (module docs).
async fn behind(kind: Kind, test: &str) {
    let Some(binary) = find(kind.binary()) else {
        pressure_testkit::skip(
            test,
            kind.require_env(),
            &format!(
                "{} is not installed (Debian package {})",
                kind.binary(),
                kind.binary()
            ),
        );
        return;
    };
    let up = TestUpstream::demo().await;
    let d = Decisions::start(section(&up)).await;
    let proxy = FrontProxy::start(kind, &binary, d.addr, addr_of(&up), TOKEN).await;
    let logs = || proxy.logs();

    // Path tricks are charged to the normalised route: two pass, the
    // third is over the route's 3 a minute (one taken through the API).
    let bearer = format!("Bearer {TOKEN}");
    let held = permit_of(
        &d.post(
            "/v1/acquire",
            &json!({ "resource": ROUTE }),
            &[("authorization", &bearer)],
        )
        .await,
    );
    let first = proxy.get("/a/../webhooks/x", &[]).await;
    assert_eq!(first.status, 200, "{first:?}\n{}", logs());
    assert!(
        first.body.contains("webhooks/x"),
        "the upstream answered: {first:?}"
    );
    if kind == Kind::Nginx {
        // nginx's snippet passes the headers of a 2xx decision on; Caddy
        // copies a 2xx decision's headers into the upstream request only.
        assert_eq!(
            first.header("ratelimit"),
            Some("\"requestsPerMinute\";r=1;t=60"),
            "{first:?}"
        );
    }
    let second = proxy.get("//webhooks/y", &[]).await;
    assert_eq!(second.status, 200, "{second:?}\n{}", logs());
    let third = proxy.get("/webhooks/z", &[]).await;
    assert_eq!(third.status, 429, "{third:?}\n{}", logs());
    let retry: u64 = third
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After through {kind:?}: {third:?}"))
        .parse()
        .expect("Retry-After seconds");
    assert!((1..=61).contains(&retry), "{retry}");
    let s = d.gw.stats(ROUTE).await;
    assert_eq!((s.allowed, s.denied), (3, 1), "{s:?}");
    // An encoded dot is refused by pressure (400); nginx turns an auth
    // answer other than 2xx/401/403 into 500. Never through, never charged.
    let dot = proxy.get("/webhooks/%2e%2e/x", &[]).await;
    let refused = match kind {
        Kind::Nginx => 500,
        Kind::Caddy => 400,
    };
    assert_eq!(dot.status, refused, "{dot:?}");
    assert_eq!(d.gw.stats(ROUTE).await.allowed, 3);

    // Tenants are separate; an invalid JWT is 401.
    let a = format!("Bearer {}", token("tenant-a"));
    let b = format!("Bearer {}", token("tenant-b"));
    for _ in 0..2 {
        let r = proxy.get("/api/items", &[("Authorization", &a)]).await;
        assert_eq!(r.status, 200, "{r:?}\n{}", logs());
    }
    let over = proxy.get("/api/items", &[("Authorization", &a)]).await;
    assert_eq!(over.status, 429, "{over:?}");
    assert!(over.header("retry-after").is_some(), "{over:?}");
    assert_eq!(
        proxy.get("/api/items", &[("Authorization", &b)]).await.status,
        200
    );
    let ta = d.gw.stats("gateway:tenant:tenant-a").await;
    assert_eq!((ta.allowed, ta.denied), (2, 1));
    let invalid = proxy
        .get("/api/items", &[("Authorization", "Bearer not.a.jwt")])
        .await;
    assert_eq!(invalid.status, 401, "{invalid:?}");
    assert_eq!(
        proxy.get("/api/items", &[]).await.status,
        200,
        "no token: anonymous"
    );

    let _ = d
        .post(
            &format!("/v1/permits/{held}/release"),
            &Value::Null,
            &[("authorization", &bearer)],
        )
        .await;
    proxy.stop().await;
    d.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_real_nginx_auth_request() {
    bounded(behind(
        Kind::Nginx,
        "forward_auth::behind_real_nginx_auth_request",
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_real_caddy_forward_auth() {
    bounded(behind(
        Kind::Caddy,
        "forward_auth::behind_real_caddy_forward_auth",
    ))
    .await;
}
