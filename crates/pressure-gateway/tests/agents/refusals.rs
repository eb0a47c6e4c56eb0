//! Refusals in the agent's dialect, all before any provider call: an
//! unknown model id (404), a malformed body (400 naming the field), a body
//! over `gateway.limits.maxBodyBytes` (413).

use super::support::{bounded, Reply, TestGateway};
use super::*;

/// `gateway.limits.maxBodyBytes` of these tests.
const MAX_BODY: u64 = 1024 * 1024;

/// A gateway on `mock`: `claude-*` and `gpt-5*` name one use case each.
async fn gateway_on(mock: &pressure_mock::MockProvider) -> TestGateway {
    let providers = json!({
        "anth": provider("anthropic", &mock.base_url()),
        "resp": provider("openai-responses", &mock.base_url())
    });
    let use_cases = json!({
        "claude": use_case(&["anth/claude-m"], &["claude-*"]),
        "codex": use_case(&["resp/resp-m"], &["gpt-5*"])
    });
    let mut s = section(
        providers,
        vec![model("anth", "claude-m"), model("resp", "resp-m")],
        use_cases,
        roomy(),
    );
    s["limits"] = json!({ "maxBodyBytes": MAX_BODY });
    TestGateway::start(s).await
}

/// Checks an Anthropic-shaped refusal of `status` and `ty` whose message
/// names `field` (when given).
fn assert_anthropic(r: &Reply, status: u16, ty: &str, field: Option<&str>) {
    assert_eq!(r.status, status, "{:?}", r.body);
    let e = r.json();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], ty, "{e}");
    let message = e["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("a message: {e}"));
    if let Some(field) = field {
        assert!(message.contains(field), "{field} named in {message:?}");
    }
}

/// Checks an OpenAI-shaped refusal of `status` with `param` / `code`.
fn assert_openai(r: &Reply, status: u16, param: Option<&str>, code: Option<&str>) {
    assert_eq!(r.status, status, "{:?}", r.body);
    let e = r.json();
    assert!(e["error"]["message"].as_str().is_some(), "{e}");
    assert!(e["error"]["type"].as_str().is_some(), "{e}");
    if let Some(param) = param {
        assert_eq!(e["error"]["param"], param, "{e}");
    }
    if let Some(code) = code {
        assert_eq!(e["error"]["code"], code, "{e}");
    }
}

#[tokio::test]
async fn messages_refusals_speak_anthropic_and_reach_no_provider() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_on(&mock).await;
        let post = |body: String| {
            let gw = &gw;
            async move { post_raw(gw, "/v1/messages", body, ANTHROPIC_HEADERS).await }
        };
        let ok = json!({ "model": "claude-sonnet-4-5", "max_tokens": 16,
                         "messages": [ { "role": "user", "content": "hi" } ] });

        let mut unknown = ok.clone();
        unknown["model"] = json!("gemini-2.5-pro");
        assert_anthropic(&post(unknown.to_string()).await, 404, "not_found_error", None);
        assert_anthropic(
            &post("{\"model\": \"claude-x\", ".into()).await,
            400,
            "invalid_request_error",
            None,
        );
        assert_anthropic(
            &post("[1, 2, 3]".into()).await,
            400,
            "invalid_request_error",
            None,
        );

        let mut no_max = ok.clone();
        no_max.as_object_mut().expect("object").remove("max_tokens");
        assert_anthropic(
            &post(no_max.to_string()).await,
            400,
            "invalid_request_error",
            Some("max_tokens"),
        );

        let mut string_messages = ok.clone();
        string_messages["messages"] = json!("hi");
        assert_anthropic(
            &post(string_messages.to_string()).await,
            400,
            "invalid_request_error",
            Some("messages"),
        );

        let mut unknown_block = ok.clone();
        unknown_block["messages"][0]["content"] = json!([ { "type": "hologram", "data": "x" } ]);
        assert_anthropic(
            &post(unknown_block.to_string()).await,
            400,
            "invalid_request_error",
            Some("messages.0.content.0"),
        );

        let mut huge = ok.clone();
        huge["messages"][0]["content"] = json!("x".repeat(10 * 1024 * 1024));
        let r = post(huge.to_string()).await;
        assert_anthropic(&r, 413, "request_too_large", None);

        assert_eq!(mock_calls(&mock), 0, "no refused request reached the provider");
        // And a good one does (the gateway and the mock are wired).
        assert_eq!(post(ok.to_string()).await.status, 200);
        assert_eq!(mock_calls(&mock), 1);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn responses_refusals_speak_openai_and_reach_no_provider() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_on(&mock).await;
        let bearer = format!("Bearer {TENANT_KEY}");
        let post = |body: String| {
            let (gw, bearer) = (&gw, bearer.clone());
            async move { post_raw(gw, "/v1/responses", body, &[("authorization", bearer.as_str())]).await }
        };
        let ok = json!({ "model": "gpt-5-codex", "input": "hi", "max_output_tokens": 16 });

        let mut unknown = ok.clone();
        unknown["model"] = json!("gemini-2.5-pro");
        assert_openai(
            &post(unknown.to_string()).await,
            404,
            None,
            Some("model_not_found"),
        );
        assert_openai(&post("{\"model\": \"gpt-5\", ".into()).await, 400, None, None);
        assert_openai(&post("\"just a string\"".into()).await, 400, None, None);

        let mut number = ok.clone();
        number["input"] = json!(42);
        assert_openai(&post(number.to_string()).await, 400, Some("input"), None);

        let mut previous = ok.clone();
        previous["previous_response_id"] = json!("resp_0123");
        assert_openai(
            &post(previous.to_string()).await,
            400,
            Some("previous_response_id"),
            None,
        );

        let mut huge = ok.clone();
        huge["input"] = json!("x".repeat(10 * 1024 * 1024));
        assert_openai(
            &post(huge.to_string()).await,
            413,
            None,
            Some("request_too_large"),
        );

        assert_eq!(mock_calls(&mock), 0, "no refused request reached the provider");
        assert_eq!(post(ok.to_string()).await.status, 200);
        assert_eq!(mock_calls(&mock), 1);
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}
