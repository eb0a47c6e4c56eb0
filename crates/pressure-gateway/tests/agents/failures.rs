//! Failures: an overloaded primary falls back to a provider of the other
//! wire (the answer translated into the agent's dialect), and a provider
//! stream that fails after its first output ends with the dialect's error
//! event.

use super::messages::overloaded;
use super::support::{bounded, TestGateway};
use super::*;
use pressure_mock::Phase;

/// Providers `anth` (Anthropic), `oai` (chat) and `resp` (Responses), all
/// on `mock`, models `claude-m`, `gpt-m`, `resp-m`; use case `claude`
/// (`claude-*`) is `claude`, `codex` (`gpt-5*`) is `codex`.
async fn gateway_on(mock: &pressure_mock::MockProvider, claude: &[&str], codex: &[&str]) -> TestGateway {
    let providers = json!({
        "anth": provider("anthropic", &mock.base_url()),
        "oai": provider("openai", &mock.base_url()),
        "resp": provider("openai-responses", &mock.base_url())
    });
    let models = vec![
        model("anth", "claude-m"),
        model("oai", "gpt-m"),
        model("resp", "resp-m"),
    ];
    let use_cases = json!({
        "claude": use_case(claude, &["claude-*"]),
        "codex": use_case(codex, &["gpt-5*"])
    });
    TestGateway::start(section(providers, models, use_cases, roomy())).await
}

fn claude_hello(stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-4-5-20250929", "max_tokens": 128, "stream": stream,
        "messages": [ { "role": "user", "content": "Say hello." } ]
    })
}

fn codex_hello(stream: bool) -> Value {
    json!({ "model": "gpt-5-codex", "input": "Say hello.", "max_output_tokens": 128, "stream": stream })
}

#[tokio::test]
async fn an_overloaded_anthropic_primary_falls_back_to_a_chat_backup() {
    bounded(async {
        let mock = mock_with(overloaded(&["claude-m"])).await;
        let gw = gateway_on(&mock, &["anth/claude-m", "oai/gpt-m"], &["resp/resp-m"]).await;

        let r = messages(&gw, &claude_hello(false)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "x-pressure-degradation"), "backup");
        let m = r.json();
        assert_eq!(m["type"], "message", "{m}");
        assert_eq!(m["content"][0]["type"], "text", "{m}");
        assert_eq!(
            mock_calls_of(&mock, "claude-m"),
            1,
            "the primary was asked once (no retries)"
        );
        assert_eq!(mock_calls_of(&mock, "gpt-m"), 1);
        assert_eq!(
            mock.stats().by_status.get("529").copied(),
            Some(1),
            "{:?}",
            mock.stats().by_status
        );

        let r = messages(&gw, &claude_hello(true)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "x-pressure-degradation"), "backup");
        assert_anthropic_order(&anthropic_names(&sse(&r.body)));
        let primary = mock_calls_of(&mock, "claude-m");
        assert!((1..=2).contains(&primary), "the primary: {primary} calls");
        assert_eq!(mock_calls_of(&mock, "gpt-m"), 2);
        assert_eq!(mock_calls_of(&mock, "resp-m"), 0);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_failing_responses_primary_falls_back_to_an_anthropic_backup() {
    bounded(async {
        let mut phase = Phase::normal("errors").on_models(&["resp-m"]);
        phase.error_share = 1.0;
        let mock = mock_with(phase).await;
        let gw = gateway_on(&mock, &["anth/claude-m"], &["resp/resp-m", "anth/claude-m"]).await;

        let r = responses(&gw, &codex_hello(false)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "x-pressure-degradation"), "backup");
        let body = r.json();
        assert_eq!(body["object"], "response", "{body}");
        let message = body["output"]
            .as_array()
            .and_then(|o| o.iter().find(|i| i["type"] == "message"))
            .unwrap_or_else(|| panic!("a message item: {body}"));
        assert_eq!(message["content"][0]["type"], "output_text", "{body}");
        assert!(body["usage"]["input_tokens"].as_u64() > Some(0), "{body}");
        assert_eq!(mock_calls_of(&mock, "resp-m"), 1);
        assert_eq!(mock_calls_of(&mock, "claude-m"), 1);
        assert_eq!(
            mock.stats().by_status.get("500").copied(),
            Some(1),
            "{:?}",
            mock.stats().by_status
        );

        let r = responses(&gw, &codex_hello(true)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "x-pressure-degradation"), "backup");
        let events = sse(&r.body);
        assert_responses_text_order(&responses_types(&events));
        assert_sequence_numbers(&events);
        assert_eq!(mock_calls_of(&mock, "claude-m"), 2);
        let primary = mock_calls_of(&mock, "resp-m");
        assert!((1..=2).contains(&primary), "the primary: {primary} calls");
        assert_eq!(mock_calls_of(&mock, "gpt-m"), 0);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

/// A phase in which streams of `models` fail after their first output.
fn cut(models: &[&str]) -> Phase {
    let mut phase = Phase::normal("cut").on_models(models);
    phase.stream_error_share = 1.0;
    phase
}

/// Checks a Messages stream that failed after it started: it began with
/// `message_start` and ends with one `event: error` in Anthropic's shape.
fn assert_messages_failed(r: &support::Reply) {
    assert_eq!(r.status, 200, "{:?}", r.body);
    let events = sse(&r.body);
    let names = anthropic_names(&events);
    assert_eq!(
        names.first().map(String::as_str),
        Some("message_start"),
        "{names:?}"
    );
    assert_eq!(names.last().map(String::as_str), Some("error"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "message_stop"),
        "no message_stop after a failure: {names:?}"
    );
    assert_eq!(names.iter().filter(|n| *n == "error").count(), 1, "{names:?}");
    let error = events.last().expect("events").json();
    assert!(
        error["error"]["type"].as_str().is_some_and(|t| !t.is_empty()),
        "{error}"
    );
    assert!(error["error"]["message"].as_str().is_some(), "{error}");
}

#[tokio::test]
async fn a_messages_stream_failing_after_its_start_ends_with_an_error_event() {
    bounded(async {
        let mock = mock_with(cut(&["claude-m", "gpt-m"])).await;
        // Native: the Anthropic provider's own stream.
        let gw = gateway_on(&mock, &["anth/claude-m", "oai/gpt-m"], &["oai/gpt-m"]).await;
        let r = messages(&gw, &claude_hello(true)).await;
        assert_messages_failed(&r);
        assert_eq!(mock_calls(&mock), 1, "committed at the first output: no fallback");
        gw.stop().await;

        // Translated: a chat provider's stream.
        let gw = gateway_on(&mock, &["oai/gpt-m"], &["oai/gpt-m"]).await;
        let r = messages(&gw, &claude_hello(true)).await;
        assert_messages_failed(&r);
        assert_eq!(mock_calls(&mock), 2);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_responses_stream_failing_after_its_start_ends_failed() {
    bounded(async {
        let mock = mock_with(cut(&["gpt-m", "resp-m"])).await;
        // Translated: response.failed, numbered on.
        let gw = gateway_on(&mock, &["oai/gpt-m"], &["oai/gpt-m", "anth/claude-m"]).await;
        let r = responses(&gw, &codex_hello(true)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let events = sse(&r.body);
        let types = responses_types(&events);
        assert_eq!(
            types.first().map(String::as_str),
            Some("response.created"),
            "{types:?}"
        );
        assert_eq!(
            types.last().map(String::as_str),
            Some("response.failed"),
            "{types:?}"
        );
        assert!(!types.iter().any(|t| t == "response.completed"), "{types:?}");
        assert_sequence_numbers(&events);
        let failed = events.last().expect("events").json();
        assert_eq!(failed["response"]["status"], "failed", "{failed}");
        assert!(failed["response"]["error"]["code"].as_str().is_some(), "{failed}");
        assert_eq!(mock_calls(&mock), 1, "committed at the first output: no fallback");
        gw.stop().await;

        // Native: the provider's events, then a failure (never completed).
        let gw = gateway_on(&mock, &["oai/gpt-m"], &["resp/resp-m"]).await;
        let r = responses(&gw, &codex_hello(true)).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let types = responses_types(&sse(&r.body));
        assert_eq!(
            types.first().map(String::as_str),
            Some("response.created"),
            "{types:?}"
        );
        let last = types.last().map(String::as_str);
        assert!(matches!(last, Some("response.failed" | "error")), "{types:?}");
        assert!(!types.iter().any(|t| t == "response.completed"), "{types:?}");
        assert_eq!(mock_calls(&mock), 2);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_529_from_anthropic_falls_back_translated_with_the_hints_named() {
    bounded(async {
        let fake = super::fake::Fake::start().await;
        fake.overload();
        let mock = mock().await;
        let providers = json!({
            "anth": provider("anthropic", &fake.base_url()),
            "oai": provider("openai", &mock.base_url())
        });
        let use_cases = json!({ "claude": use_case(&["anth/claude-m", "oai/gpt-m"], &["claude-*"]) });
        let models = vec![model("anth", "claude-m"), model("oai", "gpt-m")];
        let gw = TestGateway::start(section(providers, models, use_cases, roomy())).await;
        let mut body = claude_hello(false);
        body["metadata"] = json!({ "user_id": "user-7" });
        let r = messages(&gw, &body).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(header(&r, "x-pressure-degradation"), "backup");
        assert_eq!(r.json()["type"], "message");
        assert_ne!(r.json()["id"], "msg_fake_01", "the backup's answer");
        assert!(
            header(&r, "x-pressure-dropped")
                .split(',')
                .any(|n| n == "metadata"),
            "{:?}",
            r.headers
        );
        assert_eq!(fake.seen().len(), 1, "the primary was asked once");
        assert_eq!(mock_calls_of(&mock, "gpt-m"), 1);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}
