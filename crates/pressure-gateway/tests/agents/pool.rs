//! Deployment pools through the gateway: on each wire (chat completions,
//! Anthropic Messages, the Responses API) a pool of two deployments of one
//! model, the first (by weight) overloaded; every answer, whole or
//! streamed, comes from the other member at the pool level (`primary`)
//! and names it in `x-pressure-deployment`.

use super::messages::overloaded;
use super::support::{bounded, Reply, TestGateway};
use super::*;
use pressure_mock::MockProvider;

/// A pool level of `busy` (weight 1000: offered every attempt first) and
/// `spare`.
fn pool_of(busy: &str, spare: &str, aliases: &[&str]) -> Value {
    json!({
        "chain": [ {"pool": [ {"model": busy, "weight": 1000}, {"model": spare} ]} ],
        "retry": { "maxAttempts": 1 }, "aliases": aliases
    })
}

/// A gateway whose providers `*1` are on `busy` and `*2` on `spare`, one
/// of each wire: use cases `chat` (`oai*/gpt-m`), `claude` (`claude-*`,
/// `anth*/claude-m`) and `codex` (`gpt-5*`, `resp*/resp-m`), each a pool.
async fn gateway_on(busy: &MockProvider, spare: &MockProvider) -> TestGateway {
    let providers = json!({
        "oai1": provider("openai", &busy.base_url()),
        "oai2": provider("openai", &spare.base_url()),
        "anth1": provider("anthropic", &busy.base_url()),
        "anth2": provider("anthropic", &spare.base_url()),
        "resp1": provider("openai-responses", &busy.base_url()),
        "resp2": provider("openai-responses", &spare.base_url())
    });
    let models = vec![
        model("oai1", "gpt-m"),
        model("oai2", "gpt-m"),
        model("anth1", "claude-m"),
        model("anth2", "claude-m"),
        model("resp1", "resp-m"),
        model("resp2", "resp-m"),
    ];
    let use_cases = json!({
        "chat": pool_of("oai1/gpt-m", "oai2/gpt-m", &[]),
        "claude": pool_of("anth1/claude-m", "anth2/claude-m", &["claude-*"]),
        "codex": pool_of("resp1/resp-m", "resp2/resp-m", &["gpt-5*"])
    });
    TestGateway::start(section(providers, models, use_cases, roomy())).await
}

/// `POST /v1/chat/completions` by tenant `acme`.
async fn chat(gw: &TestGateway, stream: bool) -> Reply {
    let body = json!({
        "model": "chat", "max_tokens": 64, "stream": stream,
        "messages": [ { "role": "user", "content": "Say hello." } ]
    });
    let bearer = format!("Bearer {TENANT_KEY}");
    post_raw(
        gw,
        "/v1/chat/completions",
        body.to_string(),
        &[("authorization", bearer.as_str())],
    )
    .await
}

/// Checks that `r` was answered by the pool level's `member`.
fn assert_served_by(r: &Reply, member: &str, what: &str) {
    assert_eq!(r.status, 200, "{what}: {:?}", r.body);
    assert_eq!(header(r, "x-pressure-deployment"), member, "{what}");
    assert_eq!(
        header(r, "x-pressure-degradation"),
        "primary",
        "{what}: the pool level answered"
    );
}

#[tokio::test]
async fn every_dialect_names_the_pool_member_that_answered() {
    bounded(async {
        let busy = mock_with(overloaded(&[])).await;
        let spare = mock().await;
        let gw = gateway_on(&busy, &spare).await;
        for stream in [false, true] {
            let what = if stream { "streamed" } else { "whole" };
            let r = chat(&gw, stream).await;
            assert_served_by(&r, "oai2/gpt-m", &format!("chat completion, {what}"));
            let r = messages(
                &gw,
                &json!({
                    "model": "claude-sonnet-4-5-20250929", "max_tokens": 64, "stream": stream,
                    "messages": [ { "role": "user", "content": "Say hello." } ]
                }),
            )
            .await;
            assert_served_by(&r, "anth2/claude-m", &format!("message, {what}"));
            let r = responses(
                &gw,
                &json!({ "model": "gpt-5-codex", "input": "Say hello.", "max_output_tokens": 64, "stream": stream }),
            )
            .await;
            assert_served_by(&r, "resp2/resp-m", &format!("response, {what}"));
        }
        // Each answer: one attempt refused by the busy member, one served
        // by the spare one.
        for model in ["gpt-m", "claude-m", "resp-m"] {
            assert_eq!(mock_calls_of(&busy, model), 2, "{model}: the busy member was asked first");
            assert_eq!(mock_calls_of(&spare, model), 2, "{model}");
        }
    })
    .await;
}
