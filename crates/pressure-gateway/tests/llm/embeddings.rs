//! `POST /v1/embeddings` through the gateway: answered in OpenAI's shape
//! with the degradation header, the input-token limiter (429 with
//! `Retry-After`), fallback to the second embedding model on a 500, retries
//! priced on input tokens and stopped by the money budget, the breaker per
//! (provider, model) (open: no call, 503 with `Retry-After`), 400s that
//! never reach the provider, chat use cases refusing embeddings (and
//! embedding use cases refusing chat), the route limit, and the metrics.
//! Also the inline mock provider's `/v1/embeddings` (see [`provider`]).

use super::{bounded, config, no_limits, Mock, MockState, TestGateway};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use pressure_llm::tokens::TokenCounter;
use serde_json::{json, Value};
use std::sync::Arc;

/// Vector length of the inline mock when the request gives no `dimensions`.
pub(crate) const MOCK_DIMENSIONS: usize = 4;

/// The inline mock's `POST /v1/embeddings`: counts the call per model (and
/// its tags), answers 500 for failing models, else one vector per input
/// (`dimensions` long, default [`MOCK_DIMENSIONS`]; component `j` of input
/// `i` is `i + j / 10`), base64 when asked, with `usage` counted like the
/// gateway counts (tiktoken for texts, the ids for token arrays).
pub(crate) async fn provider(
    State(state): State<Arc<MockState>>,
    headers: http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    state.called(&model, &headers);
    if state.failing.lock().contains(&model) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": {"message": "mock failure", "type": "server_error"}})),
        )
            .into_response();
    }
    let inputs: Vec<Value> = match &body["input"] {
        Value::Array(items) if items.iter().all(Value::is_number) => vec![body["input"].clone()],
        Value::Array(items) => items.clone(),
        one => vec![one.clone()],
    };
    let counter = TokenCounter::new();
    let tokens: u64 = inputs
        .iter()
        .map(|i| match i {
            Value::String(t) => counter.count_text(&model, t).expect("tokenizer"),
            Value::Array(ids) => ids.len() as u64,
            _ => 0,
        })
        .sum();
    let dims = body["dimensions"]
        .as_u64()
        .map_or(MOCK_DIMENSIONS, |d| d as usize);
    let base64 = body["encoding_format"] == "base64";
    let data: Vec<Value> = (0..inputs.len())
        .map(|i| {
            let v: Vec<f32> = (0..dims).map(|j| i as f32 + j as f32 / 10.0).collect();
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Json(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response()
}

/// `section` with embedding models on the mock and their use cases:
/// `search` (`emb-a`), `search-fallback` (`emb-bad` → `emb-a`),
/// `search-limited` (`emb-limited`: 30 input tokens per minute, 2 s
/// deadline) and `search-short` (`emb-short`: at most 5 tokens per input).
pub(crate) fn with_embeddings(mut section: Value) -> Value {
    let model = |name: &str, extra: Value| {
        let mut m = json!({ "provider": "mock", "model": name, "kind": "embedding",
                            "price": { "inputMicroUsdPer1M": 1_000_000 } });
        if let (Some(m), Value::Object(extra)) = (m.as_object_mut(), extra) {
            m.extend(extra);
        }
        m
    };
    let llm = &mut section["llm"];
    let models = llm["models"].as_array_mut().expect("models");
    models.push(model("emb-a", json!({})));
    models.push(model("emb-bad", json!({})));
    models.push(model(
        "emb-limited",
        json!({ "limits": { "inputTokensPerMinute": 30 } }),
    ));
    models.push(model("emb-short", json!({ "maxInputTokens": 5 })));
    let use_cases = llm["useCases"].as_object_mut().expect("useCases");
    use_cases.insert("search".into(), json!({ "chain": [ { "model": "mock/emb-a" } ] }));
    use_cases.insert(
        "search-fallback".into(),
        json!({ "chain": [ { "model": "mock/emb-bad" }, { "model": "mock/emb-a" } ],
                "retry": { "maxAttempts": 1 } }),
    );
    use_cases.insert(
        "search-limited".into(),
        json!({ "chain": [ { "model": "mock/emb-limited" } ], "totalMs": 2000 }),
    );
    use_cases.insert(
        "search-short".into(),
        json!({ "chain": [ { "model": "mock/emb-short" } ] }),
    );
    section
}

/// `POST {path}` with a raw body: status, headers and the JSON answer.
pub(crate) async fn post(gw: &TestGateway, path: &str, body: &str) -> (StatusCode, http::HeaderMap, Value) {
    let req = Request::post(format!("http://{}{path}", gw.addr))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("valid request");
    let (status, headers, bytes) = gw.send(req).await;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("JSON body ({e}): {}", String::from_utf8_lossy(&bytes)));
    (status, headers, value)
}

async fn embed(gw: &TestGateway, body: Value) -> (StatusCode, http::HeaderMap, Value) {
    post(gw, "/v1/embeddings", &body.to_string()).await
}

fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("<none>")
}

async fn gateway(mock: &Mock) -> TestGateway {
    TestGateway::start(with_embeddings(config(mock, no_limits()))).await
}

#[tokio::test]
async fn an_embedding_is_answered_through_the_pipeline() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = gateway(&mock).await;
        let (status, headers, body) = embed(&gw, json!({"model": "search", "input": ["one", "two"]})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(header(&headers, "x-pressure-degradation"), "primary");
        assert_ne!(header(&headers, "x-request-id"), "<none>");
        assert_eq!(body["object"], "list");
        assert_eq!(body["model"], "emb-a");
        let data = body["data"].as_array().expect("data");
        assert_eq!(data.len(), 2);
        for (i, d) in data.iter().enumerate() {
            assert_eq!(d["object"], "embedding");
            assert_eq!(d["index"], i);
            assert_eq!(d["embedding"].as_array().map(Vec::len), Some(MOCK_DIMENSIONS));
        }
        assert_eq!(body["usage"]["prompt_tokens"], body["usage"]["total_tokens"]);
        assert_eq!(body["pressure"]["degradation"], "primary");
        assert_eq!(body["pressure"]["level"], 0);
        assert_eq!(body["pressure"]["attempts"], 1);
        assert_eq!(mock.hits_of("emb-a"), 1);
        // The caller's request id reaches the provider with the attempt.
        assert_eq!(mock.state.tags.lock()[0].2, "1");

        // base64 and `dimensions` go to the provider; its base64 comes back unchanged.
        let (status, _, packed) = embed(
            &gw,
            json!({"model": "search", "input": [[1, 2, 3]], "encoding_format": "base64", "dimensions": 2}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{packed}");
        let bytes: Vec<u8> = [0.0f32, 0.1f32].iter().flat_map(|x| x.to_le_bytes()).collect();
        let want = base64::engine::general_purpose::STANDARD.encode(bytes);
        assert_eq!(packed["data"][0]["embedding"], json!(want));
        assert_eq!(
            packed["usage"]["prompt_tokens"], 3,
            "token ids count as themselves"
        );

        let text = gw.metrics().await;
        for line in [
            "pressure_llm_requests_total 2",
            "pressure_llm_embedding_requests_total 2",
            "pressure_llm_attempts_total 2",
            "pressure_llm_answers_total{degradation=\"primary\"} 2",
            "pressure_llm_breaker_state{provider=\"mock\",model=\"emb-a\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing `{line}` in:\n{text}");
        }
        let spent = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name}"))
                .parse()
                .expect("a number")
        };
        assert!(spent("pressure_llm_embedding_spent_micro_usd_total") > 0);
        assert_eq!(
            spent("pressure_llm_embedding_spent_micro_usd_total"),
            spent("pressure_llm_spent_micro_usd_total"),
            "only embeddings were bought"
        );
    })
    .await;
}

#[tokio::test]
async fn spent_input_tokens_are_a_429_with_retry_after() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = gateway(&mock).await;
        // 20 token ids of 30 per minute: the first fits, the second cannot
        // within the use case's 2 s.
        let body = json!({"model": "search-limited", "input": [vec![7; 20]]});
        let (status, _, first) = embed(&gw, body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{first}");
        let (status, headers, refused) = embed(&gw, body).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
        let retry: u64 = header(&headers, "retry-after")
            .parse()
            .expect("Retry-After seconds");
        // The window is a minute: the wait, rounded up, is at most 61 s.
        assert!((1..=61).contains(&retry), "Retry-After {retry}");
        assert_eq!(refused["error"]["type"], "rate_limit_error");
        assert_eq!(refused["error"]["code"], "rate_limit_exceeded");
        assert_eq!(mock.hits_of("emb-limited"), 1, "the refused request made no call");
        // A smaller input still fits what is left.
        let (status, _, _) = embed(&gw, json!({"model": "search-limited", "input": [vec![7; 5]]})).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(mock.hits_of("emb-limited"), 2);
    })
    .await;
}

#[tokio::test]
async fn a_500_falls_back_to_the_second_embedding_model() {
    bounded(async {
        let mock = Mock::start().await;
        mock.fail("emb-bad");
        let gw = gateway(&mock).await;
        let (status, headers, body) = embed(&gw, json!({"model": "search-fallback", "input": "hi"})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(header(&headers, "x-pressure-degradation"), "backup");
        assert_eq!(body["pressure"]["level"], 1);
        assert_eq!(body["pressure"]["attempts"], 2);
        assert_eq!(body["model"], "emb-a");
        assert_eq!((mock.hits_of("emb-bad"), mock.hits_of("emb-a")), (1, 1));
        // Every level failing is the provider's error, not a success.
        mock.fail("emb-a");
        let (status, _, body) = embed(&gw, json!({"model": "search-fallback", "input": "hi"})).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
        assert_eq!((mock.hits_of("emb-bad"), mock.hits_of("emb-a")), (2, 2));
    })
    .await;
}

#[tokio::test]
async fn bad_requests_never_reach_the_provider() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = gateway(&mock).await;
        let cases: [(&str, &str); 14] = [
            (r#"{"model":"search"}"#, "input"),
            (r#"{"model":"search","input":null}"#, "input"),
            (r#"{"model":"search","input":[]}"#, "input"),
            (r#"{"model":"search","input":""}"#, "input"),
            (r#"{"model":"search","input":["a",""]}"#, "input"),
            (r#"{"model":"search","input":[[]]}"#, "input"),
            (r#"{"model":"search","input":{"text":"a"}}"#, "input"),
            (r#"{"model":"search","input":["a",1]}"#, "input"),
            (r#"{"input":"a"}"#, "model"),
            (r#"{"model":7,"input":"a"}"#, "model"),
            (r#"{"model":"search","input":"a","dimensions":0}"#, "dimensions"),
            (r#"{"model":"search","input":"a","dimensions":"8"}"#, "dimensions"),
            (
                r#"{"model":"search","input":"a","encoding_format":"hex"}"#,
                "encoding_format",
            ),
            (
                r#"{"model":"search-short","input":["ok","one two three four five six seven"]}"#,
                "input",
            ),
        ];
        for (body, param) in cases {
            let (status, _, answer) = post(&gw, "/v1/embeddings", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            assert_eq!(answer["error"]["type"], "invalid_request_error", "{body}");
            assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
            assert!(answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
        for body in ["{", "[1]"] {
            let (status, _, _) = post(&gw, "/v1/embeddings", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        }
        assert_eq!(mock.hits(), 0);
        // The short model still answers what fits.
        let (status, _, body) = embed(&gw, json!({"model": "search-short", "input": "ok"})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    })
    .await;
}

#[tokio::test]
async fn use_cases_answer_only_their_own_kind() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = gateway(&mock).await;
        let (status, _, body) = embed(&gw, json!({"model": "support", "input": "hi"})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["param"], "model");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("chat completions"), "{message}");
        let chat = json!({"model": "search", "messages": [{"role": "user", "content": "hi"}]});
        let (status, _, body) = post(&gw, "/v1/chat/completions", &chat.to_string()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["param"], "model");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("/v1/embeddings"), "{message}");
        let (status, _, body) = embed(&gw, json!({"model": "no-such", "input": "hi"})).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(mock.hits(), 0);
    })
    .await;
}

#[tokio::test]
async fn route_limits_floor_embeddings_and_models() {
    bounded(async {
        let mock = Mock::start().await;
        let limit = |resource: &str, prefix: &str| {
            json!({ "resource": resource, "pathPrefix": prefix, "limits": { "requestsPerMinute": 1 } })
        };
        let section = with_embeddings(config(
            &mock,
            json!({ "enabled": true, "perRoute": [limit("gateway:route:emb", "/v1/embeddings"),
                                                  limit("gateway:route:models", "/v1/models")] }),
        ));
        let gw = TestGateway::start(section).await;
        let body = json!({"model": "search", "input": "hi"});
        assert_eq!(embed(&gw, body.clone()).await.0, StatusCode::OK);
        let (status, headers, refused) = embed(&gw, body).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_ne!(header(&headers, "retry-after"), "<none>");
        assert_eq!(refused["error"]["type"], "rate_limit_error", "OpenAI's shape: {refused}");
        assert_eq!(mock.hits_of("emb-a"), 1);
        assert_eq!(gw.get("/v1/models", None).await, StatusCode::OK);
        assert_eq!(gw.get("/v1/models/search", None).await, StatusCode::TOO_MANY_REQUESTS);
    })
    .await;
}

/// `section` with one more use case.
fn with_use_case(mut section: Value, name: &str, use_case: Value) -> Value {
    section["llm"]["useCases"][name] = use_case;
    section
}

#[tokio::test]
async fn retries_are_priced_on_input_tokens_and_stop_at_the_budget() {
    bounded(async {
        let mock = Mock::start().await;
        mock.fail("emb-bad");
        let retry = |budget: Option<u64>| {
            let mut r = json!({ "maxAttempts": 3, "baseDelayMs": 1, "maxDelayMs": 5 });
            if let Some(b) = budget {
                r["budgetMicroUsd"] = json!(b);
            }
            json!({ "chain": [ { "model": "mock/emb-bad" } ], "retry": r })
        };
        let section = with_embeddings(config(&mock, no_limits()));
        let section = with_use_case(section, "free", retry(None));
        let section = with_use_case(section, "poor", retry(Some(1_500)));
        let gw = TestGateway::start(section).await;
        // 1000 token ids at $1 per 1M input tokens: 1000 µ$ per attempt.
        let body = |use_case: &str| json!({"model": use_case, "input": [vec![1; 1000]]});
        let (status, _, answer) = embed(&gw, body("free")).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}");
        assert_eq!(mock.hits_of("emb-bad"), 3, "three attempts without a budget");
        let (status, _, answer) = embed(&gw, body("poor")).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}");
        assert_eq!(
            mock.hits_of("emb-bad"),
            4,
            "a second attempt would have spent 2000 µ$ of a 1500 µ$ budget"
        );
        let text = gw.metrics().await;
        assert!(
            text.lines()
                .any(|l| l == "pressure_llm_failed_spent_micro_usd_total 4000"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l == "pressure_llm_retries_total 2"),
            "{text}"
        );
    })
    .await;
}

#[tokio::test]
async fn an_open_breaker_costs_no_call_and_says_when_to_return() {
    bounded(async {
        let mock = Mock::start().await;
        mock.fail("emb-bad");
        let mut section = with_embeddings(config(&mock, no_limits()));
        section["llm"]["breaker"] = json!({ "minimumCalls": 2, "openWaitMs": 30_000 });
        let section = with_use_case(
            section,
            "alone",
            json!({ "chain": [ { "model": "mock/emb-bad" } ], "retry": { "maxAttempts": 1 } }),
        );
        let gw = TestGateway::start(section).await;
        let body = json!({"model": "alone", "input": "hi"});
        for _ in 0..2 {
            assert_eq!(embed(&gw, body.clone()).await.0, StatusCode::BAD_GATEWAY);
        }
        assert_eq!(mock.hits_of("emb-bad"), 2);
        let (status, headers, answer) = embed(&gw, body).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        let retry: u64 = header(&headers, "retry-after").parse().expect("Retry-After");
        assert!((1..=30).contains(&retry), "the breaker's open time: {retry}");
        assert_eq!(mock.hits_of("emb-bad"), 2, "an open breaker makes no call");
        // The fallback chain skips the open model without calling it.
        let (status, headers, _) = embed(&gw, json!({"model": "search-fallback", "input": "hi"})).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(header(&headers, "x-pressure-degradation"), "backup");
        assert_eq!((mock.hits_of("emb-bad"), mock.hits_of("emb-a")), (2, 1));
        let text = gw.metrics().await;
        let open = "pressure_llm_breaker_state{provider=\"mock\",model=\"emb-bad\"} 2";
        assert!(text.lines().any(|l| l == open), "{text}");
    })
    .await;
}
