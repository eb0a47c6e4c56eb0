//! `POST /v1/responses`: an `openai-responses` provider gets Codex's
//! request as it came (answer and events passed back); a chat provider's
//! answer is rendered as a Response and its stream as the Responses events,
//! numbered; a function call goes round through both.

use super::fake::Fake;
use super::support::{bounded, TestGateway};
use super::*;

/// A gateway whose use case `codex` (every `gpt-5*` id) is `provider/model`
/// on a provider of `kind` at `base_url`.
async fn gateway_of(kind: &str, base_url: &str) -> TestGateway {
    let providers = json!({ "p": provider(kind, base_url) });
    let use_cases = json!({ "codex": use_case(&["p/m"], &["gpt-5*"]) });
    TestGateway::start(section(providers, vec![model("p", "m")], use_cases, roomy())).await
}

/// A Responses request of Codex's kind (with hints a chat provider drops).
fn hello(stream: bool) -> Value {
    json!({
        "model": "gpt-5-codex", "instructions": "You are terse.", "input": "Say hello.",
        "max_output_tokens": 256, "stream": stream,
        "store": false, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "session-1"
    })
}

/// Checks a whole Response with a text answer.
fn assert_text_response(r: &Value) {
    assert_eq!(r["object"], "response", "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    let message = r["output"]
        .as_array()
        .and_then(|o| o.iter().find(|i| i["type"] == "message"))
        .unwrap_or_else(|| panic!("a message item: {r}"));
    assert_eq!(message["role"], "assistant", "{r}");
    let part = &message["content"][0];
    assert_eq!(part["type"], "output_text", "{r}");
    assert!(part["text"].as_str().is_some_and(|t| !t.is_empty()), "{r}");
    let usage = &r["usage"];
    assert!(usage["input_tokens"].as_u64() > Some(0), "{r}");
    assert!(usage["output_tokens"].as_u64() > Some(0), "{r}");
    assert!(
        usage["input_tokens_details"]["cached_tokens"].as_u64().is_some(),
        "{r}"
    );
}

#[tokio::test]
async fn a_responses_provider_gets_the_request_as_it_came() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_of("openai-responses", &mock.base_url()).await;
        let r = responses(&gw, &hello(false)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_text_response(&r.json());
        assert_eq!(
            header(&r, "x-pressure-dropped"),
            "<none>",
            "nothing dropped natively"
        );
        assert_eq!(header(&r, "x-pressure-degradation"), "primary");

        let r = responses(&gw, &hello(true)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "content-type"), "text/event-stream");
        assert_eq!(header(&r, "x-pressure-dropped"), "<none>");
        let events = sse(&r.body);
        assert_responses_text_order(&responses_types(&events));
        assert_sequence_numbers(&events);
        let done = events.last().expect("events").json();
        assert_text_response(&done["response"]);
        let stats = mock.stats();
        assert_eq!(
            stats.by_endpoint.get("/v1/responses").copied(),
            Some(2),
            "{:?}",
            stats.by_endpoint
        );
        assert_eq!(stats.requests, 2);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_chat_provider_answers_in_the_responses_shape() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_of("openai", &mock.base_url()).await;
        let r = responses(&gw, &hello(false)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_text_response(&r.json());
        let dropped: Vec<&str> = header(&r, "x-pressure-dropped").split(',').collect();
        for name in ["store", "include", "prompt_cache_key"] {
            assert!(dropped.contains(&name), "{name} named in {dropped:?}");
        }

        let r = responses(&gw, &hello(true)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "content-type"), "text/event-stream");
        assert!(
            header(&r, "x-pressure-dropped").contains("prompt_cache_key"),
            "{:?}",
            r.headers
        );
        let events = sse(&r.body);
        assert_responses_text_order(&responses_types(&events));
        assert_sequence_numbers(&events);
        assert_eq!(events[0].json()["sequence_number"], 0, "numbered from 0");
        let done = events.last().expect("events").json();
        assert_text_response(&done["response"]);
        // The deltas add up to the text of the finished item.
        let deltas: String = events
            .iter()
            .map(Sse::json)
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap_or_default().to_owned())
            .collect();
        let text_done = events
            .iter()
            .map(Sse::json)
            .find(|e| e["type"] == "response.output_text.done")
            .expect("output_text.done");
        assert_eq!(text_done["text"].as_str(), Some(deltas.as_str()));
        let stats = mock.stats();
        assert_eq!(
            stats.by_endpoint.get("/v1/chat/completions").copied(),
            Some(2),
            "{:?}",
            stats.by_endpoint
        );
        assert_eq!(stats.requests, 2);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

/// The weather tool, as Codex offers a function.
fn tools() -> Value {
    json!([{
        "type": "function", "name": "get_weather", "description": "The weather in a city.",
        "parameters": { "type": "object", "properties": { "city": { "type": "string" } },
                        "required": ["city"], "additionalProperties": false },
        "strict": true
    }])
}

/// Offers the tool, answers its call, and checks both turns; returns the call.
async fn round_trip(gw: &TestGateway) -> Value {
    let question = json!({ "role": "user", "content": "What is the weather in Paris?" });
    let first =
        json!({ "model": "gpt-5-codex", "input": [question], "tools": tools(), "max_output_tokens": 256 });
    let r = responses(gw, &first).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let body = r.json();
    assert_eq!(body["object"], "response", "{body}");
    let call = body["output"]
        .as_array()
        .and_then(|o| o.iter().find(|i| i["type"] == "function_call"))
        .unwrap_or_else(|| panic!("a function_call item: {body}"))
        .clone();
    assert_eq!(call["name"], "get_weather", "{call}");
    assert!(call["call_id"].as_str().is_some_and(|c| !c.is_empty()), "{call}");
    let args: Value =
        serde_json::from_str(call["arguments"].as_str().expect("arguments text")).expect("JSON arguments");
    assert!(args.is_object(), "{args}");

    let output =
        json!({ "type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21 °C" });
    let fc = json!({ "type": "function_call", "call_id": call["call_id"], "name": "get_weather",
                     "arguments": call["arguments"] });
    let second = json!({ "model": "gpt-5-codex", "input": [question, fc, output], "tools": tools(),
                         "max_output_tokens": 256 });
    let r = responses(gw, &second).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_text_response(&r.json());
    call
}

#[tokio::test]
async fn a_function_call_goes_round_through_a_responses_provider() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_of("openai-responses", &mock.base_url()).await;
        round_trip(&gw).await;
        assert_eq!(mock.stats().by_endpoint.get("/v1/responses").copied(), Some(2));
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_function_call_goes_round_through_a_chat_provider() {
    bounded(async {
        let fake = Fake::start().await;
        let gw = gateway_of("openai", &fake.base_url()).await;
        let call = round_trip(&gw).await;
        let seen = fake.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].path, "/v1/chat/completions");
        assert_eq!(seen[0].body["tools"][0]["type"], "function");
        assert_eq!(seen[0].body["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(
            seen[0].header("authorization"),
            Some(format!("Bearer {PROVIDER_KEY}").as_str())
        );
        let messages = seen[1].body["messages"].as_array().expect("messages").clone();
        let assistant = messages
            .iter()
            .find(|m| m["role"] == "assistant")
            .expect("the call in the history");
        assert_eq!(assistant["tool_calls"][0]["id"], call["call_id"]);
        assert_eq!(assistant["tool_calls"][0]["function"]["name"], "get_weather");
        let tool = messages
            .iter()
            .find(|m| m["role"] == "tool")
            .expect("the result in the history");
        assert_eq!(tool["tool_call_id"], call["call_id"]);
        assert_eq!(tool["content"], "sunny, 21 °C");
        gw.stop().await;
    })
    .await;
}
