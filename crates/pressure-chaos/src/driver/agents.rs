//! The `agents` scenario: coding agents' traffic on the gateway's own
//! agent endpoints in a 529 storm, with a backup of the other vendor.
//!
//! * Two use cases named by the agents' model ids (`aliases`):
//!   `claude-agents` (`claude-*`, on `POST /v1/messages`) with the
//!   Anthropic primary [`CLAUDE_PRIMARY`] and the OpenAI chat-completions
//!   backup [`GPT_BACKUP`]; `codex-agents` (`gpt-5*`, on `POST
//!   /v1/responses`) with the OpenAI Responses primary [`GPT_PRIMARY`] and
//!   the Anthropic backup [`CLAUDE_BACKUP`]. Three providers on the one
//!   mock: `anthropic` (kind `anthropic`), `openai` (kind `openai`),
//!   `responses` (kind `openai-responses`).
//! * The clients: even workers speak Messages, odd ones Responses; half of
//!   each stream; each worker is one of three tenants (API keys), paced to
//!   at most one request per [`PACE`]. Every answer is checked for its
//!   dialect's shape, every stream for its dialect's event order.
//! * The run is made once (there is no retry money budget to compare: the
//!   use cases have none); each tenant's spend is read from the admin API
//!   before and after the load and compared with what the mock billed for
//!   that tenant's requests.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pressure_core::clock::duration_to_millis;
use pressure_llm::price::ModelPrice;
use pressure_mock::{Arrival, Behaviour, Outcome, Phase, Price, BAD_REQUEST_MARKER};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::criteria::{
    breaker_criteria, criterion, storm_window, RunData, RECOVERY_GRACE_MS, RECOVERY_SHARE,
};
use super::load::{ms_since, request_shape, Sample, CLIENT_TIMEOUT, PROMPTS};
use super::scenario::{Scenario, CLAUDE_BACKUP, CLAUDE_PRIMARY, GPT_BACKUP, GPT_PRIMARY};
use super::stack::{Stack, StackSettings, STORE_TIMEOUT_MS};
use super::{observe, settle, ChaosError, ChaosOptions, Observed, Progress};
use crate::report::Criterion;

/// The scenario's name.
pub(super) const NAME: &str = "agents";
/// The agents' route resource (its concurrency shows slot leaks).
pub(super) const ROUTE: &str = "gateway:route:agents";
/// A client starts at most one request per this span (a steady rate that
/// does not follow the answer times; a late worker starts at once).
pub(super) const PACE: Duration = Duration::from_millis(200);
/// Storm requests started this long after the storm began are judged
/// (the phase switch and the clients' clock may be a moment apart).
const STORM_IN_MS: f64 = 250.0;
/// ... and this long before it ended at the latest (a request's retries
/// must not reach past the storm into the healthy primary).
const STORM_OUT_MS: f64 = 750.0;

const MESSAGES: &str = "/v1/messages";
const RESPONSES: &str = "/v1/responses";
const CHAT: &str = "/v1/chat/completions";

/// The API keys: (key = tenant, SHA-256 of the key, as the config holds it).
pub(super) const TENANTS: [(&str, &str); 3] = [
    (
        "agents-ada",
        "d73cb3d7b5267557210b50860038508daac488a7fbda78f224c7d878fcbe1a99",
    ),
    (
        "agents-bo",
        "5c103639bdfb834b29923fce82ee953b4d8cc3277bec9415ea37aea55821e1c7",
    ),
    (
        "agents-cy",
        "7f70ce77bbc00afdd876d43438de084ea2bf3da395cc678ec65734ba753682cc",
    ),
];

/// The tenant of the invalid requests (the mock refuses them 400): kept
/// apart, since the gateway charges a failed attempt its prompt by its own
/// count, which the mock's bill cannot tell for a prompt it refused.
pub(super) const INVALID_TENANT: (&str, &str) = (
    "agents-eve",
    "3d99aa34eb587f06419693158d006a2446e0adf5810bd65b652180ca2badb5ae",
);

/// The models' prices, the same on the mock and the gateway.
const PRICES: [(&str, ModelPrice); 4] = [
    (CLAUDE_PRIMARY, ModelPrice::new(3_000_000, 15_000_000)),
    (GPT_BACKUP, ModelPrice::new(2_000_000, 8_000_000)),
    (GPT_PRIMARY, ModelPrice::new(1_250_000, 10_000_000)),
    (CLAUDE_BACKUP, ModelPrice::new(1_000_000, 5_000_000)),
];

/// The agents' two APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Dialect {
    /// Anthropic's Messages API (`POST /v1/messages`).
    Messages,
    /// OpenAI's Responses API (`POST /v1/responses`).
    Responses,
}

impl Dialect {
    /// The label in results and details.
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Messages => "messages",
            Self::Responses => "responses",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Self::Messages => MESSAGES,
            Self::Responses => RESPONSES,
        }
    }

    /// The model id the agents send (an alias of their use case), which is
    /// also the primary.
    fn primary(self) -> &'static str {
        match self {
            Self::Messages => CLAUDE_PRIMARY,
            Self::Responses => GPT_PRIMARY,
        }
    }

    /// The backup model and the mock endpoint it is called on.
    fn backup(self) -> (&'static str, &'static str) {
        match self {
            Self::Messages => (GPT_BACKUP, CHAT),
            Self::Responses => (CLAUDE_BACKUP, MESSAGES),
        }
    }

    /// The status of the dialect's overload refusal.
    fn overload_status(self) -> u16 {
        match self {
            Self::Messages => 529,
            Self::Responses => 503,
        }
    }

    /// The breaker of the primary (`provider/model`).
    fn primary_breaker(self) -> String {
        match self {
            Self::Messages => format!("anthropic/{CLAUDE_PRIMARY}"),
            Self::Responses => format!("responses/{GPT_PRIMARY}"),
        }
    }
}

/// One agent request and what came back.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AgentSample {
    /// The generic sample (its `stream_error`: a stream that broke its
    /// dialect's event order).
    pub sample: Sample,
    /// Which API it called.
    pub dialect: Dialect,
    /// The tenant (API key) it was sent as.
    pub tenant: &'static str,
    /// Whether the body (or the stream) had the dialect's shape for its
    /// status; the error says what was wrong.
    pub shape: Result<(), String>,
    /// Whether the answer carried `retry-after`.
    pub retry_after: bool,
    /// The index of its prompt in [`PROMPTS`].
    pub prompt: usize,
}

impl AgentSample {
    fn answered(&self) -> bool {
        (200..300).contains(&self.sample.status) && self.shape.is_ok()
    }

    fn degradation(&self) -> Option<&str> {
        self.sample.degradation.as_deref()
    }
}

/// One run of the scenario.
#[derive(Debug, Clone)]
pub(super) struct AgentRun {
    /// What the generic criteria and the report's series read.
    pub data: RunData,
    /// The agents' samples (the same requests as `data.samples`).
    pub samples: Vec<AgentSample>,
    /// Each tenant's spend on the gateway during the load (after − before),
    /// or why it could not be read.
    pub spend: Result<BTreeMap<String, u64>, String>,
}

/// The gateway section for the agents, at a mock at `base_url`.
pub(super) fn gateway_config(base_url: &str, settings: &StackSettings, redis: Option<(&str, &str)>) -> Value {
    let backend = match redis {
        Some((url, prefix)) => {
            json!({ "type": "redis", "url": url, "keyPrefix": prefix,
                    "timeoutMs": STORE_TIMEOUT_MS, "connectTimeoutMs": 5 * STORE_TIMEOUT_MS })
        }
        None => json!({ "type": "memory" }),
    };
    let timeouts = json!({
        "connectMs": 500,
        "firstByteMs": settings.provider_timeout_ms,
        "readMs": settings.provider_timeout_ms,
        "poolWaitMs": 500,
        "maxConnections": settings.max_connections
    });
    let provider_of = |model: &str| match model {
        CLAUDE_PRIMARY | CLAUDE_BACKUP => "anthropic",
        GPT_PRIMARY => "responses",
        _ => "openai",
    };
    let models: Vec<Value> = PRICES
        .iter()
        .map(|(model, p)| {
            json!({ "provider": provider_of(model), "model": model,
                    "limits": { "requestsPerMinute": 6_000_000 },
                    "context": { "contextTokens": 200_000, "maxOutputTokens": 1_024 },
                    "price": { "inputMicroUsdPer1M": p.input_micro_usd_per_1m,
                               "outputMicroUsdPer1M": p.output_micro_usd_per_1m } })
        })
        .collect();
    let keys: Vec<Value> = TENANTS
        .iter()
        .chain([&INVALID_TENANT])
        .map(|(key, sha)| json!({ "sha256": sha, "tenant": key, "name": key }))
        .collect();
    let retry = json!({ "maxAttempts": settings.max_attempts, "baseDelayMs": 100, "maxDelayMs": 1_000 });
    let use_case = |primary: &str, backup: &str, alias: &str| {
        json!({
            "chain": [ { "model": format!("{}/{primary}", provider_of(primary)) },
                       { "model": format!("{}/{backup}", provider_of(backup)) } ],
            "aliases": [alias],
            "totalMs": settings.total_ms,
            "retry": retry
        })
    };
    json!({
        "listen": "127.0.0.1:0",
        // Required; nothing goes to it.
        "upstreams": { "none": { "url": base_url.trim_end_matches("/v1"), "pathPrefix": "/none" } },
        "backend": backend,
        "admin": { "listen": "127.0.0.1:0" },
        "auth": { "required": true, "apiKeys": keys },
        "pressure": {
            "perTenant": { "enabled": true, "limits": {
                "requestsPerDay": 1_000_000_000u64, "costMicroUsdPerDay": 1_000_000_000_000u64
            } },
            "perRoute": [ {
                "resource": ROUTE,
                "pathPrefix": "/v1/",
                "limits": { "maxConcurrentRequests": 10_000 }
            } ]
        },
        "llm": {
            "providers": {
                "anthropic": { "kind": "anthropic", "baseUrl": base_url, "timeouts": timeouts },
                "openai": { "kind": "openai", "baseUrl": base_url, "timeouts": timeouts },
                "responses": { "kind": "openai-responses", "baseUrl": base_url, "timeouts": timeouts }
            },
            "models": models,
            "useCases": {
                "claude-agents": use_case(CLAUDE_PRIMARY, GPT_BACKUP, "claude-*"),
                "codex-agents": use_case(GPT_PRIMARY, CLAUDE_BACKUP, "gpt-5*")
            },
            "breaker": {
                "failureRateThreshold": 0.5,
                "windowMs": settings.breaker_window_ms,
                "minimumCalls": settings.minimum_calls,
                "openWaitMs": settings.breaker_open_wait_ms,
                "halfOpenProbes": settings.half_open_probes
            }
        }
    })
}

/// The mock's price table.
fn mock_prices() -> BTreeMap<String, Price> {
    PRICES
        .iter()
        .map(|(m, p)| {
            (
                (*m).to_owned(),
                Price::new(p.input_micro_usd_per_1m, p.output_micro_usd_per_1m),
            )
        })
        .collect()
}

// ------------------------------------------------------------------------
// The clients.

#[derive(Debug, Clone)]
struct Load {
    /// `http://127.0.0.1:<port>`.
    root: String,
    concurrency: usize,
    duration: Duration,
    streaming: super::scenario::Streaming,
    tag: String,
}

/// Worker `w`'s dialect, tenant and whether it streams.
fn worker(w: usize, streaming: super::scenario::Streaming) -> (Dialect, &'static str, bool) {
    let dialect = if w.is_multiple_of(2) {
        Dialect::Messages
    } else {
        Dialect::Responses
    };
    (dialect, TENANTS[w % TENANTS.len()].0, streaming.for_worker(w / 2))
}

async fn drive(load: &Load, t0: Instant, done: Arc<AtomicU64>) -> Vec<AgentSample> {
    let Ok(client) = reqwest::Client::builder()
        .pool_max_idle_per_host(load.concurrency)
        .timeout(CLIENT_TIMEOUT)
        .build()
    else {
        return Vec::new();
    };
    let end = t0 + load.duration;
    let workers = (0..load.concurrency).map(|w| {
        let client = client.clone();
        let load = load.clone();
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let (dialect, tenant, stream) = worker(w, load.streaming);
            let mut samples = Vec::new();
            let mut n: usize = 0;
            let mut next = Instant::now();
            while next < end {
                tokio::time::sleep_until(next).await;
                next = Instant::now() + PACE;
                let (bad, index) = request_shape(n, w);
                let id = format!("{}-{tenant}-{w}-{n}", load.tag);
                let call = Call {
                    dialect,
                    tenant: if bad { INVALID_TENANT.0 } else { tenant },
                    stream,
                    bad,
                    prompt: index,
                };
                samples.push(one(&client, &load.root, t0, id, call).await);
                done.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            samples
        })
    });
    let mut out = Vec::new();
    for samples in futures::future::join_all(workers).await.into_iter().flatten() {
        out.extend(samples);
    }
    out.sort_by(|a, b| a.sample.start_ms.total_cmp(&b.sample.start_ms));
    out
}

#[derive(Debug, Clone, Copy)]
struct Call {
    dialect: Dialect,
    tenant: &'static str,
    stream: bool,
    bad: bool,
    prompt: usize,
}

/// The request body of `call`.
fn body(call: Call) -> Value {
    let prompt = PROMPTS[call.prompt % PROMPTS.len()];
    let text = if call.bad {
        format!("{prompt} {BAD_REQUEST_MARKER}")
    } else {
        prompt.to_owned()
    };
    let system = "You are a coding agent. Answer briefly.";
    let mut body = match call.dialect {
        Dialect::Messages => json!({
            "model": CLAUDE_PRIMARY,
            "max_tokens": 64,
            "system": system,
            "messages": [ { "role": "user", "content": text } ]
        }),
        Dialect::Responses => json!({
            "model": GPT_PRIMARY,
            "instructions": system,
            "input": [ { "role": "user", "content": text } ],
            "max_output_tokens": 64
        }),
    };
    if call.stream {
        body["stream"] = Value::Bool(true);
    }
    body
}

/// The most bytes of an answer kept for its checks.
const MAX_BODY: usize = 1 << 20;

async fn one(client: &reqwest::Client, root: &str, t0: Instant, id: String, call: Call) -> AgentSample {
    let start_ms = ms_since(t0);
    let mut out = AgentSample {
        sample: Sample {
            id: id.clone(),
            start_ms,
            end_ms: start_ms,
            status: 0,
            degradation: None,
            bad: call.bad,
            stream: call.stream,
            stream_error: false,
        },
        dialect: call.dialect,
        tenant: call.tenant,
        shape: Err("no answer".into()),
        retry_after: false,
        prompt: call.prompt,
    };
    let mut req = client
        .post(format!("{root}{}", call.dialect.path()))
        .header("x-request-id", &id)
        .json(&body(call));
    req = match call.dialect {
        Dialect::Messages => req
            .header("x-api-key", call.tenant)
            .header("anthropic-version", "2023-06-01"),
        Dialect::Responses => req.bearer_auth(call.tenant),
    };
    if let Ok(resp) = req.send().await {
        let status = resp.status().as_u16();
        out.sample.status = status;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        out.sample.degradation = header("x-pressure-degradation");
        out.retry_after = header("retry-after").is_some();
        let sse = header("content-type").is_some_and(|c| c.starts_with("text/event-stream"));
        let mut bytes = resp.bytes_stream();
        let mut all = Vec::new();
        let mut failed = false;
        while let Some(chunk) = bytes.next().await {
            match chunk {
                Ok(c) if all.len() + c.len() <= MAX_BODY => all.extend_from_slice(&c),
                Ok(_) => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        let text = String::from_utf8_lossy(&all);
        out.shape = if failed {
            Err("the answer broke off".into())
        } else {
            check(call.dialect, status, sse, call.stream, &text)
        };
        out.sample.stream_error = sse && out.shape.is_err();
        if failed && !sse {
            out.sample.status = 0;
        }
    }
    out.sample.end_ms = ms_since(t0);
    out
}

// ------------------------------------------------------------------------
// The dialects' shapes.

/// Whether an answer of `status` (an event stream when `sse`, to a request
/// that asked for one when `asked`) has the dialect's shape.
pub(super) fn check(dialect: Dialect, status: u16, sse: bool, asked: bool, text: &str) -> Result<(), String> {
    if !(200..300).contains(&status) {
        if sse {
            return Err(format!("a {status} as an event stream"));
        }
        return check_error(dialect, text);
    }
    match (sse, asked) {
        (true, true) => check_stream(dialect, text),
        (false, false) => check_json(dialect, text),
        (true, false) => Err("an event stream to a request for JSON".into()),
        (false, true) => Err("JSON to a request for a stream".into()),
    }
}

fn parse(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))
}

fn nonempty_str(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty())
}

/// An Anthropic `message` or a Responses `response` object.
fn check_json(dialect: Dialect, text: &str) -> Result<(), String> {
    let v = parse(text)?;
    match dialect {
        Dialect::Messages => {
            if v["type"] != "message" || v["role"] != "assistant" {
                return Err(format!(
                    "not an assistant message: type {}, role {}",
                    v["type"], v["role"]
                ));
            }
            let texts = v["content"].as_array().map_or(0, |c| {
                c.iter()
                    .filter(|b| b["type"] == "text" && nonempty_str(&b["text"]))
                    .count()
            });
            if texts == 0 {
                return Err("no text block in content".into());
            }
            if !nonempty_str(&v["stop_reason"]) || !nonempty_str(&v["model"]) || !nonempty_str(&v["id"]) {
                return Err("id, model or stop_reason missing".into());
            }
            usage(&v["usage"], "input_tokens", "output_tokens")
        }
        Dialect::Responses => {
            if v["object"] != "response" || v["status"] != "completed" {
                return Err(format!(
                    "not a completed response: object {}, status {}",
                    v["object"], v["status"]
                ));
            }
            let texts = v["output"].as_array().map_or(0, |items| {
                items
                    .iter()
                    .filter(|i| i["type"] == "message")
                    .flat_map(|i| i["content"].as_array().into_iter().flatten())
                    .filter(|c| c["type"] == "output_text" && nonempty_str(&c["text"]))
                    .count()
            });
            if texts == 0 {
                return Err("no output_text in output".into());
            }
            if !nonempty_str(&v["id"]) || !nonempty_str(&v["model"]) {
                return Err("id or model missing".into());
            }
            usage(&v["usage"], "input_tokens", "output_tokens")
        }
    }
}

fn usage(u: &Value, input: &str, output: &str) -> Result<(), String> {
    match (u[input].as_u64(), u[output].as_u64()) {
        (Some(_), Some(o)) if o > 0 => Ok(()),
        _ => Err(format!("usage without {input} / {output}: {u}")),
    }
}

/// Anthropic's `{"type":"error","error":{"type","message"}}` or OpenAI's
/// `{"error":{"message","type"}}`.
fn check_error(dialect: Dialect, text: &str) -> Result<(), String> {
    let v = parse(text)?;
    let e = &v["error"];
    let ok = match dialect {
        Dialect::Messages => v["type"] == "error" && nonempty_str(&e["type"]) && nonempty_str(&e["message"]),
        Dialect::Responses => nonempty_str(&e["message"]) && nonempty_str(&e["type"]),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "not a {} error body: {}",
            dialect.label(),
            truncated(text)
        ))
    }
}

fn truncated(text: &str) -> String {
    text.chars().take(160).collect()
}

/// The events of an SSE body: (event name, data), comments skipped; an
/// event without a name is named by its data's `type`.
fn events(text: &str) -> Result<Vec<(String, Value)>, String> {
    let mut out = Vec::new();
    for block in text.replace("\r\n", "\n").split("\n\n") {
        let mut name = None;
        let mut data = String::new();
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = Some(n.trim().to_owned());
            } else if let Some(d) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        if data.is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(&data).map_err(|e| format!("an event's data is not JSON ({e})"))?;
        let ty = v["type"].as_str().unwrap_or_default().to_owned();
        let name = name.unwrap_or_else(|| ty.clone());
        if name != ty {
            return Err(format!("event {name} carries data of type {ty:?}"));
        }
        out.push((name, v));
    }
    Ok(out)
}

/// The dialect's event order: Messages from `message_start` to
/// `message_stop` with text deltas and a `message_delta` carrying the stop
/// reason; Responses from `response.created` to `response.completed` with
/// text deltas and rising sequence numbers; neither with an error event.
fn check_stream(dialect: Dialect, text: &str) -> Result<(), String> {
    let evs = events(text)?;
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    let count = |n: &str| names.iter().filter(|x| **x == n).count();
    let (first, last, delta, known): (&str, &str, &str, &[&str]) = match dialect {
        Dialect::Messages => (
            "message_start",
            "message_stop",
            "content_block_delta",
            &[
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "ping",
            ],
        ),
        Dialect::Responses => (
            "response.created",
            "response.completed",
            "response.output_text.delta",
            &[
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
        ),
    };
    if names.first() != Some(&first) || names.last() != Some(&last) {
        return Err(format!(
            "{} events from {:?} to {:?} (want {first} … {last})",
            names.len(),
            names.first(),
            names.last()
        ));
    }
    if count(first) != 1 || count(last) != 1 {
        return Err(format!("{first} or {last} more than once"));
    }
    if let Some(odd) = names.iter().find(|n| !known.contains(n)) {
        return Err(format!("unexpected event {odd}"));
    }
    if count(delta) == 0 {
        return Err(format!("no {delta}"));
    }
    match dialect {
        Dialect::Messages => {
            let stop = evs
                .iter()
                .filter(|(n, _)| n == "message_delta")
                .filter(|(_, v)| nonempty_str(&v["delta"]["stop_reason"]))
                .count();
            if stop != 1 {
                return Err(format!("{stop} message_delta events with a stop_reason (want 1)"));
            }
        }
        Dialect::Responses => {
            let seq: Vec<u64> = evs
                .iter()
                .filter_map(|(_, v)| v["sequence_number"].as_u64())
                .collect();
            if seq.len() != evs.len() || seq.windows(2).any(|w| w[1] <= w[0]) {
                return Err("sequence numbers missing or not rising".into());
            }
            let done = &evs[evs.len() - 1].1["response"];
            if done["status"] != "completed" {
                return Err(format!("response.completed with status {}", done["status"]));
            }
            usage(&done["usage"], "input_tokens", "output_tokens")?;
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------
// The run.

/// The admin API's `costMicroUsdPerDay` use of every tenant.
async fn spend(http: &reqwest::Client, admin: std::net::SocketAddr) -> Result<BTreeMap<String, u64>, String> {
    let mut out = BTreeMap::new();
    for (tenant, _) in TENANTS {
        let url = format!("http://{admin}/admin/pressure/tenants/{tenant}/limits");
        let r = http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if r.status() != 200 {
            return Err(format!("GET {url}: {}", r.status()));
        }
        let v: Value = r.json().await.map_err(|e| format!("GET {url}: {e}"))?;
        let used = v["usage"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|u| u["dimension"] == "costMicroUsdPerDay")
            .and_then(|u| u["used"].as_u64())
            .unwrap_or(0);
        out.insert(tenant.to_owned(), used);
    }
    Ok(out)
}

/// One run of the agents scenario: start, warm up, load, settle, observe, stop.
pub(super) async fn run(
    scenario: &Scenario,
    settings: &StackSettings,
    opts: &ChaosOptions,
    session: &str,
    progress: &dyn Progress,
) -> Result<AgentRun, ChaosError> {
    let tag = scenario.name.to_owned();
    let prefix = format!("pressure-chaos:{session}:{tag}:");
    let redis = opts.redis.as_deref().map(|url| (url, prefix.as_str()));
    let stack = Stack::launch(scenario, mock_prices(), opts.seed, |base_url| {
        gateway_config(base_url, settings, redis)
    })
    .await?;
    let root = format!("http://{}", stack.addr);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| ChaosError::Start(format!("http client: {e}")))?;

    // Warm-up on a healthy mock, then a clean slate (the tenants' spend so
    // far is read, not reset).
    stack
        .mock
        .set_behaviour(Behaviour::single(Phase::normal("warm-up")))
        .map_err(ChaosError::Start)?;
    let warm = Load {
        root: root.clone(),
        concurrency: opts.concurrency.min(8),
        duration: Duration::from_millis(300),
        streaming: scenario.streaming,
        tag: format!("{tag}-warm"),
    };
    drive(&warm, Instant::now(), Arc::new(AtomicU64::new(0))).await;
    settle(&stack, ROUTE, Duration::from_secs(2)).await;
    stack.mock.reset();
    let before = spend(&http, stack.admin).await;

    stack
        .mock
        .set_behaviour(scenario.behaviour.clone())
        .map_err(ChaosError::Start)?;
    let t0 = Instant::now();
    let registry = stack.llm.breakers();
    let t0_nanos = registry.clock().now_nanos();
    let load = Load {
        root,
        concurrency: opts.concurrency,
        duration: opts.duration,
        streaming: scenario.streaming,
        tag,
    };
    let done = Arc::new(AtomicU64::new(0));
    let samples = {
        let ticker_done = Arc::clone(&done);
        let drive = drive(&load, t0, done);
        tokio::pin!(drive);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                samples = &mut drive => break samples,
                _ = tick.tick() => progress.tick(
                    ticker_done.load(Ordering::Relaxed),
                    duration_to_millis(t0.elapsed()),
                ),
            }
        }
    };
    let load_ms = opts.duration.as_secs_f64() * 1_000.0;
    settle(&stack, ROUTE, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = spend(&http, stack.admin).await;

    let end_ms = t0.elapsed().as_secs_f64() * 1_000.0;
    let Observed {
        arrivals,
        transitions,
        leaks,
    } = observe(&stack, t0, t0_nanos);
    let mock = stack.mock.stats();
    stack.stop().await;
    let spend = match (before, after) {
        (Ok(b), Ok(a)) => Ok(a
            .into_iter()
            .map(|(t, used)| {
                let was = b.get(&t).copied().unwrap_or(0);
                (t, used.saturating_sub(was))
            })
            .collect()),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    Ok(AgentRun {
        data: RunData {
            scenario: scenario.clone(),
            settings: *settings,
            concurrency: opts.concurrency,
            samples: samples.iter().map(|s| s.sample.clone()).collect(),
            arrivals,
            transitions,
            mock,
            leaks,
            pool: pressure_llm::provider::PoolStats::default(),
            load_ms,
            end_ms,
        },
        samples,
        spend,
    })
}

/// The report's results: `<dialect>:<result>` (e.g. `messages:backup`,
/// `responses:error:400`).
pub(super) fn results(samples: &[AgentSample]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for s in samples {
        let label = if s.sample.status == 200 && s.shape.is_err() {
            format!("{}:malformed", s.dialect.label())
        } else {
            format!("{}:{}", s.dialect.label(), s.sample.result())
        };
        *out.entry(label).or_insert(0u64) += 1;
    }
    out
}

// ------------------------------------------------------------------------
// The criteria.

/// The agents scenario's own criteria (the common ones are added by the caller).
pub(super) fn criteria(run: &AgentRun) -> Vec<Criterion> {
    let mut out = vec![
        answered_or_refused(run),
        json_shapes(run),
        stream_orders(run),
        invalid_refused(run),
        storm_served_by_backup(run, Dialect::Messages),
        storm_served_by_backup(run, Dialect::Responses),
    ];
    for d in [Dialect::Messages, Dialect::Responses] {
        out.extend(breaker_criteria(
            &run.data,
            &d.primary_breaker(),
            d.primary(),
            Some(d.primary()),
        ));
    }
    out.push(recovery(run));
    out.push(money(run));
    out
}

fn good(run: &AgentRun) -> impl Iterator<Item = &AgentSample> {
    run.samples.iter().filter(|s| !s.sample.bad)
}

fn first_of<'a>(mut it: impl Iterator<Item = &'a AgentSample>) -> String {
    it.next()
        .map(|s| {
            format!(
                " (first: {} {} {}: {})",
                s.sample.id,
                s.dialect.label(),
                s.sample.status,
                s.shape.as_ref().err().map_or("", String::as_str)
            )
        })
        .unwrap_or_default()
}

fn answered_or_refused(run: &AgentRun) -> Criterion {
    let documented =
        |s: &AgentSample| s.sample.status == s.dialect.overload_status() && s.retry_after && s.shape.is_ok();
    let total = good(run).count();
    let ok = good(run).filter(|s| s.answered()).count();
    let refused = good(run).filter(|s| documented(s)).count();
    let failed = || good(run).filter(|s| !s.answered() && !documented(s));
    let n_failed = failed().count();
    criterion(
        "Every agent request is answered 2xx or refused as documented (529 / 503 with retry-after)",
        ok > 0 && n_failed == 0,
        format!(
            "of {total} requests: {ok} answered 2xx, {refused} refused 529/503 with retry-after, {n_failed} otherwise{}",
            first_of(failed())
        ),
    )
}

fn json_shapes(run: &AgentRun) -> Criterion {
    let of = |d: Dialect| {
        let json: Vec<&AgentSample> = good(run)
            .filter(|s| s.dialect == d && !s.sample.stream && (200..300).contains(&s.sample.status))
            .collect();
        let bad = json.iter().filter(|s| s.shape.is_err()).count();
        (json.len(), bad)
    };
    let (m, m_bad) = of(Dialect::Messages);
    let (r, r_bad) = of(Dialect::Responses);
    let malformed =
        good(run).filter(|s| !s.sample.stream && (200..300).contains(&s.sample.status) && s.shape.is_err());
    criterion(
        "Every JSON answer has its dialect's shape (an Anthropic message; a completed Responses response)",
        m > 0 && r > 0 && m_bad + r_bad == 0,
        format!(
            "{m_bad} of {m} Messages bodies and {r_bad} of {r} Responses bodies malformed{}",
            first_of(malformed)
        ),
    )
}

fn stream_orders(run: &AgentRun) -> Criterion {
    let of = |d: Dialect| {
        let streams: Vec<&AgentSample> = good(run)
            .filter(|s| s.dialect == d && s.sample.stream && s.sample.status == 200)
            .collect();
        let bad = streams.iter().filter(|s| s.shape.is_err()).count();
        (streams.len(), bad)
    };
    let (m, m_bad) = of(Dialect::Messages);
    let (r, r_bad) = of(Dialect::Responses);
    let broken = good(run).filter(|s| s.sample.stream && s.sample.status == 200 && s.shape.is_err());
    criterion(
        "Every stream keeps its dialect's event order (message_start … message_stop; response.created … response.completed)",
        m > 0 && r > 0 && m_bad + r_bad == 0,
        format!(
            "{m_bad} of {m} Messages streams and {r_bad} of {r} Responses streams out of order or failed{}",
            first_of(broken)
        ),
    )
}

fn invalid_refused(run: &AgentRun) -> Criterion {
    let bad: Vec<&AgentSample> = run.samples.iter().filter(|s| s.sample.bad).collect();
    let refused = bad
        .iter()
        .filter(|s| s.sample.status == 400 && s.shape.is_ok())
        .count();
    let by = |d: Dialect| bad.iter().filter(|s| s.dialect == d).count();
    criterion(
        "Invalid requests are refused 400 in the dialect's error shape",
        by(Dialect::Messages) > 0 && by(Dialect::Responses) > 0 && refused == bad.len(),
        format!(
            "{refused} of {} invalid requests ({} Messages, {} Responses) refused 400 with the dialect's error body{}",
            bad.len(),
            by(Dialect::Messages),
            by(Dialect::Responses),
            first_of(bad.iter().copied().filter(|s| !(s.sample.status == 400 && s.shape.is_ok())))
        ),
    )
}

/// The arrivals of each request id.
fn by_id(arrivals: &[Arrival]) -> HashMap<&str, Vec<&Arrival>> {
    let mut out: HashMap<&str, Vec<&Arrival>> = HashMap::new();
    for a in arrivals {
        if let Some(id) = a.request_id.as_deref() {
            out.entry(id).or_default().push(a);
        }
    }
    out
}

fn storm_served_by_backup(run: &AgentRun, d: Dialect) -> Criterion {
    let (start, end) = storm_window(&run.data);
    let (from, to) = (start + STORM_IN_MS, end - STORM_OUT_MS);
    let (backup, endpoint) = d.backup();
    let ids = by_id(&run.data.arrivals);
    let hit: Vec<&AgentSample> = good(run)
        .filter(|s| s.dialect == d && s.sample.start_ms >= from && s.sample.start_ms < to)
        .collect();
    let served = |s: &&AgentSample| {
        s.answered()
            && s.degradation() == Some("backup")
            && ids.get(s.sample.id.as_str()).is_some_and(|a| {
                a.iter()
                    .any(|a| a.outcome == Outcome::Ok && a.model == backup && a.endpoint == endpoint)
            })
    };
    let n = hit.iter().filter(|s| served(s)).count();
    let primary_ok = ids
        .values()
        .flatten()
        .filter(|a| a.model == d.primary() && a.outcome == Outcome::Ok && a.at_ms >= from && a.at_ms < to)
        .count();
    let (name, rendered) = match d {
        Dialect::Messages => (
            "During the storm, Messages traffic is served by the OpenAI backup and rendered as Anthropic messages",
            "Anthropic messages / events",
        ),
        Dialect::Responses => (
            "During the storm, Responses traffic is served by the Anthropic backup and rendered as Responses",
            "Responses objects / events",
        ),
    };
    criterion(
        name,
        !hit.is_empty() && n == hit.len() && primary_ok == 0,
        format!(
            "{n} of {} requests started {:.1}–{:.1} s answered by {backup} (on {endpoint}) with x-pressure-degradation: backup as {rendered}; {primary_ok} answers by {} in that span{}",
            hit.len(),
            from / 1_000.0,
            to / 1_000.0,
            d.primary(),
            first_of(hit.iter().copied().filter(|s| !served(s)))
        ),
    )
}

/// Of the good requests of `d` started in `[from, to)`: how many, and the
/// share answered by the primary.
fn primary_share(run: &AgentRun, d: Dialect, from: f64, to: f64) -> (usize, f64) {
    let started: Vec<&AgentSample> = good(run)
        .filter(|s| s.dialect == d && s.sample.start_ms >= from && s.sample.start_ms < to)
        .collect();
    let primary = started
        .iter()
        .filter(|s| s.answered() && s.degradation() == Some("primary"))
        .count();
    let share = if started.is_empty() {
        0.0
    } else {
        primary as f64 / started.len() as f64
    };
    (started.len(), share)
}

fn recovery(run: &AgentRun) -> Criterion {
    let (start, end) = storm_window(&run.data);
    let mut passed = true;
    let mut parts = Vec::new();
    for d in [Dialect::Messages, Dialect::Responses] {
        let (n_before, before) = primary_share(run, d, 0.0, start);
        let (n_after, after) = primary_share(run, d, end + RECOVERY_GRACE_MS, run.data.load_ms);
        passed &= n_before > 0 && n_after > 0 && before > 0.0 && after >= RECOVERY_SHARE * before;
        parts.push(format!(
            "{}: {:.1} % of {n_after} requests by {} from {:.1} s after the storm, {:.1} % of {n_before} before it",
            d.label(),
            after * 100.0,
            d.primary(),
            RECOVERY_GRACE_MS / 1_000.0,
            before * 100.0
        ));
    }
    criterion(
        "After the storm, traffic returns to the primaries",
        passed,
        format!(
            "{} (at least {:.0} % of the share before is needed)",
            parts.join("; "),
            RECOVERY_SHARE * 100.0
        ),
    )
}

/// The gateway's rule for a failed attempt (`pressure_llm`'s ledger): the
/// payer is charged the attempt's input at the model's input price (the
/// provider may bill it), while the mock bills nothing for a call it
/// refuses at once (500 / 503 / 529). The input of such a call is the
/// input the mock billed for the same prompt on the same model when it
/// answered.
fn refused_charge(
    a: &Arrival,
    prompt_of: &HashMap<&str, usize>,
    input_of: &HashMap<(&str, usize), u64>,
) -> Option<u64> {
    let prompt = *prompt_of.get(a.request_id.as_deref()?)?;
    let tokens = *input_of.get(&(a.model.as_str(), prompt))?;
    let price = PRICES.iter().find(|(m, _)| *m == a.model)?.1;
    Some(price.cost(tokens, 0).micro_usd())
}

fn money(run: &AgentRun) -> Criterion {
    const NAME: &str = "Each tenant's spend equals the mock's bill for its traffic, plus each refused attempt's prompt (the gateway's rule)";
    let spent = match &run.spend {
        Ok(s) => s,
        Err(e) => return criterion(NAME, false, format!("the tenants' spend could not be read: {e}")),
    };
    let tenant_of: HashMap<&str, &str> = run
        .samples
        .iter()
        .map(|s| (s.sample.id.as_str(), s.tenant))
        .collect();
    let prompt_of: HashMap<&str, usize> = run
        .samples
        .iter()
        .filter(|s| !s.sample.bad)
        .map(|s| (s.sample.id.as_str(), s.prompt))
        .collect();
    let mut input_of: HashMap<(&str, usize), u64> = HashMap::new();
    for a in run.data.arrivals.iter().filter(|a| a.outcome == Outcome::Ok) {
        if let Some(p) = a.request_id.as_deref().and_then(|id| prompt_of.get(id)) {
            input_of.insert((a.model.as_str(), *p), a.input_tokens);
        }
    }
    // Per tenant: (the mock's bill, refused calls, their prompts' charge).
    let mut per: BTreeMap<&str, (u64, u64, u64)> = TENANTS.iter().map(|(t, _)| (*t, (0, 0, 0))).collect();
    let mut unattributed = 0u64;
    let mut unknown = 0u64;
    for a in &run.data.arrivals {
        match a.request_id.as_deref().and_then(|id| tenant_of.get(id)) {
            Some(t) if *t == INVALID_TENANT.0 => {}
            Some(t) => {
                let row = per.entry(t).or_default();
                row.0 += a.micro_usd;
                if a.outcome == Outcome::ServerError {
                    row.1 += 1;
                    match refused_charge(a, &prompt_of, &input_of) {
                        Some(c) => row.2 += c,
                        None => unknown += 1,
                    }
                }
            }
            None => unattributed += a.micro_usd,
        }
    }
    let mut passed = unattributed == 0 && unknown == 0;
    let mut parts = Vec::new();
    for (t, (bill, refused, charge)) in &per {
        let s = spent.get(*t).copied().unwrap_or(0);
        passed &= *bill > 0 && s == bill + charge;
        parts.push(format!(
            "{t} spent {s} µ$ = billed {bill} µ$ + {charge} µ$ for the prompts of its {refused} refused attempts ({})",
            if s == bill + charge { "exact" } else { "MISMATCH" }
        ));
    }
    criterion(
        NAME,
        passed,
        format!(
            "{}; {unattributed} µ$ billed for no tenant's request; {unknown} refused attempts whose prompt was never answered on their model",
            parts.join("; ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG_STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0}\n\n\
        event: ping\ndata: {\"type\":\"ping\"}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
        event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
        event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n\
        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    fn responses_stream(last: &str, status: &str) -> String {
        let ev = |n: &str, seq: u64, extra: &str| {
            format!("event: {n}\ndata: {{\"type\":\"{n}\",\"sequence_number\":{seq}{extra}}}\n\n")
        };
        [
            ev("response.created", 0, ""),
            ": keep-alive\n\n".to_owned(),
            ev("response.output_text.delta", 1, ",\"delta\":\"Hi\""),
            ev(
                last,
                2,
                &format!(",\"response\":{{\"status\":\"{status}\",\"usage\":{{\"input_tokens\":3,\"output_tokens\":1}}}}"),
            ),
        ]
        .concat()
    }

    #[test]
    fn streams_are_checked_for_their_dialects_order() {
        assert_eq!(check(Dialect::Messages, 200, true, true, MSG_STREAM), Ok(()));
        let cut = MSG_STREAM.replace("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", "");
        assert!(check(Dialect::Messages, 200, true, true, &cut).is_err());
        let errored = MSG_STREAM.replace(
            "event: ping\ndata: {\"type\":\"ping\"}",
            "event: error\ndata: {\"type\":\"error\"}",
        );
        assert!(check(Dialect::Messages, 200, true, true, &errored).is_err());
        let mislabelled = MSG_STREAM.replace("event: ping", "event: content_block_stop");
        assert!(check(Dialect::Messages, 200, true, true, &mislabelled).is_err());

        let ok = responses_stream("response.completed", "completed");
        assert_eq!(check(Dialect::Responses, 200, true, true, &ok), Ok(()));
        let failed = responses_stream("response.failed", "failed");
        assert!(check(Dialect::Responses, 200, true, true, &failed).is_err());
        let backwards = ok.replace("\"sequence_number\":2", "\"sequence_number\":1");
        assert!(check(Dialect::Responses, 200, true, true, &backwards).is_err());
        assert!(
            check(Dialect::Responses, 200, true, true, MSG_STREAM).is_err(),
            "the other dialect's events"
        );
    }

    #[test]
    fn bodies_and_refusals_are_checked_for_their_dialects_shape() {
        let message = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1}})
        .to_string();
        assert_eq!(check(Dialect::Messages, 200, false, false, &message), Ok(()));
        assert!(
            check(Dialect::Responses, 200, false, false, &message).is_err(),
            "a message is no response"
        );
        let response = json!({"id": "resp_1", "object": "response", "status": "completed", "model": "m",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi"}]}],
            "usage": {"input_tokens": 3, "output_tokens": 1}})
        .to_string();
        assert_eq!(check(Dialect::Responses, 200, false, false, &response), Ok(()));
        assert!(
            check(Dialect::Responses, 200, true, false, &response).is_err(),
            "a stream nobody asked for"
        );

        let overloaded = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(check(Dialect::Messages, 529, false, false, overloaded), Ok(()));
        let openai = r#"{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}"#;
        assert_eq!(check(Dialect::Responses, 400, false, false, openai), Ok(()));
        assert!(check(Dialect::Messages, 400, false, false, openai).is_err());
        assert!(check(Dialect::Messages, 502, false, false, "Bad Gateway").is_err());
    }

    #[test]
    fn workers_cover_both_dialects_every_tenant_and_both_modes() {
        use super::super::scenario::Streaming;
        let mut seen = std::collections::BTreeSet::new();
        for w in 0..12 {
            seen.insert(worker(w, Streaming::Half));
        }
        for d in [Dialect::Messages, Dialect::Responses] {
            for (t, _) in TENANTS {
                for stream in [true, false] {
                    assert!(seen.contains(&(d, t, stream)), "{d:?} {t} {stream}");
                }
            }
        }
    }

    #[test]
    fn the_generated_config_is_valid() {
        let s = StackSettings::for_concurrency(16);
        let text = json!({ "gateway": gateway_config("http://127.0.0.1:1/v1", &s, None) });
        let cfg = pressure_gateway::config::parse_in(&text.to_string(), std::path::Path::new("."));
        assert!(cfg.is_ok(), "{cfg:?}");
    }
}
