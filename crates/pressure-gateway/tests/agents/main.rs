//! The agents' endpoints (docs/architecture.md#agents-at-the-door-messages-and-responses) end to end: `POST /v1/messages`,
//! `POST /v1/messages/count_tokens` and `POST /v1/responses` on a real
//! gateway in front of the mock provider (`pressure-mock`) and small axum
//! fakes that record what reached them, all on 127.0.0.1 port 0.
//!
//! * [`messages`]: native passthrough (body, headers, credentials, event
//!   order), translation to a chat provider, `count_tokens`, native-only
//!   content;
//! * [`responses`]: native and translated answers and events, a
//!   function-call round trip;
//! * [`failures`]: fallback across wires, failures after a stream started;
//! * [`refusals`]: the dialects' 400 / 404 / 413 before any provider call;
//! * [`money`]: a spent budget, the spend against the mock's bill, a client
//!   gone mid-stream;
//! * [`pool`]: a deployment pool on each wire, the member that answered in
//!   `x-pressure-deployment`.

#[path = "../gateway/support.rs"]
#[allow(dead_code)]
mod support;

mod failures;
mod fake;
mod keep_alive;
mod messages;
mod money;
mod pool;
mod refusals;
mod responses;

use bytes::Bytes;
use http_body_util::Full;
use pressure_mock::{Behaviour, MockConfig, MockProvider, Phase, Price};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Once;
use support::{Reply, TestGateway};

/// The environment variable holding the key the gateway sends providers.
const PROVIDER_KEY_ENV: &str = "PRESSURE_GATEWAY_TESTS_AGENTS_PROVIDER_KEY";
/// The key the gateway sends providers (never the client's).
pub(crate) const PROVIDER_KEY: &str = "sk-provider-configured-0123456789";
/// The API key of tenant `acme` (the client's credential).
pub(crate) const TENANT_KEY: &str = "sk-agents-acme-0123456789";
/// The tenant of [`TENANT_KEY`].
pub(crate) const TENANT: &str = "gateway:tenant:acme";

/// Prices per 1M tokens, the same in the gateway and the mock.
pub(crate) const INPUT_PER_1M: u64 = 3_000_000;
pub(crate) const OUTPUT_PER_1M: u64 = 15_000_000;
pub(crate) const CACHE_WRITE_PER_1M: u64 = 3_750_000;
pub(crate) const CACHE_READ_PER_1M: u64 = 300_000;

/// Sets [`PROVIDER_KEY_ENV`] (once) and returns its name.
fn provider_key_env() -> &'static str {
    static SET: Once = Once::new();
    SET.call_once(|| std::env::set_var(PROVIDER_KEY_ENV, PROVIDER_KEY));
    PROVIDER_KEY_ENV
}

/// The mock provider's price of every model: the gateway's.
pub(crate) fn mock_price() -> Price {
    Price::new(INPUT_PER_1M, OUTPUT_PER_1M).with_cache(CACHE_WRITE_PER_1M, CACHE_READ_PER_1M)
}

/// The mock provider playing `phase` (seeded, priced as the gateway).
pub(crate) async fn mock_with(phase: Phase) -> MockProvider {
    let config = MockConfig {
        behaviour: Behaviour::single(phase),
        default_price: mock_price(),
        seed: Some(7),
        ..MockConfig::default()
    };
    MockProvider::start("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("mock provider starts")
}

/// The mock provider answering normally.
pub(crate) async fn mock() -> MockProvider {
    mock_with(Phase::normal("normal")).await
}

/// A provider of `kind` at `base_url`, sent [`PROVIDER_KEY`].
pub(crate) fn provider(kind: &str, base_url: &str) -> Value {
    json!({ "kind": kind, "baseUrl": base_url, "apiKeyEnv": provider_key_env() })
}

/// A chat model `model` of `provider`, priced as the mock.
pub(crate) fn model(provider: &str, model: &str) -> Value {
    json!({
        "provider": provider, "model": model,
        "context": { "contextTokens": 32768, "maxOutputTokens": 4096 },
        "price": {
            "inputMicroUsdPer1M": INPUT_PER_1M, "outputMicroUsdPer1M": OUTPUT_PER_1M,
            "cacheWriteMicroUsdPer1M": CACHE_WRITE_PER_1M, "cacheReadMicroUsdPer1M": CACHE_READ_PER_1M
        }
    })
}

/// A use case: `chain` (provider/model names), no retries, named by `aliases`.
pub(crate) fn use_case(chain: &[&str], aliases: &[&str]) -> Value {
    let chain: Vec<Value> = chain.iter().map(|m| json!({ "model": m })).collect();
    json!({ "chain": chain, "retry": { "maxAttempts": 1 }, "aliases": aliases })
}

/// SHA-256 of `key`, as `gateway.auth.apiKeys[].sha256` holds it.
fn sha256_hex(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A `gateway` section: tenant `acme` by [`TENANT_KEY`] with
/// `tenant_limits`, and `gateway.llm` of `providers`, `models`, `use_cases`.
pub(crate) fn section(providers: Value, models: Vec<Value>, use_cases: Value, tenant_limits: Value) -> Value {
    json!({
        "upstreams": { "api": { "url": "http://127.0.0.1:9", "pathPrefix": "/api" } },
        "auth": {
            "required": false,
            "apiKeys": [ { "sha256": sha256_hex(TENANT_KEY), "tenant": "acme", "name": "acme-agent" } ]
        },
        "pressure": { "perTenant": { "enabled": true, "limits": tenant_limits } },
        "llm": { "providers": providers, "models": models, "useCases": use_cases }
    })
}

/// A budget no test spends.
pub(crate) fn roomy() -> Value {
    json!({ "costMicroUsdPerDay": 1_000_000_000_000u64 })
}

/// `POST path` with `body` (raw) and `headers`, read whole.
pub(crate) async fn post_raw(
    gw: &TestGateway,
    path: &str,
    body: impl Into<Bytes>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut req = http::Request::post(gw.url(path)).header(http::header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(Full::new(body.into())).expect("request");
    Reply::read(gw.send(req).await).await
}

/// The headers of an Anthropic SDK call by tenant `acme`.
pub(crate) const ANTHROPIC_HEADERS: &[(&str, &str)] =
    &[("x-api-key", TENANT_KEY), ("anthropic-version", "2023-06-01")];

/// `POST /v1/messages` as the anthropic SDK sends it (`x-api-key`).
pub(crate) async fn messages(gw: &TestGateway, body: &Value) -> Reply {
    post_raw(gw, "/v1/messages", body.to_string(), ANTHROPIC_HEADERS).await
}

/// `POST /v1/responses` as the openai SDK sends it (`Authorization: Bearer`).
pub(crate) async fn responses(gw: &TestGateway, body: &Value) -> Reply {
    let bearer = format!("Bearer {TENANT_KEY}");
    post_raw(
        gw,
        "/v1/responses",
        body.to_string(),
        &[("authorization", bearer.as_str())],
    )
    .await
}

/// One server-sent event: its `event:` name (if any) and its data.
#[derive(Debug, Clone)]
pub(crate) struct Sse {
    pub(crate) event: Option<String>,
    pub(crate) data: String,
}

impl Sse {
    /// The data as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", self.data))
    }
}

/// The events of an SSE body (comments and blank lines skipped).
pub(crate) fn sse(body: &[u8]) -> Vec<Sse> {
    let text = String::from_utf8(body.to_vec()).expect("UTF-8 stream");
    let text = text.replace("\r\n", "\n");
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut event = None;
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                event = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if event.is_some() || !data.is_empty() {
            out.push(Sse {
                event,
                data: data.join("\n"),
            });
        }
    }
    out
}

/// The `event:` names of a Messages stream (each event must have one, and
/// its data's `type` must be the same name).
pub(crate) fn anthropic_names(events: &[Sse]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let name = e
                .event
                .clone()
                .unwrap_or_else(|| panic!("an event without a name: {e:?}"));
            assert_eq!(
                e.json()["type"],
                name.as_str(),
                "the data's type is the event's name: {e:?}"
            );
            name
        })
        .collect()
}

/// Checks Anthropic's published order: `message_start`, then one or more
/// blocks (`content_block_start`, `content_block_delta`…,
/// `content_block_stop`), `message_delta`, `message_stop`; `ping`s allowed
/// anywhere after `message_start`. At least one delta in all.
pub(crate) fn assert_anthropic_order(names: &[String]) {
    let plain: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| *n != "ping")
        .collect();
    assert_eq!(
        names.first().map(String::as_str),
        Some("message_start"),
        "{names:?}"
    );
    let mut i = 1;
    let mut deltas = 0;
    let mut blocks = 0;
    while plain.get(i) == Some(&"content_block_start") {
        i += 1;
        while plain.get(i) == Some(&"content_block_delta") {
            i += 1;
            deltas += 1;
        }
        assert_eq!(
            plain.get(i),
            Some(&"content_block_stop"),
            "a block ends at {i}: {names:?}"
        );
        i += 1;
        blocks += 1;
    }
    assert!(blocks >= 1 && deltas >= 1, "a block with a delta: {names:?}");
    assert_eq!(
        &plain[i..],
        ["message_delta", "message_stop"],
        "the end: {names:?}"
    );
}

/// The `type`s of a Responses stream (an `event:` name, when given, must
/// be the same).
pub(crate) fn responses_types(events: &[Sse]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let ty = e.json()["type"]
                .as_str()
                .unwrap_or_else(|| panic!("an event without a type: {e:?}"))
                .to_owned();
            if let Some(name) = &e.event {
                assert_eq!(name, &ty, "the event's name is its type: {e:?}");
            }
            ty
        })
        .collect()
}

/// Checks the Responses events of a text answer, deltas collapsed.
pub(crate) fn assert_responses_text_order(types: &[String]) {
    let mut collapsed: Vec<&str> = Vec::new();
    for t in types {
        if t == "response.output_text.delta" && collapsed.last() == Some(&"response.output_text.delta") {
            continue;
        }
        collapsed.push(t);
    }
    assert_eq!(
        collapsed,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ],
        "{types:?}"
    );
}

/// Checks `sequence_number`s go up by one from the first event.
pub(crate) fn assert_sequence_numbers(events: &[Sse]) {
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| {
            e.json()["sequence_number"]
                .as_u64()
                .unwrap_or_else(|| panic!("no sequence_number: {e:?}"))
        })
        .collect();
    for pair in numbers.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "sequence numbers go up by one: {numbers:?}");
    }
}

/// Provider calls the mock received, all endpoints.
pub(crate) fn mock_calls(mock: &MockProvider) -> u64 {
    mock.stats().requests
}

/// Provider calls the mock received for `model`.
pub(crate) fn mock_calls_of(mock: &MockProvider, model: &str) -> u64 {
    mock.stats().by_model.get(model).map_or(0, |b| b.requests)
}

/// A header of `reply` as text, `"<none>"` when absent.
pub(crate) fn header<'a>(reply: &'a Reply, name: &str) -> &'a str {
    reply.header(name).unwrap_or("<none>")
}
