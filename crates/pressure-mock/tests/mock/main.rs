//! The mock provider, started for real on 127.0.0.1:0 and driven with
//! reqwest and with pressure-llm's `ProviderClient`: answers (JSON and SSE
//! with usage), billing, its own quota (429 with retry-after), 500s, hangs,
//! stalls, phases in time, the admin endpoints and the recorded arrivals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod embeddings;
mod responses;
mod wire_shapes;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use pressure_llm::provider::{
    ChatRequest, Message, ProviderClient, ProviderConfig, ProviderSettings, TimeoutsConfig,
};
use pressure_llm::taxonomy::{ErrorKind, TimeoutPhase};
use pressure_llm::tokens::TokenCounter;
use pressure_mock::{
    Arrival, Behaviour, Latency, MockConfig, MockProvider, Outcome, Phase, Price, RateLimit,
    BAD_REQUEST_MARKER,
};
use serde_json::{json, Value};
use tokio::time::Instant;

const MODEL: &str = "gpt-4o-mini";

/// Every test runs within this.
async fn bounded<F: Future<Output = ()>>(f: F) {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("test took longer than 30 s");
}

fn fast(name: &str) -> Phase {
    Phase {
        latency: Latency::uniform(5, 15),
        ..Phase::normal(name)
    }
}

async fn start(behaviour: Behaviour) -> MockProvider {
    let mut prices = BTreeMap::new();
    prices.insert(MODEL.to_owned(), Price::new(150_000, 600_000));
    let config = MockConfig {
        behaviour,
        prices,
        seed: Some(7),
        ..MockConfig::default()
    };
    MockProvider::start("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap()
}

fn client(mock: &MockProvider, timeouts: TimeoutsConfig) -> ProviderClient {
    ProviderClient::new(ProviderConfig {
        name: "mock".into(),
        settings: ProviderSettings {
            kind: Default::default(),
            model_dir: None,
            base_url: mock.base_url(),
            api_key_env: None,
            timeouts,
        },
    })
    .unwrap()
}

fn request(text: &str, max_tokens: Option<u32>) -> ChatRequest {
    let mut req = ChatRequest::new(
        MODEL,
        vec![
            Message::new("system", "You are terse."),
            Message::new("user", text),
        ],
    );
    req.max_tokens = max_tokens;
    req
}

fn wire(text: &str) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": text}]})
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

fn input_tokens(req: &ChatRequest) -> u64 {
    let msgs: Vec<(String, String)> = req.messages.iter().map(|m| (m.role.clone(), m.text())).collect();
    TokenCounter::new().count_chat(MODEL, &msgs).unwrap()
}

/// Polls `f` every 20 ms until it returns `Some`, at most `within`.
async fn eventually<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "condition not reached within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn only_arrival(mock: &MockProvider) -> Arrival {
    let arrivals = mock.arrivals();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    arrivals[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn normal_json_answer_carries_usage_and_is_billed() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let c = client(&mock, TimeoutsConfig::default());
        let req = request("Say hello.", Some(10));
        let done = c.complete(&req, deadline()).await.unwrap();
        let usage = done.usage.clone().unwrap();
        assert_eq!(usage.prompt_tokens, input_tokens(&req));
        assert!(
            usage.completion_tokens > 0 && usage.completion_tokens <= 10,
            "{usage:?}"
        );
        assert_eq!(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
        let choice = &done.response.choices[0];
        assert_eq!(choice.finish_reason.as_deref(), Some("length"));
        assert!(choice.message.text().starts_with("This is gpt-4o-mini"));

        let s = mock.stats();
        assert_eq!(s.requests, 1);
        assert_eq!(s.by_status.get("200"), Some(&1));
        assert_eq!(s.by_outcome.get(&Outcome::Ok), Some(&1));
        assert_eq!(s.billed_input_tokens, usage.prompt_tokens);
        assert_eq!(s.billed_output_tokens, usage.completion_tokens);
        let price = Price::new(150_000, 600_000);
        let cost = price.micro_usd(usage.prompt_tokens, usage.completion_tokens);
        assert_eq!(s.billed_micro_usd, cost);
        assert_eq!(s.by_model[MODEL].micro_usd, cost);
        assert_eq!(s.by_model[MODEL].requests, 1);
        assert_eq!((s.in_flight, s.max_in_flight), (0, 1));
        assert_eq!(s.phase, "normal");
        let a = only_arrival(&mock);
        assert_eq!(
            (a.outcome, a.status, a.stream, a.client_gone),
            (Outcome::Ok, 200, false, false)
        );
        assert_eq!(
            (a.input_tokens, a.output_tokens),
            (usage.prompt_tokens, usage.completion_tokens)
        );
        assert_eq!(a.micro_usd, cost, "the arrival carries its own bill");

        // Without max_tokens the phase's outputTokens (48) caps the answer; another
        // model is billed at the default price.
        let mut other = request("Again.", None);
        other.model = "other-model".into();
        let done = c.complete(&other, deadline()).await.unwrap();
        let usage = done.usage.unwrap();
        assert!(
            usage.completion_tokens > 10 && usage.completion_tokens <= 48,
            "{usage:?}"
        );
        let bill = &mock.stats().by_model["other-model"];
        let default = MockConfig::default().default_price;
        assert_eq!(
            bill.micro_usd,
            default.micro_usd(usage.prompt_tokens, usage.completion_tokens)
        );
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_ends_with_usage_and_done() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let c = client(&mock, TimeoutsConfig::default());
        let req = request("Stream please.", Some(20));
        let mut s = c.stream(&req, deadline()).await.unwrap();
        let mut chunks = Vec::new();
        while let Some(chunk) = s.next().await {
            chunks.push(chunk.unwrap());
        }
        assert!(s.is_done());
        let usage = s.usage().cloned().unwrap();
        assert_eq!(usage.prompt_tokens, input_tokens(&req));
        assert!(usage.completion_tokens > 0 && usage.completion_tokens <= 20);
        assert!(s.output_text().starts_with("This is gpt-4o-mini"));
        assert!(s.output_chunks() >= 2, "{}", s.output_chunks());
        let last = chunks.last().unwrap();
        assert!(last.choices.is_empty() && last.usage.is_some());
        let st = mock.stats();
        assert_eq!(st.billed_output_tokens, usage.completion_tokens);
        assert_eq!(st.billed_input_tokens, usage.prompt_tokens);
        let a = only_arrival(&mock);
        assert!(a.stream && !a.client_gone && a.outcome == Outcome::Ok);

        // Without include_usage: no usage chunk, still [DONE].
        let http = reqwest::Client::new();
        let mut body = wire("raw stream");
        body["stream"] = json!(true);
        let text = http
            .post(format!("{}/chat/completions", mock.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.starts_with("data: {"), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(!text.contains("\"usage\""), "{text}");
        assert!(text.contains("\"finish_reason\":\"stop\""), "{text}");
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quota_answers_429_with_retry_after_and_the_client_honours_it() {
    bounded(async {
        let phase = Phase {
            rate_limit: Some(RateLimit {
                requests: 2,
                tokens: 0,
                window_ms: 1_500,
            }),
            ..fast("rate-limited")
        };
        let mock = start(Behaviour::single(phase)).await;
        let http = reqwest::Client::new();
        let url = format!("{}/chat/completions", mock.base_url());
        for left in ["1", "0"] {
            let r = http.post(&url).json(&wire("hi")).send().await.unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.headers()["x-ratelimit-limit-requests"], "2");
            assert_eq!(r.headers()["x-ratelimit-remaining-requests"], left);
        }
        let r = http.post(&url).json(&wire("hi")).send().await.unwrap();
        assert_eq!(r.status(), 429);
        let h = r.headers().clone();
        assert_eq!(h["retry-after"], "2");
        let wait_ms: u64 = h["retry-after-ms"].to_str().unwrap().parse().unwrap();
        assert!(wait_ms > 0 && wait_ms <= 1_500, "{wait_ms}");
        assert_eq!(h["x-ratelimit-remaining-requests"], "0");
        let reset = h["x-ratelimit-reset-requests"].to_str().unwrap().to_owned();
        assert_eq!(
            pressure_llm::provider::ratelimit::parse_go_duration(&reset),
            Some(Duration::from_millis(wait_ms))
        );
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        assert_eq!(body["error"]["type"], "requests");

        // pressure-llm sees a rate limit with the provider's wait.
        let c = client(&mock, TimeoutsConfig::default());
        let err = c.complete(&request("hi", None), deadline()).await.unwrap_err();
        match err.kind {
            ErrorKind::RateLimited { retry_after: Some(d) } => {
                assert!(d > Duration::ZERO && d <= Duration::from_millis(1_500), "{d:?}")
            }
            k => panic!("{k:?}"),
        }
        assert!(err.kind.is_transient());
        assert_eq!(err.status, Some(429));
        assert_eq!(err.ratelimit.remaining_requests, Some(0));

        let s = mock.stats();
        assert_eq!(s.by_outcome.get(&Outcome::RateLimited), Some(&2));
        assert_eq!(s.by_status.get("429"), Some(&2));
        let ok_input: u64 = mock
            .arrivals()
            .iter()
            .filter(|a| a.outcome == Outcome::Ok)
            .map(|a| a.input_tokens)
            .sum();
        assert_eq!(s.billed_input_tokens, ok_input);

        // 429s did not use quota: after the advertised wait one request fits again.
        let ms = err.kind.retry_after().unwrap();
        tokio::time::sleep(ms + Duration::from_millis(20)).await;
        c.complete(&request("hi", None), deadline()).await.unwrap();

        // A token quota refuses a request too large for what is left.
        let phase = Phase {
            rate_limit: Some(RateLimit {
                requests: 0,
                tokens: 100,
                window_ms: 60_000,
            }),
            ..fast("tpm")
        };
        mock.set_behaviour(Behaviour::single(phase)).unwrap();
        c.complete(&request("hi", Some(50)), deadline()).await.unwrap();
        let err = c
            .complete(&request("hi", Some(50)), deadline())
            .await
            .unwrap_err();
        assert!(matches!(
            err.kind,
            ErrorKind::RateLimited { retry_after: Some(_) }
        ));
        assert_eq!(err.ratelimit.limit_tokens, Some(100));
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_500_storm_answers_every_request_500_unbilled() {
    bounded(async {
        let mock = start(Behaviour::preset("500-storm").unwrap()).await;
        let c = client(&mock, TimeoutsConfig::default());
        for _ in 0..5 {
            let err = c.complete(&request("hi", None), deadline()).await.unwrap_err();
            assert!(
                matches!(err.kind, ErrorKind::Server { status: 500, .. }),
                "{err:?}"
            );
        }
        let s = mock.stats();
        assert_eq!(s.by_status.get("500"), Some(&5));
        assert_eq!(s.by_outcome.get(&Outcome::ServerError), Some(&5));
        assert_eq!(
            (s.billed_input_tokens, s.billed_output_tokens, s.billed_micro_usd),
            (0, 0, 0)
        );
        assert_eq!(s.phase, "storm");
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hang_cut_by_the_client_is_billed_input_only() {
    bounded(async {
        let phase = Phase {
            hang_share: 1.0,
            ..fast("hang")
        };
        let mock = start(Behaviour::single(phase)).await;
        let c = client(
            &mock,
            TimeoutsConfig {
                first_byte_ms: 300,
                ..TimeoutsConfig::default()
            },
        );
        let req = request("hang on", None);
        let err = c.complete(&req, deadline()).await.unwrap_err();
        assert_eq!(
            err.kind,
            ErrorKind::Timeout {
                phase: TimeoutPhase::FirstByte
            }
        );
        let a = eventually(Duration::from_secs(5), || {
            let a = only_arrival(&mock);
            a.client_gone.then_some(a)
        })
        .await;
        assert_eq!((a.outcome, a.status), (Outcome::Hung, 0));
        assert_eq!((a.input_tokens, a.output_tokens), (input_tokens(&req), 0));
        let s = mock.stats();
        assert_eq!(s.by_status.get("0"), Some(&1));
        assert_eq!(s.billed_output_tokens, 0);
        assert_eq!(s.in_flight, 0);
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stall_bills_the_full_output_after_the_client_is_gone() {
    bounded(async {
        let phase = Phase {
            stall_share: 1.0,
            latency: Latency::uniform(600, 600),
            ..Phase::normal("stall")
        };
        let mock = start(Behaviour::single(phase)).await;
        let c = client(
            &mock,
            TimeoutsConfig {
                read_ms: 200,
                ..TimeoutsConfig::default()
            },
        );
        let req = request("stall please", Some(30));
        let mut s = c.stream(&req, deadline()).await.unwrap();
        let mut err = None;
        while let Some(item) = s.next().await {
            if let Err(e) = item {
                err = Some(e);
            }
        }
        let err = err.expect("the stream was cut");
        assert_eq!(
            err.kind,
            ErrorKind::Timeout {
                phase: TimeoutPhase::Read
            }
        );
        assert_eq!(s.output_chunks(), 1);
        assert!(!s.output_text().is_empty());
        drop(s);
        let a = eventually(Duration::from_secs(3), || {
            let a = only_arrival(&mock);
            a.client_gone.then_some(a)
        })
        .await;
        // Generation (600 ms) has not finished yet when the client gave up (~320 ms).
        assert_eq!((a.outcome, a.status, a.output_tokens), (Outcome::Stalled, 200, 0));
        assert_eq!(a.input_tokens, input_tokens(&req));
        let billed = eventually(Duration::from_secs(3), || {
            let a = only_arrival(&mock);
            (a.output_tokens > 0).then_some(a.output_tokens)
        })
        .await;
        assert!(billed > 0 && billed <= 30, "{billed}");
        assert_eq!(mock.stats().billed_output_tokens, billed);

        // A JSON answer stalls after its first bytes.
        let err = c.complete(&req, deadline()).await.unwrap_err();
        assert_eq!(
            err.kind,
            ErrorKind::Timeout {
                phase: TimeoutPhase::Read
            }
        );
        let s = mock.stats();
        assert_eq!(s.by_outcome.get(&Outcome::Stalled), Some(&2));
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn phases_switch_in_time_and_target_models() {
    bounded(async {
        let storm = Phase {
            error_share: 1.0,
            ..fast("storm")
        }
        .lasting(400)
        .on_models(&[MODEL]);
        let mock = start(Behaviour {
            phases: vec![storm, fast("recovery")],
        })
        .await;
        let c = client(&mock, TimeoutsConfig::default());
        let err = c.complete(&request("hi", None), deadline()).await.unwrap_err();
        assert!(matches!(err.kind, ErrorKind::Server { status: 500, .. }));
        // Another model is not hit by the storm.
        let mut other = request("hi", None);
        other.model = "backup".into();
        c.complete(&other, deadline()).await.unwrap();
        assert_eq!(mock.stats().phase, "storm");

        tokio::time::sleep_until(mock.behaviour_set_at() + Duration::from_millis(450)).await;
        c.complete(&request("hi", None), deadline()).await.unwrap();
        assert_eq!(mock.stats().phase, "recovery");
        let phases: Vec<String> = mock.arrivals().into_iter().map(|a| a.phase).collect();
        assert_eq!(phases, ["storm", "storm", "recovery"]);

        // Setting a behaviour restarts the phase clock.
        mock.set_behaviour(mock.behaviour()).unwrap();
        assert_eq!(mock.stats().phase, "storm");
        assert!(mock.behaviour_set_at() > mock.started());
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_endpoints_set_behaviour_and_report() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let http = reqwest::Client::new();
        let admin = |p: &str| format!("http://{}/mock/{p}", mock.addr());

        let valid = json!({"phases": [{"name": "storm", "errorShare": 1.0}]});
        let r = http.put(admin("behaviour")).json(&valid).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let got: Behaviour = http
            .get(admin("behaviour"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got.phases[0].name, "storm");
        assert_eq!(mock.behaviour(), got);

        let bad = json!({"phases": [{"name": "x", "hangShare": 2.0}]});
        let r = http.put(admin("behaviour")).json(&bad).send().await.unwrap();
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"], "phases[0].hangShare: must be between 0 and 1");

        let unknown = json!({"phases": [{"name": "x", "latency": {"minMs": 1, "maxMs": 2, "bogus": 1}}]});
        let r = http.put(admin("behaviour")).json(&unknown).send().await.unwrap();
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        let msg = e["error"].as_str().unwrap();
        assert!(msg.starts_with("phases[0].latency.bogus: unknown field"), "{msg}");

        let r = http.put(admin("behaviour")).body("{").send().await.unwrap();
        assert_eq!(r.status(), 400);
        assert_eq!(mock.behaviour(), got, "a refused behaviour changes nothing");

        let r = http.put(admin("scenario/rate-limited")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(mock.behaviour(), Behaviour::preset("rate-limited").unwrap());
        let r = http.put(admin("scenario/nope")).send().await.unwrap();
        assert_eq!(r.status(), 404);
        let e: Value = r.json().await.unwrap();
        assert!(e["error"].as_str().unwrap().contains("storm-then-recovery"));

        let url = format!("{}/chat/completions", mock.base_url());
        http.post(&url).json(&wire("hi")).send().await.unwrap();
        let stats: Value = http
            .get(admin("stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(stats["requests"], 1);
        assert_eq!(stats["byOutcome"]["ok"], 1);
        let r = http.post(admin("reset")).send().await.unwrap();
        assert!(r.status().is_success());
        let arrivals: Vec<Arrival> = http
            .get(admin("arrivals"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(arrivals.is_empty());
        assert_eq!(mock.stats().requests, 0);
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn arrivals_carry_the_pressure_headers() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let http = reqwest::Client::new();
        let url = format!("{}/chat/completions", mock.base_url());
        http.post(&url)
            .header("x-pressure-request-id", "event-42")
            .header("x-pressure-attempt", "3")
            .header("x-pressure-probe", "true")
            .json(&wire("tagged"))
            .send()
            .await
            .unwrap();
        http.post(&url).json(&wire("plain")).send().await.unwrap();
        let arrivals: Vec<Arrival> = http
            .get(format!("http://{}/mock/arrivals", mock.addr()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(arrivals.len(), 2);
        let (a, b) = (&arrivals[0], &arrivals[1]);
        assert_eq!((a.seq, b.seq), (0, 1));
        assert_eq!(a.request_id.as_deref(), Some("event-42"));
        assert_eq!((a.attempt, a.probe), (Some(3), true));
        assert_eq!((b.request_id.as_deref(), b.attempt, b.probe), (None, None, false));
        assert!(a.at_ms <= b.at_ms && a.at_ms >= 0.0);
        assert_eq!(a.model, MODEL);
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_get_400_and_are_not_billed() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let c = client(&mock, TimeoutsConfig::default());
        let err = c
            .complete(
                &request(&format!("please {BAD_REQUEST_MARKER} fail"), None),
                deadline(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::BadRequest);
        assert_eq!(err.status, Some(400));

        let http = reqwest::Client::new();
        let url = format!("{}/chat/completions", mock.base_url());
        for body in [
            "{not json",
            r#"{"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m"}"#,
        ] {
            let r = http
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{body}");
            let e: Value = r.json().await.unwrap();
            assert_eq!(e["error"]["type"], "invalid_request_error");
        }
        let s = mock.stats();
        assert_eq!(s.by_outcome.get(&Outcome::BadRequest), Some(&4));
        assert_eq!(s.by_status.get("400"), Some(&4));
        assert_eq!((s.billed_input_tokens, s.billed_micro_usd), (0, 0));
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundreds_of_concurrent_requests_and_a_bounded_shutdown() {
    bounded(async {
        // Long enough that all 250 are open at once even on a loaded machine.
        let phase = Phase {
            latency: Latency::uniform(1_000, 1_200),
            ..Phase::normal("normal")
        };
        let mock = start(Behaviour::single(phase)).await;
        let c = client(
            &mock,
            TimeoutsConfig {
                max_connections: 256,
                ..TimeoutsConfig::default()
            },
        );
        let calls = (0..250).map(|i| {
            let c = c.clone();
            async move {
                let req = request(&format!("request {i}"), Some(8));
                if i % 2 == 0 {
                    c.complete(&req, deadline()).await.map(drop)
                } else {
                    let mut s = c.stream(&req, deadline()).await?;
                    while let Some(item) = s.next().await {
                        item?;
                    }
                    Ok(())
                }
            }
        });
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(Result::is_ok));
        let s = mock.stats();
        assert_eq!(s.requests, 250);
        assert_eq!(s.by_outcome.get(&Outcome::Ok), Some(&250));
        assert!(s.max_in_flight >= 200, "{}", s.max_in_flight);
        assert_eq!(s.in_flight, 0);

        // Shutdown ends a hanging request at once.
        mock.set_behaviour(Behaviour::single(Phase {
            hang_share: 1.0,
            ..fast("hang")
        }))
        .unwrap();
        let hanging = tokio::spawn({
            let c = c.clone();
            async move { c.complete(&request("hang", None), deadline()).await }
        });
        eventually(Duration::from_secs(3), || {
            (mock.stats().in_flight == 1).then_some(())
        })
        .await;
        let t = Instant::now();
        mock.shutdown().await;
        assert!(t.elapsed() < Duration::from_secs(4));
        assert!(hanging.await.unwrap().is_err());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousands_of_requests_are_each_answered_and_counted() {
    bounded(async {
        let instant = Phase {
            latency: Latency::uniform(0, 0),
            ..Phase::normal("instant")
        };
        let mock = start(Behaviour::single(instant)).await;
        let c = client(
            &mock,
            TimeoutsConfig {
                max_connections: 64,
                ..TimeoutsConfig::default()
            },
        );
        let n = 3_000u64;
        let results: Vec<_> = futures::stream::iter(0..n)
            .map(|i| {
                let c = c.clone();
                async move { c.complete(&request(&format!("r{i}"), Some(4)), deadline()).await }
            })
            .buffer_unordered(64)
            .collect()
            .await;
        // Counts, not speed: a rate bound would measure the shared machine.
        assert!(results.iter().all(Result::is_ok));
        let stats = mock.stats();
        assert_eq!(stats.requests, n);
        assert_eq!(stats.by_status.get("200"), Some(&n));
        assert_eq!(mock.arrivals().len() as u64, n);
        assert_eq!(stats.in_flight, 0);
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_leaving_mid_answer_is_still_billed_the_output() {
    bounded(async {
        let slow = Phase {
            latency: Latency::uniform(500, 500),
            ..Phase::normal("slow")
        };
        let mock = start(Behaviour::single(slow)).await;
        let c = client(
            &mock,
            TimeoutsConfig {
                first_byte_ms: 150,
                ..TimeoutsConfig::default()
            },
        );
        // JSON: the client gives up before the answer.
        let err = c
            .complete(&request("json", Some(12)), deadline())
            .await
            .unwrap_err();
        assert!(matches!(err.kind, ErrorKind::Timeout { .. }), "{err:?}");
        // Stream: the client reads the first content chunk (at ~100 ms) and leaves.
        let mut s = c.stream(&request("stream", Some(12)), deadline()).await.unwrap();
        while s.output_chunks() == 0 {
            s.next().await.unwrap().unwrap();
        }
        drop(s);
        let arrivals = eventually(Duration::from_secs(3), || {
            let a = mock.arrivals();
            a.iter()
                .all(|a| a.client_gone && a.output_tokens == 12)
                .then_some(a)
        })
        .await;
        assert_eq!(arrivals.len(), 2);
        assert!(arrivals
            .iter()
            .all(|a| a.outcome == Outcome::Ok && a.status == 200));
        let s = mock.stats();
        assert_eq!((s.billed_output_tokens, s.in_flight), (24, 0));
        mock.shutdown().await;
    })
    .await;
}
