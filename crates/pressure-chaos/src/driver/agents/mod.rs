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

mod clients;
mod criteria;
mod shapes;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pressure_core::clock::duration_to_millis;
use pressure_llm::price::ModelPrice;
use pressure_mock::{Behaviour, Phase, Price};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::criteria::RunData;
use super::load::Sample;
use super::scenario::{Scenario, CLAUDE_BACKUP, CLAUDE_PRIMARY, GPT_BACKUP, GPT_PRIMARY};
use super::stack::{Stack, StackSettings, STORE_TIMEOUT_MS};
use super::{observe, settle, ChaosError, ChaosOptions, Observed, Progress};
#[cfg(test)]
use clients::worker;
use clients::{drive, Load};
pub(super) use criteria::criteria;
#[cfg(test)]
use shapes::check;

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

    warm_up(&stack, &root, scenario, opts, &tag).await?;
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
    let samples = drive_with_progress(&load, t0, progress).await;
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
        spend: spent_between(before, after),
    })
}

/// A short load on a healthy mock, then a clean slate: the mock's counts
/// and arrivals reset (the tenants' spend so far is read, not reset).
async fn warm_up(
    stack: &Stack,
    root: &str,
    scenario: &Scenario,
    opts: &ChaosOptions,
    tag: &str,
) -> Result<(), ChaosError> {
    stack
        .mock
        .set_behaviour(Behaviour::single(Phase::normal("warm-up")))
        .map_err(ChaosError::Start)?;
    let warm = Load {
        root: root.to_owned(),
        concurrency: opts.concurrency.min(8),
        duration: Duration::from_millis(300),
        streaming: scenario.streaming,
        tag: format!("{tag}-warm"),
    };
    drive(&warm, Instant::now(), Arc::new(AtomicU64::new(0))).await;
    settle(stack, ROUTE, Duration::from_secs(2)).await;
    stack.mock.reset();
    Ok(())
}

/// Drives `load` from `t0`, telling `progress` every 200 ms how many
/// requests are done.
async fn drive_with_progress(load: &Load, t0: Instant, progress: &dyn Progress) -> Vec<AgentSample> {
    let done = Arc::new(AtomicU64::new(0));
    let ticker_done = Arc::clone(&done);
    let drive = drive(load, t0, done);
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
}

/// Each tenant's spend during the load (`after − before`), or why it could
/// not be read.
fn spent_between(
    before: Result<BTreeMap<String, u64>, String>,
    after: Result<BTreeMap<String, u64>, String>,
) -> Result<BTreeMap<String, u64>, String> {
    match (before, after) {
        (Ok(b), Ok(a)) => Ok(a
            .into_iter()
            .map(|(t, used)| {
                let was = b.get(&t).copied().unwrap_or(0);
                (t, used.saturating_sub(was))
            })
            .collect()),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
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
