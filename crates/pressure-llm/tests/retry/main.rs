//! Integration tests of the error taxonomy, backoff, price table, money
//! budget and retry state. Deterministic: seeded RNGs, a manual clock, no sleeps.

use std::time::Duration;

use pressure_core::clock::{Clock, ManualClock};
use pressure_llm::price::{ModelPrice, Money, PriceTable};
use pressure_llm::retry::{Backoff, Decision, GiveUpReason, RetryPolicy, RetryState};
use pressure_llm::taxonomy::{classify, Disposition, ErrorKind, TimeoutPhase};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

const NONE: &[(&str, &str)] = &[];

fn oai(kind: &str, code: &str) -> String {
    format!(r#"{{"error":{{"message":"m","type":"{kind}","param":null,"code":"{code}"}}}}"#)
}

fn anthropic(kind: &str, message: &str) -> String {
    format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"{message}"}}}}"#)
}

fn server(status: u16) -> ErrorKind {
    ErrorKind::Server {
        status,
        retry_after: None,
    }
}

// ---------------------------------------------------------------- taxonomy

#[test]
fn classification_table() {
    use Disposition::*;
    let rate = ErrorKind::RateLimited { retry_after: None };
    let over = ErrorKind::Overloaded { retry_after: None };
    let cases: Vec<(u16, String, ErrorKind, Disposition)> = vec![
        (400, oai("invalid_request_error", "invalid_value"), ErrorKind::BadRequest, Fail),
        (400, anthropic("invalid_request_error", "messages: field required"), ErrorKind::BadRequest, Fail),
        (401, oai("invalid_request_error", "invalid_api_key"), ErrorKind::Unauthorized, Fallback),
        (401, anthropic("authentication_error", "invalid x-api-key"), ErrorKind::Unauthorized, Fallback),
        (402, String::new(), ErrorKind::QuotaExhausted, Fallback),
        (403, anthropic("permission_error", "no access"), ErrorKind::Forbidden, Fallback),
        (404, oai("invalid_request_error", "model_not_found"), ErrorKind::NotFound, Fallback),
        (404, anthropic("not_found_error", "model: x"), ErrorKind::NotFound, Fallback),
        (408, String::new(), ErrorKind::Timeout { phase: TimeoutPhase::Upstream }, Retry),
        (409, String::new(), ErrorKind::Conflict, Retry),
        (413, anthropic("request_too_large", "too many bytes"), ErrorKind::BadRequest, Fail),
        (422, "{}".into(), ErrorKind::BadRequest, Fail),
        (418, "{}".into(), ErrorKind::Other, Fail),
        (429, oai("requests", "rate_limit_exceeded"), rate.clone(), Retry),
        (429, anthropic("rate_limit_error", "slow down"), rate.clone(), Retry),
        (429, oai("insufficient_quota", "insufficient_quota"), ErrorKind::QuotaExhausted, Fallback),
        (429, oai("billing_error", "billing_hard_limit_reached"), ErrorKind::QuotaExhausted, Fallback),
        (
            400,
            anthropic("invalid_request_error", "Your credit balance is too low to access the API"),
            ErrorKind::QuotaExhausted,
            Fallback,
        ),
        (500, oai("server_error", "null"), server(500), Retry),
        (500, anthropic("api_error", "internal"), server(500), Retry),
        (501, String::new(), server(501), Fallback),
        (502, "<html>bad gateway</html>".into(), server(502), Retry),
        (503, String::new(), server(503), Retry),
        (504, String::new(), server(504), Retry),
        (505, String::new(), server(505), Fallback),
        (529, anthropic("overloaded_error", "Overloaded"), over.clone(), Retry),
        (529, String::new(), over.clone(), Retry),
        (200, anthropic("overloaded_error", "Overloaded"), over.clone(), Retry),
        (503, anthropic("overloaded_error", "Overloaded"), over, Retry),
        (
            400,
            oai("invalid_request_error", "context_length_exceeded"),
            ErrorKind::ContextLength,
            Fallback,
        ),
        (
            400,
            anthropic("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"),
            ErrorKind::ContextLength,
            Fallback,
        ),
        (
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens","type":"BadRequestError","code":400}"#.into(),
            ErrorKind::ContextLength,
            Fallback,
        ),
        (400, oai("invalid_request_error", "content_filter"), ErrorKind::ContentRefusal, Fail),
        (
            400,
            r#"{"error":{"code":"content_filter","innererror":{"code":"ResponsibleAIPolicyViolation"}}}"#.into(),
            ErrorKind::ContentRefusal,
            Fail,
        ),
        (400, oai("invalid_request_error", "content_policy_violation"), ErrorKind::ContentRefusal, Fail),
        (200, "{}".into(), ErrorKind::Other, Fail),
    ];
    for (status, body, kind, disposition) in cases {
        let got = classify(status, NONE, &body);
        assert_eq!(got, kind, "status {status} body {body}");
        assert_eq!(got.disposition(), disposition, "status {status} body {body}");
    }
}

#[test]
fn transport_kinds_and_timeouts() {
    for phase in [
        TimeoutPhase::Connect,
        TimeoutPhase::FirstByte,
        TimeoutPhase::Read,
        TimeoutPhase::Write,
        TimeoutPhase::PoolWait,
        TimeoutPhase::Upstream,
    ] {
        assert_eq!(
            ErrorKind::Timeout { phase }.disposition(),
            Disposition::Retry,
            "{phase:?}"
        );
    }
    assert_eq!(
        ErrorKind::Timeout {
            phase: TimeoutPhase::Total
        }
        .disposition(),
        Disposition::Fail
    );
    assert_eq!(ErrorKind::Connection.disposition(), Disposition::Retry);
}

#[test]
fn retry_after_headers_are_read_into_the_kind() {
    let h = [("Retry-After", "20")];
    assert_eq!(
        classify(429, &h, "{}"),
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(20))
        }
    );
    let h = vec![
        ("retry-after".to_string(), "20".to_string()),
        ("Retry-After-Ms".to_string(), "1250".to_string()),
    ];
    assert_eq!(
        classify(503, &h, "").retry_after(),
        Some(Duration::from_millis(1250))
    );
    assert_eq!(
        classify(529, &h, "").retry_after(),
        Some(Duration::from_millis(1250))
    );
    // A spend cap is never a rate limit, whatever the header says.
    assert_eq!(
        classify(429, &h, &oai("insufficient_quota", "insufficient_quota")),
        ErrorKind::QuotaExhausted
    );
}

#[test]
fn only_transient_kinds_are_retried() {
    let kinds = [
        (
            ErrorKind::Timeout {
                phase: TimeoutPhase::Read,
            },
            true,
        ),
        (ErrorKind::RateLimited { retry_after: None }, true),
        (ErrorKind::Conflict, true),
        (ErrorKind::Overloaded { retry_after: None }, true),
        (server(500), true),
        (server(503), true),
        (ErrorKind::Connection, true),
        (
            ErrorKind::Timeout {
                phase: TimeoutPhase::Total,
            },
            false,
        ),
        (server(501), false),
        (ErrorKind::QuotaExhausted, false),
        (ErrorKind::BadRequest, false),
        (ErrorKind::Unauthorized, false),
        (ErrorKind::Forbidden, false),
        (ErrorKind::NotFound, false),
        (ErrorKind::ContextLength, false),
        (ErrorKind::ContentRefusal, false),
        (ErrorKind::Other, false),
    ];
    let policy = RetryPolicy::default();
    for (kind, retried) in kinds {
        let mut st = RetryState::with_rng(&policy, None, StdRng::seed_from_u64(7));
        let d = st.on_failure(&kind, Money::ZERO, Money::ZERO, 0);
        assert_eq!(matches!(d, Decision::RetryAfter(_)), retried, "{kind:?} -> {d:?}");
        if !retried {
            assert_eq!(
                d,
                Decision::GiveUp(GiveUpReason::NotRetryable(kind.disposition()))
            );
        }
    }
}

// ---------------------------------------------------------------- backoff

#[test]
fn backoff_samples_stay_in_window_and_mean_grows_until_cap() {
    let b = Backoff::default();
    let mut rng = StdRng::seed_from_u64(42);
    const N: u32 = 4000;
    let mut prev_mean = 0.0f64;
    for n in 0..10u32 {
        let top = b.ceiling(n);
        assert_eq!(
            top,
            Duration::from_millis(500 * (1u64 << n)).min(Duration::from_secs(30))
        );
        let mut sum = 0.0;
        for _ in 0..N {
            let d = b.jittered(n, &mut rng);
            assert!(d <= top, "attempt {n}: {d:?} > {top:?}");
            sum += d.as_secs_f64();
        }
        let mean = sum / f64::from(N);
        // Full jitter: the mean is half the window (±5 %).
        let half = top.as_secs_f64() / 2.0;
        assert!(
            (mean - half).abs() < half * 0.05,
            "attempt {n}: mean {mean} vs {half}"
        );
        if top < b.cap() {
            assert!(
                mean > prev_mean * 1.5,
                "attempt {n}: mean {mean} did not grow from {prev_mean}"
            );
        }
        prev_mean = mean;
    }
}

#[test]
fn backoff_is_reproducible_with_a_seed() {
    let b = Backoff::default();
    let a: Vec<_> = {
        let mut r = StdRng::seed_from_u64(9);
        (0..5).map(|n| b.jittered(n, &mut r)).collect()
    };
    let c: Vec<_> = {
        let mut r = StdRng::seed_from_u64(9);
        (0..5).map(|n| b.jittered(n, &mut r)).collect()
    };
    assert_eq!(a, c);
}

#[test]
fn retry_after_is_honoured_exactly_and_never_sooner() {
    let policy = RetryPolicy::default();
    // A retry-after far above the jitter window is waited out exactly.
    for (header, want) in [
        (("retry-after", "45"), Duration::from_secs(45)),
        (("retry-after-ms", "31234"), Duration::from_millis(31_234)),
        (("retry-after-ms", "60000"), Duration::from_secs(60)),
    ] {
        let kind = classify(429, &[header], "");
        for seed in 0..50 {
            let mut st = RetryState::with_rng(&policy, None, StdRng::seed_from_u64(seed));
            assert_eq!(
                st.on_failure(&kind, Money::ZERO, Money::ZERO, 0),
                Decision::RetryAfter(want)
            );
        }
    }
    // A short retry-after is a floor under the jitter.
    let kind = classify(503, &[("retry-after-ms", "300")], "");
    for seed in 0..200 {
        let mut st = RetryState::with_rng(&policy, None, StdRng::seed_from_u64(seed));
        match st.on_failure(&kind, Money::ZERO, Money::ZERO, 0) {
            Decision::RetryAfter(d) => {
                assert!(
                    d >= Duration::from_millis(300) && d <= Duration::from_millis(500),
                    "{d:?}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn retry_after_above_max_is_not_waited_out() {
    let policy = RetryPolicy {
        max_retry_after_ms: 10_000,
        ..RetryPolicy::default()
    };
    let mut st = RetryState::with_rng(&policy, None, StdRng::seed_from_u64(1));
    let kind = classify(429, &[("retry-after-ms", "10001")], "");
    assert_eq!(
        st.on_failure(&kind, Money::ZERO, Money::ZERO, 0),
        Decision::GiveUp(GiveUpReason::RetryAfterTooLong {
            retry_after: Duration::from_millis(10_001),
            max: Duration::from_secs(10),
        })
    );
    let mut st = RetryState::with_rng(&policy, None, StdRng::seed_from_u64(1));
    let kind = classify(429, &[("retry-after", "10")], "");
    assert_eq!(
        st.on_failure(&kind, Money::ZERO, Money::ZERO, 0),
        Decision::RetryAfter(Duration::from_secs(10))
    );
}

// ---------------------------------------------------------------- budget

fn prices() -> PriceTable {
    // $3 / 1M in, $15 / 1M out.
    PriceTable::new().with_model("claude", ModelPrice::new(3_000_000, 15_000_000))
}

/// One attempt: 10 000 tokens in, 1 000 max tokens out.
fn attempt_cost(t: &PriceTable) -> Money {
    t.cost("claude", 10_000, 1_000).expect("claude is priced")
}

fn count_retries(budget_micro_usd: u64) -> (u32, Decision) {
    let t = prices();
    let cost = attempt_cost(&t);
    let policy = RetryPolicy {
        max_attempts: 100,
        budget_micro_usd: Some(budget_micro_usd),
        ..RetryPolicy::default()
    };
    let mut st = RetryState::with_rng(&policy, None, StdRng::seed_from_u64(3));
    let mut retries = 0;
    loop {
        // Each attempt times out after generating all its output: it costs its
        // full figure, and the next is estimated at the same.
        match st.on_failure(
            &ErrorKind::Timeout {
                phase: TimeoutPhase::Read,
            },
            cost,
            cost,
            0,
        ) {
            Decision::RetryAfter(_) => retries += 1,
            give_up => return (retries, give_up),
        }
    }
}

#[test]
fn budget_stops_retries_exactly_at_the_price_tables_figure() {
    let cost = attempt_cost(&prices());
    assert_eq!(cost, Money::from_micro_usd(30_000 + 15_000));
    let c = cost.micro_usd();

    // Budget for exactly two attempts: one retry.
    let (retries, why) = count_retries(2 * c);
    assert_eq!(retries, 1);
    assert_eq!(
        why,
        Decision::GiveUp(GiveUpReason::BudgetExceeded {
            spent: Money::from_micro_usd(2 * c),
            next_estimate: cost,
            limit: Money::from_micro_usd(2 * c),
        })
    );
    // One micro-dollar less: no retry at all.
    assert_eq!(count_retries(2 * c - 1).0, 0);
    // Five attempts' worth: four retries.
    assert_eq!(count_retries(5 * c).0, 4);
    assert_eq!(count_retries(5 * c - 1).0, 3);
}

#[test]
fn failed_attempt_costs_input_plus_partial_output() {
    let t = prices();
    let policy = RetryPolicy {
        budget_micro_usd: Some(100_000),
        ..RetryPolicy::default()
    };
    let mut st = RetryState::with_rng(&policy, None, StdRng::seed_from_u64(3));
    // Read timeout after 200 of 1 000 output tokens.
    let spent = t.cost("claude", 10_000, 200).unwrap();
    let next = t.cost("claude", 10_000, 1_000).unwrap();
    assert_eq!(spent, Money::from_micro_usd(33_000));
    let d = st.on_failure(
        &ErrorKind::Timeout {
            phase: TimeoutPhase::Read,
        },
        spent,
        next,
        0,
    );
    assert!(matches!(d, Decision::RetryAfter(_)));
    assert_eq!(st.budget().spent(), spent);
    assert_eq!(st.budget().remaining(), Some(Money::from_micro_usd(67_000)));
    // A non-retryable failure is still charged.
    st.on_failure(&ErrorKind::ContentRefusal, spent, next, 0);
    assert_eq!(st.budget().spent(), Money::from_micro_usd(66_000));
}

#[test]
fn price_table_from_camel_case_json() {
    let t: PriceTable = serde_json::from_str(
        r#"{"models":{"claude":{"inputMicroUsdPer1M":3000000,"outputMicroUsdPer1M":15000000}}}"#,
    )
    .unwrap();
    assert_eq!(t, prices());
    assert!(serde_json::from_str::<PriceTable>(r#"{"models":{},"bogus":1}"#).is_err());
}

// ---------------------------------------------------------------- attempts, deadline, policy

#[test]
fn attempts_exhausted_after_max_attempts() {
    let policy = RetryPolicy::default(); // 3 attempts = 2 retries
    let mut st = RetryState::with_rng(&policy, None, StdRng::seed_from_u64(5));
    let k = server(502);
    assert!(matches!(
        st.on_failure(&k, Money::ZERO, Money::ZERO, 0),
        Decision::RetryAfter(_)
    ));
    assert!(matches!(
        st.on_failure(&k, Money::ZERO, Money::ZERO, 0),
        Decision::RetryAfter(_)
    ));
    assert_eq!(
        st.on_failure(&k, Money::ZERO, Money::ZERO, 0),
        Decision::GiveUp(GiveUpReason::AttemptsExhausted { attempts: 3 })
    );
    // The next fallback level gets its own attempts, the same money and deadline.
    st.start_fallback_level();
    assert_eq!(st.attempts(), 0);
    assert_eq!(st.total_attempts(), 3);
    assert!(matches!(
        st.on_failure(&k, Money::ZERO, Money::ZERO, 0),
        Decision::RetryAfter(_)
    ));
}

#[test]
fn deadline_stops_retries() {
    let clock = ManualClock::new(1_000_000_000);
    let policy = RetryPolicy::default();
    let deadline = clock.now_nanos() + 10_000_000_000; // 10 s
    let k = ErrorKind::RateLimited {
        retry_after: Some(Duration::from_secs(4)),
    };
    let mut st = RetryState::with_rng(&policy, Some(deadline), StdRng::seed_from_u64(11));
    assert_eq!(
        st.on_failure(&k, Money::ZERO, Money::ZERO, clock.now_nanos()),
        Decision::RetryAfter(Duration::from_secs(4))
    );
    clock.advance(Duration::from_secs(5)); // waited 4 s, the attempt took 1 s
                                           // 5 s left: a 4 s wait still fits.
    assert_eq!(
        st.on_failure(&k, Money::ZERO, Money::ZERO, clock.now_nanos()),
        Decision::RetryAfter(Duration::from_secs(4))
    );
    clock.advance(Duration::from_secs(5));
    // Deadline reached: no retry however short the wait.
    let mut st2 = RetryState::with_rng(&policy, Some(deadline), StdRng::seed_from_u64(11));
    let d = st2.on_failure(
        &ErrorKind::Connection,
        Money::ZERO,
        Money::ZERO,
        clock.now_nanos(),
    );
    assert!(
        matches!(
            d,
            Decision::GiveUp(GiveUpReason::DeadlineWouldPass {
                remaining: Duration::ZERO,
                ..
            })
        ),
        "{d:?}"
    );
}

#[test]
fn wait_that_would_pass_the_deadline_is_not_made() {
    let clock = ManualClock::new(0);
    let policy = RetryPolicy::default();
    let k = ErrorKind::Overloaded {
        retry_after: Some(Duration::from_secs(3)),
    };
    let mut st = RetryState::with_rng(&policy, Some(3_000_000_000), StdRng::seed_from_u64(2));
    assert_eq!(
        st.on_failure(&k, Money::ZERO, Money::ZERO, clock.now_nanos()),
        Decision::GiveUp(GiveUpReason::DeadlineWouldPass {
            wait: Duration::from_secs(3),
            remaining: Duration::from_secs(3),
        })
    );
    let mut st = RetryState::with_rng(&policy, Some(3_000_000_001), StdRng::seed_from_u64(2));
    assert_eq!(
        st.on_failure(&k, Money::ZERO, Money::ZERO, clock.now_nanos()),
        Decision::RetryAfter(Duration::from_secs(3))
    );
}

#[test]
fn with_timeout_reads_the_injected_clock() {
    let clock = ManualClock::new(7_000_000_000);
    let st = RetryState::with_timeout(&RetryPolicy::default(), &clock, Duration::from_secs(15));
    assert_eq!(st.deadline(), Some(22_000_000_000));
}

#[test]
fn policy_serde_is_camel_case_and_strict() {
    let p: RetryPolicy = serde_json::from_str(
        r#"{"maxAttempts":5,"baseDelayMs":100,"maxDelayMs":10000,"maxRetryAfterMs":20000,"budgetMicroUsd":50000}"#,
    )
    .unwrap();
    assert_eq!(
        p,
        RetryPolicy {
            max_attempts: 5,
            base_delay_ms: 100,
            max_delay_ms: 10_000,
            max_retry_after_ms: 20_000,
            budget_micro_usd: Some(50_000),
        }
    );
    let partial: RetryPolicy = serde_json::from_str(r#"{"maxAttempts":2}"#).unwrap();
    assert_eq!(partial.base_delay_ms, 500);
    assert_eq!(partial.budget_micro_usd, None);
    assert!(serde_json::from_str::<RetryPolicy>(r#"{"max_attempts":2}"#).is_err());
    assert!(serde_json::from_str::<RetryPolicy>(r#"{"retries":2}"#).is_err());
}

// ---------------------------------------------------------------- properties

proptest! {
    #[test]
    fn backoff_within_cap_and_never_before_retry_after(
        seed in any::<u64>(),
        retry in 0u32..200,
        base_ms in 1u64..5_000,
        cap_ms in 5_000u64..120_000,
        max_ra_ms in 0u64..120_000,
        ra_ms in proptest::option::of(0u64..200_000),
    ) {
        let b = Backoff::new(
            Duration::from_millis(base_ms),
            Duration::from_millis(cap_ms),
            Duration::from_millis(max_ra_ms),
        );
        let mut rng = StdRng::seed_from_u64(seed);
        let cap = Duration::from_millis(cap_ms);
        let j = b.jittered(retry, &mut rng);
        prop_assert!(j <= b.ceiling(retry) && b.ceiling(retry) <= cap);
        let ra = ra_ms.map(Duration::from_millis);
        match b.delay(retry, ra, &mut rng) {
            Some(d) => {
                let floor = ra.unwrap_or_default();
                prop_assert!(floor <= b.max_retry_after());
                prop_assert!(d >= floor, "{d:?} < retry-after {floor:?}");
                prop_assert!(d <= cap.max(floor), "{d:?} above cap {cap:?} and retry-after {floor:?}");
                if ra.is_none() {
                    prop_assert!(d <= cap);
                }
            }
            None => prop_assert!(ra.unwrap_or_default() > b.max_retry_after()),
        }
    }

    #[test]
    fn retry_wait_never_sooner_than_retry_after_nor_past_the_deadline(
        seed in any::<u64>(),
        ra_ms in 0u64..60_000,
        now in 0u64..1_000_000_000_000,
        left_ms in 0u64..90_000,
    ) {
        let policy = RetryPolicy::default();
        let deadline = now + left_ms * 1_000_000;
        let mut st = RetryState::with_rng(&policy, Some(deadline), StdRng::seed_from_u64(seed));
        let k = ErrorKind::RateLimited { retry_after: Some(Duration::from_millis(ra_ms)) };
        match st.on_failure(&k, Money::ZERO, Money::ZERO, now) {
            Decision::RetryAfter(d) => {
                prop_assert!(d >= Duration::from_millis(ra_ms));
                prop_assert!(d < Duration::from_millis(left_ms));
                prop_assert!(d <= Duration::from_secs(30).max(Duration::from_millis(ra_ms)));
            }
            Decision::GiveUp(GiveUpReason::DeadlineWouldPass { wait, remaining }) => {
                prop_assert!(wait >= remaining);
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }
}
