//! The decision API (`gateway.decisions`, docs/architecture.md#the-decision-service) over real sockets:
//! a whole gateway on `127.0.0.1:0` with its decision listener, asked with
//! a hyper client (and raw TCP for a client that goes away).
//!
//! Exhaustion is a 429 with the wait and its headers; concurrency permits
//! are capped, released idempotently, renewed, and expire when a client
//! stops renewing; `waitMs` waits for a slot, and a waiting client that
//! vanishes reserves nothing; tokens are reconciled; unknown resources,
//! bad tokens and bad bodies are refused with the gateway's one
//! `Rejection`; reload applies `pressure.resources`; and the basic cases
//! hold over Redis (the testkit's `redis-server`).

use super::{harness, support};

use harness::{permit_of, with_resources, Decisions};
use serde_json::json;
use std::time::Duration;
use support::{bounded, hs256_auth};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhaustion_is_a_429_with_the_wait_and_headers() {
    bounded(async {
        let d = Decisions::start(with_resources(json!({ "jobs": { "requestsPerMinute": 2 } }))).await;
        for _ in 0..2 {
            let ok = d.acquire(json!({ "resource": "jobs" })).await;
            assert_eq!(ok.status, 200);
            assert_eq!(
                ok.json(),
                json!({ "allowed": true, "permit": null, "leaseTtlMs": null })
            );
        }
        let no = d.acquire(json!({ "resource": "jobs" })).await;
        assert_eq!(no.status, 429);
        let body = no.json();
        assert_eq!(body["allowed"], false);
        assert_eq!(body["resource"], "jobs");
        assert_eq!(body["dimension"], "requestsPerMinute");
        let wait = body["waitTimeMs"].as_u64().expect("waitTimeMs");
        // At most a window and one of its sub-windows (the `window` algorithm).
        assert!(wait > 0 && wait <= 64_000, "{wait}");
        let retry: u64 = no
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .expect("seconds");
        assert_eq!(retry, wait.div_ceil(1000).max(1));
        assert_eq!(
            no.header("ratelimit-policy"),
            Some("\"requestsPerMinute\";q=2;w=60")
        );
        assert_eq!(
            no.header("ratelimit"),
            Some(format!("\"requestsPerMinute\";r=0;t={retry}").as_str())
        );
        let s = d.gw.stats("jobs").await;
        assert_eq!((s.allowed, s.denied), (2, 1));
        // The denial is counted like the proxy's, under its own layer.
        let metrics = d.gw.admin_get("/metrics").await;
        let text = String::from_utf8_lossy(&metrics.body).into_owned();
        assert!(
            text.contains("pressure_gateway_denied_total{resource=\"jobs\",layer=\"decision\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("pressure_gateway_allowed_total{layer=\"decision\"} 2\n"));
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_capped_released_twice_renewed_and_gone_after_release() {
    bounded(async {
        let d = Decisions::start(with_resources(
            json!({ "slots": { "maxConcurrentRequests": 2, "leaseTtlMs": 20000 } }),
        ))
        .await;
        let a = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        let b_reply = d.acquire(json!({ "resource": "slots" })).await;
        assert_eq!(b_reply.json()["leaseTtlMs"], 20000);
        let b = permit_of(&b_reply);
        assert_ne!(a, b);
        let full = d.acquire(json!({ "resource": "slots" })).await;
        assert_eq!(full.status, 429);
        assert_eq!(full.json()["dimension"], "maxConcurrentRequests");
        assert!(full.header("retry-after").is_some());
        assert_eq!(d.gw.stats("slots").await.active, Some(2));

        assert_eq!(d.permit(&a, "release").await.status, 204);
        assert_eq!(d.permit(&a, "release").await.status, 204, "release is idempotent");
        assert_eq!(
            d.permit("0123456789abcdef0123456789abcdef", "release")
                .await
                .status,
            204
        );
        assert_eq!(d.gw.stats("slots").await.active, Some(1));
        let c = permit_of(&d.acquire(json!({ "resource": "slots" })).await);

        let renewed = d.permit(&b, "renew").await;
        assert_eq!(renewed.status, 200);
        assert_eq!(renewed.json(), json!({ "leaseTtlMs": 20000 }));
        assert_eq!(d.permit(&b, "release").await.status, 204);
        let gone = d.permit(&b, "renew").await;
        assert_eq!(gone.status, 410);
        assert_eq!(gone.json()["error"]["type"], "permit_gone");
        assert_eq!(d.permit(&a, "renew").await.status, 410);
        assert_eq!(d.permit(&c, "release").await.status, 204);
        let s = d.gw.await_idle("slots", Duration::from_secs(5)).await;
        assert_eq!(s.allowed, 3);
        assert_eq!(d.gw.gateway().decision_permits(), 0);
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_not_renewed_is_gone_after_its_ttl_and_its_slot_is_free() {
    bounded(async {
        let d = Decisions::start(with_resources(
            json!({ "slots": { "maxConcurrentRequests": 1, "leaseTtlMs": 400 } }),
        ))
        .await;
        let dead = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        assert_eq!(d.acquire(json!({ "resource": "slots" })).await.status, 429);
        // The client "dies": no renew. Its slot comes back after the TTL.
        let deadline = Instant::now() + Duration::from_secs(10);
        let next = loop {
            let r = d.acquire(json!({ "resource": "slots" })).await;
            if r.status == 200 {
                break r;
            }
            assert_eq!(r.status, 429);
            assert!(Instant::now() < deadline, "the slot never came back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let next = permit_of(&next);
        assert_eq!(
            d.permit(&dead, "renew").await.status,
            410,
            "an expired permit is gone"
        );
        assert_eq!(
            d.gw.gateway().decision_permits(),
            1,
            "only the new permit is held"
        );
        assert_eq!(d.permit(&next, "release").await.status, 204);
        d.gw.await_idle("slots", Duration::from_secs(5)).await;
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ms_waits_for_a_released_slot_and_gives_up_at_its_bound() {
    bounded(async {
        let d = std::sync::Arc::new(
            Decisions::start(with_resources(
                json!({ "slots": { "maxConcurrentRequests": 1 }, "tick": { "requestsPerSecond": 1, "algorithm": "gcra" } }),
            ))
            .await,
        );
        let held = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        // Bounded: refused once waitMs is over, the slot still held.
        let short = d.acquire(json!({ "resource": "slots", "waitMs": 300 })).await;
        assert_eq!(short.status, 429);
        assert_eq!(short.json()["dimension"], "maxConcurrentRequests");

        let waiter = {
            let d = std::sync::Arc::clone(&d);
            tokio::spawn(async move { d.acquire(json!({ "resource": "slots", "waitMs": 10000 })).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "the waiter cannot pass while the slot is held");
        assert_eq!(d.permit(&held, "release").await.status, 204);
        let got = waiter.await.expect("waiter");
        let second = permit_of(&got);
        assert_eq!(d.permit(&second, "release").await.status, 204);

        // A rate wait: the next gcra slot is about a second away.
        assert_eq!(d.acquire(json!({ "resource": "tick" })).await.status, 200);
        assert_eq!(d.acquire(json!({ "resource": "tick" })).await.status, 429);
        let waited = d.acquire(json!({ "resource": "tick", "waitMs": 5000 })).await;
        assert_eq!(waited.status, 200, "{:?}", waited.json());
        let d = std::sync::Arc::into_inner(d).expect("one owner");
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_while_waiting_reserves_nothing() {
    bounded(async {
        let d = Decisions::start(with_resources(json!({ "slots": { "maxConcurrentRequests": 1 } }))).await;
        let held = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        let body = json!({ "resource": "slots", "waitMs": 20000 }).to_string();
        let mut tcp = tokio::net::TcpStream::connect(d.addr).await.expect("connect");
        tcp.write_all(
            format!(
                "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("send");
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(tcp);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(d.permit(&held, "release").await.status, 204);
        // Had the vanished waiter kept waiting, it would take the slot
        // within its next retry (at most 100 ms later).
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(d.gw.gateway().decision_permits(), 0);
        let s = d.gw.stats("slots").await;
        assert_eq!(s.active, Some(0), "{s:?}");
        let again = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        assert_eq!(d.permit(&again, "release").await.status, 204);
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_reconciled_on_a_permit() {
    bounded(async {
        let d = Decisions::start(with_resources(
            json!({ "llm-budget": { "tokensPerMinute": 100 } }),
        ))
        .await;
        let p = permit_of(
            &d.acquire(
                json!({ "resource": "llm-budget", "inputTokens": 50, "outputTokens": 30, "lease": true }),
            )
            .await,
        );
        let over = d.acquire(json!({ "resource": "llm-budget", "tokens": 30 })).await;
        assert_eq!(over.status, 429);
        assert_eq!(over.json()["dimension"], "tokensPerMinute");
        let r = d
            .post(
                &format!("/v1/permits/{p}/reconcile"),
                &json!({ "inputTokens": 50, "outputTokens": 5 }),
                &[],
            )
            .await;
        assert_eq!(r.status, 204);
        let s = d.gw.stats("llm-budget").await;
        assert_eq!(s.usage.get("tokensPerMinute"), Some(&55));
        assert_eq!(
            d.acquire(json!({ "resource": "llm-budget", "tokens": 30 }))
                .await
                .status,
            200
        );
        let bad = d
            .post(
                &format!("/v1/permits/{p}/reconcile"),
                &json!({ "tokens": 1 }),
                &[],
            )
            .await;
        assert_eq!(bad.status, 400);
        let gone = d
            .post(
                "/v1/permits/00000000000000000000000000000000/reconcile",
                &json!({}),
                &[],
            )
            .await;
        assert_eq!(gone.status, 410);
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_services_and_tenants_are_resources_unknown_ids_are_404() {
    bounded(async {
        let mut section = with_resources(json!({ "jobs": { "requestsPerSecond": 5 } }));
        section["pressure"]["perService"] = json!({ "app": { "requestsPerMinute": 1 } });
        section["pressure"]["perRoute"] = json!([{
            "resource": "gateway:route:hooks", "pathPrefix": "/hooks", "limits": { "requestsPerMinute": 1 }
        }]);
        section["pressure"]["perTenant"] = json!({ "enabled": true, "limits": { "requestsPerMinute": 1 } });
        section["auth"] = hs256_auth();
        let d = Decisions::start(section).await;
        for id in [
            "gateway:service:app",
            "gateway:route:hooks",
            "gateway:tenant:acme",
        ] {
            assert_eq!(d.acquire(json!({ "resource": id })).await.status, 200, "{id}");
            assert_eq!(d.acquire(json!({ "resource": id })).await.status, 429, "{id}");
        }
        assert!(d.gw.stats("gateway:tenant:acme").await.lazy);
        for id in [
            "nope",
            "gateway:tenant:",
            "gateway:service:other",
            "llm:openai:gpt",
        ] {
            let r = d.acquire(json!({ "resource": id })).await;
            assert_eq!(r.status, 404, "{id}");
            assert_eq!(r.json()["error"]["type"], "unknown_resource");
            assert_eq!(r.json()["error"]["resource"], id);
        }
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_400_naming_the_problem() {
    bounded(async {
        let d = Decisions::start(with_resources(json!({ "jobs": { "requestsPerSecond": 5 } }))).await;
        for (body, needle) in [
            (json!("{not json"), "body"),
            (json!({ "resorce": "jobs" }), "resorce"),
            (json!({}), "resource"),
            (json!({ "resource": "jobs", "waitMs": -1 }), "waitMs"),
            (json!({ "resource": "jobs", "waitMs": 999999999 }), "waitMs"),
            (json!({ "resource": "jobs", "priority": "urgent" }), "priority"),
            (
                json!({ "resource": "jobs", "tokens": 1, "inputTokens": 1 }),
                "tokens",
            ),
            (json!({ "resource": "jobs", "requests": 6 }), "jobs"),
        ] {
            let r = d.post("/v1/acquire", &body, &[]).await;
            assert_eq!(r.status, 400, "{body}: {:?}", r.json());
            assert_eq!(r.json()["error"]["type"], "bad_request");
            let message = r.json()["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(message.contains(needle), "{body}: {message}");
        }
        assert_eq!(d.gw.stats("jobs").await.allowed, 0);
        d.stop().await;
    })
    .await;
}

const TOKEN_ENV: &str = "PRESSURE_GATEWAY_TESTS_DECISIONS_TOKEN";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_token_is_401() {
    bounded(async {
        std::env::set_var(TOKEN_ENV, "s3cret-decisions-token");
        let mut section = with_resources(json!({ "jobs": { "requestsPerSecond": 5 } }));
        section["decisions"] = json!({ "tokenEnv": TOKEN_ENV });
        let d = Decisions::start(section).await;
        let body = json!({ "resource": "jobs" });
        let none = d.post("/v1/acquire", &body, &[]).await;
        assert_eq!(none.status, 401);
        assert_eq!(none.json()["error"]["type"], "unauthorized");
        assert!(none.header("www-authenticate").is_some());
        let wrong = d
            .post(
                "/v1/acquire",
                &body,
                &[("authorization", "Bearer s3cret-decisions-tokeN")],
            )
            .await;
        assert_eq!(wrong.status, 401);
        let release = d.post("/v1/permits/x/release", &json!(null), &[]).await;
        assert_eq!(release.status, 401, "every endpoint needs the token");
        let right = d
            .post(
                "/v1/acquire",
                &body,
                &[("authorization", "Bearer s3cret-decisions-token")],
            )
            .await;
        assert_eq!(right.status, 200);
        assert_eq!(d.gw.stats("jobs").await.allowed, 1);
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_applies_resources() {
    bounded(async {
        let d = Decisions::start(with_resources(json!({ "jobs": { "requestsPerMinute": 1 } }))).await;
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 200);
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 429);
        let mut cfg = d.gw.gateway().plan().config().clone();
        let mut resources = std::collections::BTreeMap::new();
        resources.insert(
            "jobs".to_owned(),
            pressure_core::Limits::default().requests_per_minute(3),
        );
        resources.insert(
            "fresh".to_owned(),
            pressure_core::Limits::default().requests_per_second(1),
        );
        cfg.pressure.resources = resources;
        let outcome = d.gw.gateway().apply(cfg.clone()).expect("reload");
        assert_eq!(outcome.changed, vec!["jobs".to_owned()]);
        assert_eq!(outcome.added, vec!["fresh".to_owned()]);
        // The raised limit keeps the usage (1 of 3).
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 200);
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 200);
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 429);
        assert_eq!(d.acquire(json!({ "resource": "fresh" })).await.status, 200);
        cfg.pressure.resources.remove("jobs");
        let outcome = d.gw.gateway().apply(cfg.clone()).expect("reload");
        assert_eq!(outcome.removed, vec!["jobs".to_owned()]);
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 404);
        // The listener itself only changes with a restart.
        let mut moved = cfg;
        if let Some(dec) = moved.decisions.as_mut() {
            dec.listen = "127.0.0.1:1".into();
        }
        let e = d.gw.gateway().apply(moved).expect_err("restart-only");
        assert_eq!(e.path, "gateway.decisions");
        d.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_exhaustion_and_leases_behave_the_same() {
    bounded(async {
        let url = pressure_testkit::redis_url();
        let mut section = with_resources(json!({
            "jobs": { "requestsPerMinute": 2 },
            "slots": { "maxConcurrentRequests": 1 },
        }));
        let prefix = format!("decisions-test-{}:", std::process::id());
        section["backend"] = json!({ "type": "redis", "url": url, "timeoutMs": 1000, "keyPrefix": prefix });
        let d = Decisions::start(section).await;
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 200);
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 200);
        let no = d.acquire(json!({ "resource": "jobs" })).await;
        assert_eq!(no.status, 429);
        assert_eq!(no.json()["dimension"], "requestsPerMinute");
        assert!(no.header("retry-after").is_some());

        let a = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        assert_eq!(d.acquire(json!({ "resource": "slots" })).await.status, 429);
        assert_eq!(d.permit(&a, "renew").await.status, 200);
        assert_eq!(d.permit(&a, "release").await.status, 204);
        assert_eq!(d.permit(&a, "release").await.status, 204);
        assert_eq!(d.permit(&a, "renew").await.status, 410);
        let b = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        assert_eq!(d.permit(&b, "release").await.status, 204);
        d.gw.await_idle("slots", Duration::from_secs(5)).await;
        d.stop().await;
    })
    .await;
}

/// A full permit store refuses before anything is acquired: sixty `503
/// too_many_permits` on a 60/min resource consume none of its rate, and the
/// places of refused, denied and vanished acquisitions all come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_permit_store_refuses_without_consuming_and_leaks_no_place() {
    bounded(async {
        let mut section = with_resources(json!({
            "jobs": { "requestsPerMinute": 60 },
            "slots": { "maxConcurrentRequests": 1 },
            "other": { "requestsPerMinute": 60 },
        }));
        section["decisions"] = json!({ "maxPermits": 2 });
        let d = Decisions::start(section).await;
        let held = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        let jobs = permit_of(&d.acquire(json!({ "resource": "jobs", "lease": true })).await);
        for i in 0..60 {
            let r = d.acquire(json!({ "resource": "jobs", "lease": true })).await;
            assert_eq!(r.status, 503, "{i}: {:?}", r.json());
            assert_eq!(r.json()["error"]["type"], "too_many_permits");
        }
        let s = d.gw.stats("jobs").await;
        assert_eq!(s.usage.get("requestsPerMinute"), Some(&1), "{s:?}");
        assert_eq!(s.allowed, 1);
        // The 58 left are all there.
        for i in 0..59 {
            let r = d.acquire(json!({ "resource": "jobs" })).await;
            assert_eq!(r.status, 200, "{i}: {:?}", r.json());
        }
        assert_eq!(d.acquire(json!({ "resource": "jobs" })).await.status, 429);
        assert_eq!(d.permit(&jobs, "release").await.status, 204);

        // A waiter holds its place while it waits, and gives it back when
        // its client goes away.
        let body = json!({ "resource": "slots", "waitMs": 20000 }).to_string();
        let mut tcp = tokio::net::TcpStream::connect(d.addr).await.expect("connect");
        tcp.write_all(
            format!(
                "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("send");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let full = d.acquire(json!({ "resource": "slots", "waitMs": 1000 })).await;
        assert_eq!(full.status, 503, "{:?}", full.json());
        drop(tcp);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A denial gives its place back too.
        assert_eq!(d.acquire(json!({ "resource": "slots" })).await.status, 429);
        assert_eq!(d.permit(&held, "release").await.status, 204);
        let a = permit_of(&d.acquire(json!({ "resource": "slots" })).await);
        let b = permit_of(&d.acquire(json!({ "resource": "other", "lease": true })).await);
        assert_eq!(d.gw.gateway().decision_permits(), 2);
        assert_eq!(d.permit(&a, "release").await.status, 204);
        assert_eq!(d.permit(&b, "release").await.status, 204);
        d.stop().await;
    })
    .await;
}

/// Every body of the decision API is one JSON object: an array (which
/// serde would read as the struct's fields in order), a scalar, or an
/// object with something after it is a `400` that consumed nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_must_be_json_objects() {
    bounded(async {
        let d = Decisions::start(with_resources(
            json!({ "llm-budget": { "tokensPerMinute": 100 } }),
        ))
        .await;
        let p = permit_of(
            &d.acquire(json!({ "resource": "llm-budget", "inputTokens": 10, "lease": true }))
                .await,
        );
        let reconcile = format!("/v1/permits/{p}/reconcile");
        let not_objects = [
            r#"["llm-budget"]"#,
            r#"["llm-budget", 1, 5]"#,
            r#" [7, 3]"#,
            r#""llm-budget""#,
            "7",
            "null",
            "true",
            "",
        ];
        let trailing = [
            (
                "/v1/acquire",
                r#"{"resource": "llm-budget"} {"resource": "llm-budget"}"#,
            ),
            ("/v1/acquire", r#"{"resource": "llm-budget"} []"#),
            (reconcile.as_str(), r#"{"inputTokens": 1} {"inputTokens": 2}"#),
            (reconcile.as_str(), r#"{"inputTokens": 1}]"#),
        ];
        let cases = not_objects
            .into_iter()
            .flat_map(|body| [("/v1/acquire", body), (reconcile.as_str(), body)])
            .chain(trailing);
        for (path, body) in cases {
            let r = d.post(path, &json!(body), &[]).await;
            assert_eq!(r.status, 400, "{path} {body:?}: {:?}", r.json());
            assert_eq!(r.json()["error"]["type"], "bad_request");
            let message = r.json()["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(message.starts_with("body: "), "{path} {body:?}: {message}");
        }
        let s = d.gw.stats("llm-budget").await;
        assert_eq!(s.allowed, 1);
        assert_eq!(s.usage.get("tokensPerMinute"), Some(&10), "nothing reconciled");
        // An object with whitespace around it is a body.
        let ok = d
            .post(&reconcile, &json!(" \n{\"inputTokens\": 7}\r\n "), &[])
            .await;
        assert_eq!(ok.status, 204);
        assert_eq!(
            d.gw.stats("llm-budget").await.usage.get("tokensPerMinute"),
            Some(&7)
        );
        d.stop().await;
    })
    .await;
}

/// Every count of a body is a whole number from 0 to 2^53 − 1: negative,
/// fractional, huge and non-numeric counts are a `400` naming the field,
/// never a wrapped number; a reconcile of `u64::MAX` tokens no longer
/// reaches the limiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_out_of_range_are_400_naming_the_field() {
    bounded(async {
        let d = Decisions::start(with_resources(
            json!({ "llm-budget": { "tokensPerMinute": 100, "requestsPerMinute": 100 } }),
        ))
        .await;
        let p = permit_of(
            &d.acquire(json!({ "resource": "llm-budget", "inputTokens": 10, "lease": true }))
                .await,
        );
        let reconcile = format!("/v1/permits/{p}/reconcile");
        for field in ["requests", "tokens", "inputTokens", "outputTokens", "waitMs"] {
            for value in [
                "-1",
                "-9223372036854775808",
                "1.5",
                "1.0",
                "1e3",
                "\"5\"",
                "true",
                "[1]",
                "{}",
                "9007199254740992",
                "18446744073709551615",
                "18446744073709551616",
                "1e400",
            ] {
                let body = format!(r#"{{"resource": "llm-budget", "{field}": {value}}}"#);
                let r = d.post("/v1/acquire", &json!(body), &[]).await;
                assert_eq!(r.status, 400, "{body}: {:?}", r.json());
                let message = r.json()["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                assert!(message.starts_with(&format!("{field}: ")), "{body}: {message}");
            }
        }
        for field in ["inputTokens", "outputTokens"] {
            for value in [
                "-1",
                "2.5",
                "\"7\"",
                "null",
                "9007199254740992",
                "18446744073709551615",
                "1e19",
            ] {
                let body = format!(r#"{{"{field}": {value}}}"#);
                let r = d.post(&reconcile, &json!(body), &[]).await;
                assert_eq!(r.status, 400, "{body}: {:?}", r.json());
                let message = r.json()["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                assert!(message.starts_with(&format!("{field}: ")), "{body}: {message}");
                assert!(message.contains("9007199254740991"), "{body}: {message}");
            }
        }
        let s = d.gw.stats("llm-budget").await;
        assert_eq!(s.allowed, 1);
        assert_eq!(s.usage.get("tokensPerMinute"), Some(&10), "nothing reconciled");
        // The largest count is accepted: a reconcile that fills the limit.
        let max = d
            .post(
                &reconcile,
                &json!({ "inputTokens": 9_007_199_254_740_991_u64 }),
                &[],
            )
            .await;
        assert_eq!(max.status, 204);
        assert_eq!(
            d.acquire(json!({ "resource": "llm-budget", "tokens": 1 }))
                .await
                .status,
            429
        );
        d.stop().await;
    })
    .await;
}
