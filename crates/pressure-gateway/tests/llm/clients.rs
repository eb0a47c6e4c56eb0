//! What OpenAI clients rely on (docs/architecture.md#what-openai-and-anthropic-clients-expect): the usage chunk only when
//! asked, a queued answer an SDK parses, `Retry-After` on every give-up, and
//! the `400`s OpenAI itself answers, all without a provider call.

use super::{bounded, config, degradation, hello, no_limits, Mock, TestGateway};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

/// Streams `body`; the chunks (JSON) before `[DONE]`.
async fn stream_chunks(gw: &TestGateway, mut body: Value) -> Vec<Value> {
    body["stream"] = json!(true);
    let req = Request::post(format!("http://{}/v1/chat/completions", gw.addr))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let (status, _, bytes) = gw.send(req).await;
    let text = String::from_utf8(bytes.to_vec()).expect("utf-8 events");
    assert_eq!(status.as_u16() / 100, 2, "{text}");
    let events: Vec<&str> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").expect("a data event"))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{events:?}");
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk JSON"))
        .collect()
}

fn with(mut body: Value, field: &str, value: Value) -> Value {
    body[field] = value;
    body
}

#[tokio::test]
async fn a_stream_carries_usage_only_when_asked() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let unasked = [
            hello("support"),
            with(
                hello("support"),
                "stream_options",
                json!({"include_usage": false}),
            ),
            with(hello("queue"), "stream_options", json!({})),
        ];
        for body in unasked {
            let chunks = stream_chunks(&gw, body.clone()).await;
            assert!(!chunks.is_empty(), "{body}");
            for c in &chunks {
                // The loop every tutorial writes: chunk.choices[0].
                assert!(
                    c["choices"][0].is_object(),
                    "{body}: a chunk without choices: {c}"
                );
                assert!(c["usage"].is_null(), "{body}: usage nobody asked for: {c}");
            }
        }

        for use_case in ["support", "queue"] {
            let asked = with(hello(use_case), "stream_options", json!({"include_usage": true}));
            let chunks = stream_chunks(&gw, asked).await;
            let (last, rest) = chunks.split_last().expect("chunks");
            assert_eq!(last["choices"], json!([]), "{use_case}: {chunks:?}");
            assert!(last["usage"]["total_tokens"].is_u64(), "{use_case}: {last}");
            assert!(rest.iter().all(|c| c["choices"][0].is_object()), "{chunks:?}");
            if use_case == "support" {
                assert_eq!(last["usage"]["total_tokens"], 11, "the provider's usage");
            }
        }
        // The gateway asks the provider for usage every time (to reconcile).
        assert_eq!(mock.hits_of("good"), 3);
    })
    .await;
}

#[tokio::test]
async fn a_queued_answer_is_a_chat_completion() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, headers, body) = gw.chat(hello("queue")).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(degradation(&headers), "manual_queue");
        let ticket = body["id"].as_str().expect("ticket id").to_owned();
        assert_eq!(body["pressure"]["ticket"], ticket.as_str());
        assert_eq!(
            headers.get("x-pressure-ticket").expect("ticket header"),
            ticket.as_str()
        );
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["role"], "assistant");
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        let content = body["choices"][0]["message"]["content"]
            .as_str()
            .expect("content");
        assert!(
            content.contains("queued") && content.contains(&ticket),
            "{content}"
        );
        assert_eq!(body["usage"]["total_tokens"], 0);

        let chunks = stream_chunks(&gw, hello("queue")).await;
        let delta = chunks[0]["choices"][0]["delta"]["content"]
            .as_str()
            .expect("delta");
        assert!(delta.contains("queued"), "{chunks:?}");
        let streamed_ticket = chunks[0]["pressure_ticket"].as_str().expect("pressure_ticket");
        assert!(delta.contains(streamed_ticket), "{chunks:?}");
        assert_ne!(streamed_ticket, ticket, "each request gets its own ticket");
        assert_eq!(mock.hits(), 0);
    })
    .await;
}

/// `Retry-After` (seconds) and `retry-after-ms` of a response.
fn retry_headers(headers: &http::HeaderMap) -> (u64, u64) {
    let get = |name: &str| -> u64 {
        headers
            .get(name)
            .unwrap_or_else(|| panic!("{name} present: {headers:?}"))
            .to_str()
            .expect("ascii")
            .parse()
            .expect("a number")
    };
    (get("retry-after"), get("retry-after-ms"))
}

#[tokio::test]
async fn giving_up_says_when_to_ask_again() {
    bounded(async {
        let mock = Mock::start().await;
        let mut section = config(&mock, no_limits());
        section["llm"]["breaker"] = json!({"minimumCalls": 2, "failureRateThreshold": 0.5,
                                           "openWaitMs": 7000, "windowMs": 10000});
        let gw = TestGateway::start(section).await;

        // Every level answered 429 with `retry-after: 2`: the client hears it.
        let (status, headers, body) = gw.chat(hello("busy")).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        let (secs, ms) = retry_headers(&headers);
        assert_eq!(secs, 2, "{headers:?}");
        assert!((1_000..=2_000).contains(&ms), "retry-after-ms {ms}");
        assert!(
            headers.get("x-should-retry").is_none(),
            "a rate limit is worth a retry"
        );
        assert_eq!((mock.hits_of("busy-a"), mock.hits_of("busy-b")), (1, 1));

        // The breaker of `bad` opens after two failures; then the 503 says
        // how long it stays open, and no call is made.
        mock.fail("bad");
        for _ in 0..2 {
            let (status, _, body) = gw.chat(hello("only-bad")).await;
            assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
        }
        let (status, headers, body) = gw.chat(hello("only-bad")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"]["code"], "service_unavailable");
        let (secs, ms) = retry_headers(&headers);
        assert!((6..=7).contains(&secs), "the breaker's open time: {secs}");
        assert!((5_000..=7_000).contains(&ms), "{ms}");
        assert_eq!(mock.hits_of("bad"), 2, "an open breaker makes no call");

        // Primary open, backup rate-limited: the sooner of the two.
        let (status, headers, body) = gw.chat(hello("bad-then-busy")).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(
            retry_headers(&headers).0,
            2,
            "the backup's 2 s beat the breaker's 7 s"
        );
        assert_eq!(mock.hits_of("bad"), 2);
    })
    .await;
}

#[tokio::test]
async fn what_openai_refuses_never_reaches_the_provider() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let cases = [
            (
                with(hello("support"), "messages", json!([])),
                "messages",
                "empty_array",
            ),
            (
                with(hello("support"), "max_tokens", json!(0)),
                "max_tokens",
                "integer_below_min_value",
            ),
            (
                with(hello("support"), "temperature", json!("hot")),
                "temperature",
                "invalid_type",
            ),
            (
                with(hello("support"), "temperature", json!(3)),
                "temperature",
                "decimal_above_max_value",
            ),
            (
                with(
                    hello("support"),
                    "messages",
                    json!([{"role": "robot", "content": "x"}]),
                ),
                "messages[0].role",
                "invalid_value",
            ),
            (
                with(hello("support"), "stream_options", json!({"include_usage": true})),
                "stream_options",
                "invalid_value",
            ),
            (with(hello("support"), "n", json!("two")), "n", "invalid_type"),
            (
                with(hello("support"), "stop", json!([1, 2])),
                "stop[0]",
                "invalid_type",
            ),
        ];
        for (body, param, code) in cases {
            let (status, _, answer) = gw.chat(body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
            assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
            assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
        }
        // The same refusal for a stream.
        let body = with(
            with(hello("support"), "max_tokens", json!(0)),
            "stream",
            json!(true),
        );
        let (status, _, answer) = gw.chat(body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"]["param"], "max_tokens");
        assert_eq!(mock.hits(), 0, "no refused request reached the provider");
    })
    .await;
}

#[tokio::test]
async fn the_manual_queue_is_listed_and_drained_on_the_memory_backend() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, body) = gw.admin_json("/admin/pressure/queue").await;
        assert_eq!((status, body.clone()), (StatusCode::OK, json!({"items": []})));

        let mut tickets = Vec::new();
        for text in ["first", "second", "third"] {
            let body = json!({"model": "queue", "messages": [{"role": "user", "content": text}]});
            let (status, _, answer) = gw.chat(body).await;
            assert_eq!(status, StatusCode::ACCEPTED);
            tickets.push(answer["id"].as_str().expect("ticket").to_owned());
        }
        let (status, body) = gw.admin_json("/admin/pressure/queue?count=2").await;
        assert_eq!(status, StatusCode::OK);
        let listed: Vec<&str> = body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["ticket"].as_str().expect("ticket"))
            .collect();
        assert_eq!(
            listed,
            [tickets[0].as_str(), tickets[1].as_str()],
            "oldest first, count honoured"
        );
        assert_eq!(body["items"][0]["use_case"], "queue");
        assert_eq!(body["items"][0]["request"]["messages"][0]["content"], "first");

        let req = Request::post(format!("http://{}/admin/pressure/queue/drain?count=2", gw.admin))
            .body(Full::new(Bytes::new()))
            .expect("request");
        let (status, _, bytes) = gw.send(req).await;
        assert_eq!(status, StatusCode::OK);
        let drained: Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(drained["drained"], 2);
        assert_eq!(drained["items"][1]["ticket"], tickets[1].as_str());

        // Listing does not remove; draining does.
        let (_, body) = gw.admin_json("/admin/pressure/queue").await;
        let left: Vec<&str> = body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["ticket"].as_str().expect("ticket"))
            .collect();
        assert_eq!(left, [tickets[2].as_str()]);
    })
    .await;
}
