//! All descriptors must pass and a refused call consumes nothing; hits,
//! headers, overrides, unknown domains, malformed calls.

use crate::support::{ok, req, start};
use pressure_rls::proto::{Code, RateLimitOverride, Unit};

const TWO: &str = "domain: d
descriptors:
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: narrow
    rate_limit: {unit: minute, requests_per_unit: 1}
";

#[tokio::test]
async fn a_refused_call_consumes_nothing_on_any_descriptor() {
    let mut rls = start(&[TWO]).await;
    let both = req("d", &[&[("wide", "a")], &[("narrow", "a")]]);
    assert!(ok(&rls.call(both.clone()).await));
    for _ in 0..10 {
        let r = rls.call(both.clone()).await;
        assert!(!ok(&r));
        assert_eq!(r.statuses[0].code, Code::Ok as i32, "wide alone passes");
        assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
        // The wide grant was given back: 4 of 5 left, every time.
        assert_eq!(r.statuses[0].limit_remaining, 4);
    }
    assert_eq!(rls.admitted(&req("d", &[&[("wide", "a")]]), 6).await, 4);
}

#[tokio::test]
async fn hits_addend_statuses_and_headers() {
    let mut rls = start(&[TWO]).await;
    let mut r5 = req("d", &[&[("wide", "h")]]);
    r5.hits_addend = 3;
    let r = rls.call(r5.clone()).await;
    assert!(ok(&r));
    let s = &r.statuses[0];
    assert_eq!(s.limit_remaining, 2);
    assert_eq!(s.duration_until_reset.map(|d| d.seconds), Some(60));
    let h: Vec<(&str, &str)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(
        h,
        [
            ("ratelimit-policy", "\"requestsPerMinute\";q=5;w=60"),
            ("ratelimit", "\"requestsPerMinute\";r=2;t=60")
        ]
    );
    // 3 more do not fit: refused, with the wait and Retry-After.
    let r = rls.call(r5).await;
    assert!(!ok(&r));
    let wait = r.statuses[0].duration_until_reset.expect("wait");
    assert!(wait.seconds > 0 && wait.seconds <= 60, "{wait:?}");
    assert!(r.response_headers_to_add.iter().any(|h| h.key == "retry-after"));
    // A demand above the limit is over, not an error.
    let mut huge = req("d", &[&[("wide", "other")]]);
    huge.hits_addend = 6;
    assert!(!ok(&rls.call(huge).await));
}

#[tokio::test]
async fn envoy_overrides_win_and_count_apart() {
    let mut rls = start(&[TWO]).await;
    let mut o = req("d", &[&[("wide", "o")]]);
    o.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: Unit::Second as i32,
    });
    assert_eq!(rls.admitted(&o, 3).await, 2);
    let r = rls.call(o).await;
    let l = r.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!((l.requests_per_unit, l.unit), (2, Unit::Second as i32));
    // The configured counter of the same descriptor is untouched.
    assert_eq!(rls.admitted(&req("d", &[&[("wide", "o")]]), 6).await, 5);
}

#[tokio::test]
async fn unknown_domains_pass_and_malformed_calls_fail() {
    let mut rls = start(&[TWO]).await;
    let r = rls.call(req("nope", &[&[("wide", "a")]])).await;
    assert!(ok(&r));
    assert_eq!(r.statuses.len(), 1);
    let err = rls
        .client
        .should_rate_limit(req("d", &[]))
        .await
        .expect_err("no descriptors");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = rls
        .client
        .should_rate_limit(req("", &[&[("a", "b")]]))
        .await
        .expect_err("no domain");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn many_distinct_values_are_bounded() {
    use pressure_core::ResourceBroker;
    use pressure_rls::{Plan, RateLimiter};
    let plan = Plan::from_texts(&[("f.yaml".into(), TWO.into())]).expect("plan");
    let broker = ResourceBroker::builder(pressure_core::MemoryBackend::new())
        .max_lazy_resources(100 + RateLimiter::<pressure_core::MemoryBackend>::MAX_OVERFLOW_COUNTERS)
        .build();
    let limiter = RateLimiter::new(broker, plan).max_counters(100);
    let mut admitted = 0;
    for i in 0..1_000 {
        let ip = format!("10.0.{}.{}", i / 256, i % 256);
        let r = limiter
            .should_rate_limit(&req("d", &[&[("wide", ip.as_str())]]))
            .await
            .expect("answer");
        admitted += usize::from(ok(&r));
    }
    // 100 counters of their own, all live inside the minute; the other 900
    // values share the rule's overflow counter (5 a minute).
    assert_eq!(admitted, 105);
    assert_eq!(limiter.counters(), 100);
    assert_eq!(limiter.broker().lazy_resources(), 101);
}
