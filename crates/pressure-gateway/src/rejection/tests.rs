use super::render::{gateway_body, respond, seconds_value};
use super::*;
use axum::body::Body;
use http::Response;
use http_body_util::BodyExt;
use serde_json::{json, Value};

async fn body(r: Response<Body>) -> Value {
    let bytes = r.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes).expect("json")
}

#[test]
fn retry_after_rounds_up() {
    assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1_000)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
    assert_eq!(retry_after_secs(Duration::ZERO), 1);
    assert_eq!(retry_after_secs(Duration::from_nanos(2_000_000_001)), 3);
    assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
}

#[tokio::test]
async fn the_direct_429_body_is_the_tree_renderers_bytes() {
    let cases = [
        ("gateway:route:webhooks-github", 960),
        ("gateway:tenant:\"quoted\" \\ back\nline ü", 0),
        ("", u64::from(u32::MAX)),
    ];
    // Every dimension: their names go into the body unescaped.
    let all = cases
        .iter()
        .flat_map(|&case| Dimension::ALL.iter().map(move |&dimension| (case, dimension)));
    for ((resource, wait_ms), dimension) in all {
        let r = Rejection::RateLimited(Box::new(RateLimited {
            resource: resource.to_owned(),
            layer: Layer::PreAuth,
            dimension,
            wait: Duration::from_millis(wait_ms),
            policy: Some((5, 60)),
            namespace_id: None,
            budget: None,
        }));
        let fast = r.render(Dialect::Gateway);
        assert_eq!(fast.status(), 429);
        let bytes = fast.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(
            std::str::from_utf8(&bytes).expect("utf-8"),
            gateway_body(&r.describe()).to_string(),
            "{resource:?}"
        );
    }
}

#[tokio::test]
async fn one_rejection_two_dialects() {
    let r = Rejection::PayloadTooLarge { max: 10 };
    let g = r.render(Dialect::Gateway);
    assert_eq!(g.status(), 413);
    let g = body(g).await;
    assert_eq!(g["error"]["type"], "payload_too_large");
    let o = body(r.render(Dialect::OpenAi)).await;
    assert_eq!(o["error"]["type"], "invalid_request_error");
    assert_eq!(o["error"]["code"], "request_too_large");
    assert!(o["error"].get("param").is_some());
}

#[tokio::test]
async fn rate_limited_has_headers_and_fields() {
    let limits = Limits::default().requests_per_second(5);
    let r = Rejection::RateLimited(Box::new(RateLimited {
        resource: "gateway:route:x".into(),
        layer: Layer::PreAuth,
        dimension: Dimension::RequestsPerSecond,
        wait: Duration::from_millis(960),
        policy: policy(&limits, Dimension::RequestsPerSecond),
        namespace_id: None,
        budget: None,
    }));
    let budget = Limits::default()
        .cost_micro_usd_per_day(500)
        .cost_micro_usd_per_month(9_000);
    assert_eq!(
        policy(&budget, Dimension::CostMicroUsdPerDay),
        Some((500, 86_400))
    );
    assert_eq!(policy(&budget, Dimension::CostMicroUsdPerMonth), Some((9_000, 0)));
    let resp = r.render(Dialect::Gateway);
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(
        resp.headers()["ratelimit-policy"],
        "\"requestsPerSecond\";q=5;w=1"
    );
    assert_eq!(resp.headers()["ratelimit"], "\"requestsPerSecond\";r=0;t=1");
    let b = body(resp).await;
    assert_eq!(b["error"]["resource"], "gateway:route:x");
    assert_eq!(b["error"]["retryAfterMs"], 960);
}

#[test]
fn each_429_has_its_own_rate_limit_fields_whatever_came_before() {
    let fields = |dimension, quota, window, wait_ms| {
        let r = Rejection::RateLimited(Box::new(RateLimited {
            resource: "r".into(),
            layer: Layer::PreAuth,
            dimension,
            wait: Duration::from_millis(wait_ms),
            policy: Some((quota, window)),
            namespace_id: None,
            budget: None,
        }));
        let resp = r.render(Dialect::Gateway);
        let h = resp.headers();
        (h["ratelimit-policy"].clone(), h["ratelimit"].clone())
    };
    let rps = Dimension::RequestsPerSecond;
    let rpm = Dimension::RequestsPerMinute;
    // Alike twice, then one thing at a time different, then back.
    for (dimension, quota, window, wait_ms, policy, now) in [
        (
            rps,
            5,
            1,
            400,
            "\"requestsPerSecond\";q=5;w=1",
            "\"requestsPerSecond\";r=0;t=1",
        ),
        (
            rps,
            5,
            1,
            900,
            "\"requestsPerSecond\";q=5;w=1",
            "\"requestsPerSecond\";r=0;t=1",
        ),
        (
            rps,
            5,
            1,
            1_200,
            "\"requestsPerSecond\";q=5;w=1",
            "\"requestsPerSecond\";r=0;t=2",
        ),
        (
            rps,
            6,
            1,
            1_200,
            "\"requestsPerSecond\";q=6;w=1",
            "\"requestsPerSecond\";r=0;t=2",
        ),
        (
            rps,
            6,
            2,
            1_200,
            "\"requestsPerSecond\";q=6;w=2",
            "\"requestsPerSecond\";r=0;t=2",
        ),
        (
            rpm,
            6,
            2,
            1_200,
            "\"requestsPerMinute\";q=6;w=2",
            "\"requestsPerMinute\";r=0;t=2",
        ),
        (
            rps,
            5,
            1,
            400,
            "\"requestsPerSecond\";q=5;w=1",
            "\"requestsPerSecond\";r=0;t=1",
        ),
    ] {
        let (p, n) = fields(dimension, quota, window, wait_ms);
        assert_eq!((p.to_str().ok(), n.to_str().ok()), (Some(policy), Some(now)));
    }
}

#[tokio::test]
async fn the_decision_dialect_says_allowed_false() {
    let limits = Limits::default().requests_per_minute(2);
    let r = Rejection::RateLimited(Box::new(RateLimited {
        resource: "jobs".into(),
        layer: Layer::Decision,
        dimension: Dimension::RequestsPerMinute,
        wait: Duration::from_millis(1500),
        policy: policy(&limits, Dimension::RequestsPerMinute),
        namespace_id: None,
        budget: None,
    }));
    let resp = r.render(Dialect::Decision);
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "2");
    assert_eq!(
        resp.headers()["ratelimit-policy"],
        "\"requestsPerMinute\";q=2;w=60"
    );
    let b = body(resp).await;
    assert_eq!(
        b,
        json!({"allowed": false, "waitTimeMs": 1500, "resource": "jobs", "dimension": "requestsPerMinute"})
    );
    let unknown = Rejection::UnknownResource("nope".into()).render(Dialect::Decision);
    assert_eq!(unknown.status(), 404);
    let b = body(unknown).await;
    assert_eq!(b["error"]["type"], "unknown_resource");
    assert_eq!(b["error"]["resource"], "nope");
    assert_eq!(Rejection::PermitGone.status(), 410);
    let token = Rejection::ServiceToken { given: true }.render(Dialect::Decision);
    assert_eq!(token.status(), 401);
    assert!(token.headers().contains_key("www-authenticate"));
}

#[test]
fn client_faults_are_4xx_upstream_faults_5xx() {
    assert_eq!(Rejection::RequestTimeout { whole_ms: None }.status(), 408);
    assert_eq!(Rejection::BadRequest("x".into()).status(), 400);
    assert_eq!(
        Rejection::UpstreamTimeout {
            upstream: "u".into(),
            after_ms: 1
        }
        .status(),
        504
    );
    assert_eq!(
        Rejection::LimiterUnavailable {
            resource: "r".into(),
            layer: Layer::PreAuth,
            retry_after: Duration::from_secs(1),
            reason: "down".into()
        }
        .status(),
        503
    );
}

#[test]
fn retry_after_values_are_the_number() {
    for secs in [0u64, 1, 9, 10, 59, 60, 61, 3600, u64::MAX] {
        assert_eq!(seconds_value(secs).to_str().expect("ascii"), secs.to_string());
    }
}

/// The flood's 429 (`flood.rs`) and the general renderer's answer the
/// same status, headers and bytes, in both dialects it serves, whatever
/// was answered before on the thread.
#[tokio::test]
async fn the_flood_429_is_the_general_renderers_twin() {
    let resources = ["gateway:route:a", "gateway:tenant:\"q\" \\ ü", "gateway:route:a"];
    for (i, resource) in resources.into_iter().enumerate() {
        for dimension in Dimension::ALL {
            for dialect in [Dialect::Gateway, Dialect::Decision] {
                for wait_ms in [1, 999, 1_000, 61_500] {
                    let policy = (i > 0).then_some((7, 60));
                    let r = Rejection::RateLimited(Box::new(RateLimited {
                        resource: resource.to_owned(),
                        layer: Layer::Tenant,
                        dimension,
                        wait: Duration::from_millis(wait_ms),
                        policy,
                        namespace_id: None,
                        budget: None,
                    }));
                    let fast = r.render(dialect);
                    let general = respond(&r.describe(), dialect);
                    assert_eq!(fast.status(), general.status());
                    assert_eq!(fast.headers(), general.headers(), "{resource} {dialect:?}");
                    let (fast, general) = (bytes(fast).await, bytes(general).await);
                    assert_eq!(fast, general, "{resource} {dimension:?} {dialect:?} {wait_ms}");
                }
            }
        }
    }
}

async fn bytes(r: Response<Body>) -> bytes::Bytes {
    r.into_body().collect().await.expect("body").to_bytes()
}

/// An LLM event's refusal carries its id, last, and is otherwise the
/// refusal it wraps.
#[tokio::test]
async fn an_event_refusal_carries_its_request_id() {
    let id = http::HeaderValue::from_static("req-1");
    let bare = Rejection::PayloadTooLarge { max: 3 }.render(Dialect::OpenAi);
    let tagged = Rejection::PayloadTooLarge { max: 3 }
        .of_event(Some(id.clone()))
        .render(Dialect::OpenAi);
    assert_eq!(tagged.status(), bare.status());
    let last = tagged
        .headers()
        .iter()
        .last()
        .map(|(k, v)| (k.clone(), v.clone()));
    assert_eq!(last, Some((http::HeaderName::from_static("x-request-id"), id)));
    assert_eq!(bytes(tagged).await, bytes(bare).await);
}

#[tokio::test]
async fn an_expired_key_and_a_use_case_outside_a_keys_list() {
    let expired = Rejection::Unauthorized(AuthError::KeyExpired);
    let g = expired.render(Dialect::Gateway);
    assert_eq!(g.status(), 401);
    assert_eq!(g.headers()["www-authenticate"], "Bearer");
    let g = body(g).await;
    assert_eq!(
        (g["error"]["type"].as_str(), g["error"]["code"].as_str()),
        (Some("unauthorized"), Some("key_expired"))
    );
    let o = body(expired.render(Dialect::OpenAi)).await;
    assert_eq!(o["error"]["code"], "key_expired");
    let unknown = body(Rejection::Unauthorized(AuthError::InvalidApiKey).render(Dialect::OpenAi)).await;
    assert_eq!(unknown["error"]["code"], "invalid_api_key");

    let outside = Rejection::UseCaseNotAllowed("other".into());
    let g = outside.render(Dialect::Gateway);
    assert_eq!(g.status(), 403);
    let g = body(g).await;
    assert_eq!(
        (g["error"]["type"].as_str(), g["error"]["code"].as_str()),
        (Some("forbidden"), Some("use_case_not_allowed"))
    );
    let o = body(outside.render(Dialect::OpenAi)).await;
    assert_eq!(
        (o["error"]["type"].as_str(), o["error"]["code"].as_str()),
        (Some("permission_error"), Some("use_case_not_allowed"))
    );
    let a = body(outside.render(Dialect::Anthropic)).await;
    assert_eq!(a["error"]["type"], "permission_error");
}
