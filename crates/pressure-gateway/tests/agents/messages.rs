//! `POST /v1/messages` and `/v1/messages/count_tokens`: an Anthropic
//! provider gets the agent's request as it came and its answer goes back as
//! it came; a chat provider's answer is rendered as a Messages answer, with
//! the hints the translation dropped named; content only Anthropic's wire
//! carries never goes to another wire.

use super::fake::{fake_message, Fake};
use super::support::{bounded, TestGateway};
use super::*;
use pressure_mock::Phase;

/// A gateway whose use case `claude` (every `claude-*` id) is `chain`.
async fn gateway_of(providers: Value, models: Vec<Value>, chain: &[&str]) -> TestGateway {
    let use_cases = json!({ "claude": use_case(chain, &["claude-*"]) });
    TestGateway::start(section(providers, models, use_cases, roomy())).await
}

/// A Messages request of Claude Code's kind.
fn hello(stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-4-5-20250929", "max_tokens": 256, "stream": stream,
        "messages": [ { "role": "user", "content": "Say hello." } ]
    })
}

/// A phase in which `models` are overloaded (`529` on Anthropic's wire).
pub(crate) fn overloaded(models: &[&str]) -> Phase {
    let mut phase = Phase::normal("storm").on_models(models);
    phase.overload_share = 1.0;
    phase
}

#[tokio::test]
async fn a_native_request_reaches_an_anthropic_provider_as_it_came() {
    bounded(async {
        let fake = Fake::start().await;
        let gw = gateway_of(
            json!({ "anth": provider("anthropic", &fake.base_url()) }),
            vec![model("anth", "claude-m")],
            &["anth/claude-m"],
        )
        .await;
        let mut body = hello(false);
        body["brand_new_field"] = json!({ "nested": [1, 2, 3] });
        body["metadata"] = json!({ "user_id": "user-7" });
        body["max_tokens"] = json!(2048);
        body["thinking"] = json!({ "type": "enabled", "budget_tokens": 1024 });
        let mut headers = ANTHROPIC_HEADERS.to_vec();
        headers.push((
            "anthropic-beta",
            "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
        ));
        let r = post_raw(&gw, "/v1/messages", body.to_string(), &headers).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.json(), fake_message(), "the provider's body, verbatim");
        assert_eq!(
            header(&r, "x-pressure-dropped"),
            "<none>",
            "nothing dropped natively"
        );
        assert_eq!(header(&r, "x-pressure-degradation"), "primary");

        let seen = fake.seen();
        assert_eq!(seen.len(), 1, "one provider call: {seen:?}");
        let call = &seen[0];
        assert_eq!(call.path, "/v1/messages");
        assert_eq!(
            call.body["brand_new_field"],
            json!({ "nested": [1, 2, 3] }),
            "unknown field kept"
        );
        assert_eq!(call.body["metadata"], json!({ "user_id": "user-7" }));
        assert_eq!(
            call.body["thinking"],
            json!({ "type": "enabled", "budget_tokens": 1024 })
        );
        assert_eq!(call.body["messages"], body["messages"]);
        assert_eq!(call.body["max_tokens"], 2048);
        assert_eq!(
            call.body["model"], "claude-m",
            "the use case's model is what the provider is asked for"
        );
        assert_eq!(
            call.header("anthropic-beta"),
            Some("interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14")
        );
        assert_eq!(call.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(call.header("x-api-key"), Some(PROVIDER_KEY), "the configured key");
        for (name, value) in &call.headers {
            let value = value.to_str().unwrap_or_default();
            assert!(
                !value.contains(TENANT_KEY),
                "the client's key reached the provider in {name}"
            );
        }
        gw.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_native_stream_is_passed_on_event_for_event() {
    bounded(async {
        let fake = Fake::start().await;
        let gw = gateway_of(
            json!({ "anth": provider("anthropic", &fake.base_url()) }),
            vec![model("anth", "claude-m")],
            &["anth/claude-m"],
        )
        .await;
        let r = messages(&gw, &hello(true)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "content-type"), "text/event-stream");
        assert_eq!(header(&r, "x-pressure-dropped"), "<none>");
        let events = sse(&r.body);
        let names = anthropic_names(&events);
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ],
            "the fake's events, in its order"
        );
        assert_eq!(events[0].json()["message"]["id"], "msg_fake_01");
        assert_eq!(events[4].json()["delta"]["text"], "the fake");
        assert_eq!(fake.seen()[0].body["stream"], true);
        gw.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_native_stream_from_the_mock_keeps_anthropics_event_order() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_of(
            json!({ "anth": provider("anthropic", &mock.base_url()) }),
            vec![model("anth", "claude-m")],
            &["anth/claude-m"],
        )
        .await;
        let r = messages(&gw, &hello(true)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let events = sse(&r.body);
        assert_anthropic_order(&anthropic_names(&events));
        let stop = events
            .iter()
            .rev()
            .find(|e| e.event.as_deref() == Some("message_delta"))
            .expect("message_delta");
        assert!(
            stop.json()["usage"]["output_tokens"].as_u64() > Some(0),
            "{}",
            stop.data
        );
        assert_eq!(mock_calls(&mock), 1);
        assert_eq!(
            mock.stats().by_endpoint.get("/v1/messages").copied(),
            Some(1),
            "{:?}",
            mock.stats().by_endpoint
        );
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_chat_provider_answers_in_the_messages_shape_and_names_what_it_dropped() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_of(
            json!({ "oai": provider("openai", &mock.base_url()) }),
            vec![model("oai", "gpt-m")],
            &["oai/gpt-m"],
        )
        .await;
        let mut body = hello(false);
        body["max_tokens"] = json!(2048);
        body["thinking"] = json!({ "type": "enabled", "budget_tokens": 1024 });
        body["metadata"] = json!({ "user_id": "user-7" });

        let r = messages(&gw, &body).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let m = r.json();
        assert_eq!(m["type"], "message", "{m}");
        assert_eq!(m["role"], "assistant", "{m}");
        assert!(m["id"].as_str().is_some_and(|id| !id.is_empty()), "{m}");
        let text = m["content"]
            .as_array()
            .and_then(|c| c.iter().find(|b| b["type"] == "text"))
            .unwrap_or_else(|| panic!("a text block: {m}"));
        assert!(text["text"].as_str().is_some_and(|t| !t.is_empty()), "{m}");
        assert!(
            ["end_turn", "max_tokens", "stop_sequence"].contains(&m["stop_reason"].as_str().unwrap_or("")),
            "{m}"
        );
        assert!(m["usage"]["input_tokens"].as_u64() > Some(0), "{m}");
        assert!(m["usage"]["output_tokens"].as_u64() > Some(0), "{m}");
        let dropped: Vec<&str> = header(&r, "x-pressure-dropped").split(',').collect();
        assert!(
            dropped.contains(&"thinking") && dropped.contains(&"metadata"),
            "{dropped:?}"
        );
        assert_eq!(
            mock.stats().by_endpoint.get("/v1/chat/completions").copied(),
            Some(1),
            "{:?}",
            mock.stats().by_endpoint
        );

        body["stream"] = json!(true);
        let r = messages(&gw, &body).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "content-type"), "text/event-stream");
        let dropped: Vec<&str> = header(&r, "x-pressure-dropped").split(',').collect();
        assert!(
            dropped.contains(&"thinking") && dropped.contains(&"metadata"),
            "{dropped:?}"
        );
        let events = sse(&r.body);
        assert_anthropic_order(&anthropic_names(&events));
        let start = events[0].json();
        assert_eq!(start["message"]["type"], "message", "{start}");
        assert_eq!(start["message"]["role"], "assistant", "{start}");
        let delta = events
            .iter()
            .find(|e| e.event.as_deref() == Some("message_delta"))
            .expect("message_delta")
            .json();
        assert!(delta["delta"]["stop_reason"].as_str().is_some(), "{delta}");
        assert!(delta["usage"]["output_tokens"].as_u64() > Some(0), "{delta}");
        assert_eq!(mock_calls(&mock), 2);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn count_tokens_counts_without_a_provider_call() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_of(
            json!({ "oai": provider("openai", &mock.base_url()) }),
            vec![model("oai", "gpt-m")],
            &["oai/gpt-m"],
        )
        .await;
        let body = json!({
            "model": "claude-sonnet-4-5-20250929",
            "system": "You are terse.",
            "messages": [ { "role": "user", "content": "Count the tokens of this sentence, please." } ]
        });
        let r = post_raw(
            &gw,
            "/v1/messages/count_tokens",
            body.to_string(),
            ANTHROPIC_HEADERS,
        )
        .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let n = r.json()["input_tokens"]
            .as_u64()
            .unwrap_or_else(|| panic!("input_tokens: {:?}", r.body));
        assert!(n > 0, "{n}");
        assert_eq!(
            r.json().as_object().map(|o| o.len()),
            Some(1),
            "only input_tokens"
        );

        let mut unknown = body.clone();
        unknown["model"] = json!("gemini-2.5-pro");
        let r = post_raw(
            &gw,
            "/v1/messages/count_tokens",
            unknown.to_string(),
            ANTHROPIC_HEADERS,
        )
        .await;
        assert_eq!(r.status, 404, "{:?}", r.body);
        assert_eq!(r.json()["type"], "error");
        assert_eq!(r.json()["error"]["type"], "not_found_error");
        assert_eq!(mock_calls(&mock), 0, "counting calls no provider");
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn count_tokens_asks_an_anthropic_first_model_its_own_count() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_of(
            json!({ "anth": provider("anthropic", &mock.base_url()) }),
            vec![model("anth", "claude-m")],
            &["anth/claude-m"],
        )
        .await;
        let body = json!({
            "model": "claude-sonnet-4-5-20250929",
            "system": "You are terse.",
            "messages": [ { "role": "user", "content": "Count the tokens of this sentence, please." } ]
        });
        let r = post_raw(
            &gw,
            "/v1/messages/count_tokens",
            body.to_string(),
            ANTHROPIC_HEADERS,
        )
        .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let counted = r.json()["input_tokens"].as_u64().expect("input_tokens");
        // The mock's own count of the same request, asked directly.
        let mut direct = body.clone();
        direct["model"] = json!("claude-m");
        let own: Value = post_json(&format!("{}/messages/count_tokens", mock.base_url()), &direct).await;
        assert_eq!(Some(counted), own["input_tokens"].as_u64(), "{own}");
        let stats = mock.stats();
        assert_eq!(
            stats.by_endpoint.get("/v1/messages/count_tokens").copied(),
            Some(2),
            "the gateway's count and ours: {stats:?}"
        );
        assert_eq!(stats.billed_micro_usd, 0, "counting is free");
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

/// `body` POSTed as JSON to `url` with a plain hyper client; the answer as JSON.
async fn post_json(url: &str, body: &Value) -> Value {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
        .expect("request");
    let resp = client.request(req).await.expect("the mock answers");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes).expect("json")
}

/// A request with a PDF `document` block first.
fn with_document() -> Value {
    json!({
        "model": "claude-sonnet-4-5-20250929", "max_tokens": 64,
        "messages": [ { "role": "user", "content": [
            { "type": "document",
              "source": { "type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK" } },
            { "type": "text", "text": "Summarise the document." }
        ] } ]
    })
}

#[tokio::test]
async fn a_document_with_only_a_chat_provider_is_refused_before_any_call() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_of(
            json!({ "oai": provider("openai", &mock.base_url()) }),
            vec![model("oai", "gpt-m")],
            &["oai/gpt-m"],
        )
        .await;
        let r = messages(&gw, &with_document()).await;
        assert_eq!(r.status, 400, "{:?}", r.body);
        let e = r.json();
        assert_eq!(e["type"], "error", "{e}");
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("messages.0.content.0"),
            "the field is named: {message}"
        );
        assert_eq!(mock_calls(&mock), 0);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_document_skips_the_chat_level_of_a_fallback_chain() {
    bounded(async {
        let mock = mock_with(overloaded(&["claude-m"])).await;
        let providers = json!({
            "anth": provider("anthropic", &mock.base_url()),
            "oai": provider("openai", &mock.base_url())
        });
        let models = vec![
            model("anth", "claude-m"),
            model("oai", "gpt-m"),
            model("anth", "claude-n"),
        ];
        let use_cases = json!({
            "claude": use_case(&["anth/claude-m", "oai/gpt-m", "anth/claude-n"], &["claude-sonnet-*"]),
            "short": use_case(&["anth/claude-m", "oai/gpt-m"], &["claude-haiku-*"])
        });
        let gw = TestGateway::start(section(providers, models, use_cases, roomy())).await;

        // The chat level is skipped: the third level, Anthropic's, answers.
        let r = messages(&gw, &with_document()).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "x-pressure-degradation"), "backup");
        assert_eq!(r.json()["type"], "message");
        assert_eq!(header(&r, "x-pressure-dropped"), "<none>", "answered natively");
        assert_eq!(mock_calls_of(&mock, "claude-m"), 1);
        assert_eq!(
            mock_calls_of(&mock, "gpt-m"),
            0,
            "the document never went to the chat wire"
        );
        assert_eq!(mock_calls_of(&mock, "claude-n"), 1);

        // Without a third level the request is refused, not translated.
        let mut body = with_document();
        body["model"] = json!("claude-haiku-4-5");
        let r = messages(&gw, &body).await;
        // The level that could carry it failed: its overload, as Anthropic's.
        assert_eq!(r.status, 529, "{:?}", r.body);
        assert_eq!(r.json()["type"], "error", "{:?}", r.body);
        assert_eq!(r.json()["error"]["type"], "overloaded_error", "{:?}", r.body);
        assert_eq!(
            mock_calls_of(&mock, "gpt-m"),
            0,
            "the document never went to the chat wire"
        );
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_clients_own_anthropic_key_never_reaches_the_provider() {
    bounded(async {
        // No `apiKeys`: the gateway does not read `x-api-key` at all.
        let fake = Fake::start().await;
        let mut s = section(
            json!({ "anth": provider("anthropic", &fake.base_url()) }),
            vec![model("anth", "claude-m")],
            json!({ "claude": use_case(&["anth/claude-m"], &["claude-*"]) }),
            roomy(),
        );
        let object = s.as_object_mut().expect("section");
        object.remove("auth");
        object.remove("pressure");
        let gw = TestGateway::start(s).await;
        let client_key = "sk-ant-api03-the-clients-own-key";
        let headers = [
            ("x-api-key", client_key),
            ("anthropic-version", "2023-06-01"),
            ("authorization", "Bearer sk-ant-oauth-the-clients-token"),
        ];
        for stream in [false, true] {
            let r = post_raw(&gw, "/v1/messages", hello(stream).to_string(), &headers).await;
            assert_eq!(r.status, 200, "{:?}", r.body);
        }
        let seen = fake.seen();
        assert_eq!(seen.len(), 2);
        for call in &seen {
            assert_eq!(call.header("x-api-key"), Some(PROVIDER_KEY), "the configured key");
            for (name, value) in &call.headers {
                let value = value.to_str().unwrap_or_default();
                assert!(
                    !value.contains("the-clients-own-key") && !value.contains("the-clients-token"),
                    "a client credential reached the provider in {name}: {value}"
                );
            }
        }
        gw.stop().await;
    })
    .await;
}
