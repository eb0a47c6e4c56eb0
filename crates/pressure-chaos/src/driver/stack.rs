//! The stack under test for one run: the mock provider and a gateway in
//! front of it, both in this process on 127.0.0.1 with ports chosen by the
//! system, so the driver can read the breakers' transitions and the mock's
//! arrivals on one clock.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use pressure_gateway::openai::Llm;
use pressure_gateway::{Gateway, Serving};
use pressure_llm::price::ModelPrice;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::scenario::{Scenario, BACKUP, PRIMARY};
use super::ChaosError;
use pressure_mock::{MockConfig, MockProvider, Price};

/// The use case the clients call.
pub const USE_CASE: &str = "chat";
/// The chat route's resource (its concurrency shows slot leaks).
pub(super) const ROUTE_RESOURCE: &str = "gateway:route:chat";
/// The primary model's price: $2.50 / $10 per 1M tokens in / out.
pub(super) const PRIMARY_PRICE: ModelPrice = ModelPrice::new(2_500_000, 10_000_000);
/// The backup model's price: $0.15 / $0.60 per 1M tokens in / out.
pub(super) const BACKUP_PRICE: ModelPrice = ModelPrice::new(150_000, 600_000);
/// The per-event retry budget of the "with budget" runs, in micro-dollars:
/// one full primary call of the driver's size (about 75 tokens in, 64 out:
/// 828 µ$). A failed call is charged its prompt (188 µ$), or its whole
/// answer when it timed out while the provider had it, so after any failure
/// the next primary try would exceed the budget and the event moves on to
/// the cheaper backup instead of retrying the expensive model.
pub(super) const BUDGET_MICRO_USD: u64 = 1_000;
/// The Redis backend's per-call timeout (`gateway.backend.timeoutMs`) when
/// the stand runs on Redis.
///
/// The stand injects provider faults, not store faults, so the store must
/// not time out. The production default (50 ms) assumes a store and a
/// client with CPU to spare. Here Redis, the clients, the mock and the
/// gateway share one machine and the timer runs on the same tokio runtime
/// as all of them, so on a loaded machine a call exceeds 50 ms with nothing
/// wrong with Redis. In the default `closed` failure mode each such timeout
/// is a refusal (seen as a `429` on the chat route's concurrency limit,
/// which had 10 000 free slots), and the run fails "Every client gets an
/// answer" for a reason that is not under test. The connect timeout is
/// raised likewise (500 ms by default), so a busy machine cannot fail the
/// stack's start.
pub(super) const STORE_TIMEOUT_MS: u64 = 1_000;

/// Timeouts and breaker settings of the stack, explicit so the criteria can
/// refer to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackSettings {
    /// Provider `firstByteMs` and `readMs`.
    pub provider_timeout_ms: u64,
    /// The use case's `totalMs`.
    pub total_ms: u64,
    /// `retry.maxAttempts` per model level.
    pub max_attempts: u32,
    /// Provider `maxConnections`.
    pub max_connections: u32,
    /// Breaker `windowMs`.
    pub breaker_window_ms: u64,
    /// Breaker `openWaitMs`.
    pub breaker_open_wait_ms: u64,
    /// Breaker `halfOpenProbes`.
    pub half_open_probes: u32,
    /// Breaker `minimumCalls`.
    pub minimum_calls: u64,
}

impl StackSettings {
    /// The settings for `concurrency` clients.
    pub fn for_concurrency(concurrency: usize) -> Self {
        Self {
            provider_timeout_ms: 500,
            total_ms: 5_000,
            max_attempts: 3,
            max_connections: u32::try_from(concurrency.saturating_mul(2)).unwrap_or(u32::MAX),
            breaker_window_ms: 2_000,
            breaker_open_wait_ms: 1_000,
            half_open_probes: 3,
            minimum_calls: 20,
        }
    }
}

/// A running mock and gateway.
pub(super) struct Stack {
    /// The mock provider.
    pub mock: MockProvider,
    /// The gateway's proxy address.
    pub addr: SocketAddr,
    /// The gateway's admin address.
    pub admin: SocketAddr,
    /// The gateway's LLM client (breakers, counters).
    pub llm: Llm,
    /// The gateway's broker (slot counts).
    pub broker: pressure_gateway::backend::Broker,
    serving: Serving,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("addr", &self.addr)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

/// The gateway section for a mock at `base_url`.
pub fn gateway_config(
    base_url: &str,
    settings: &StackSettings,
    budget: Option<u64>,
    redis: Option<(&str, &str)>,
) -> Value {
    let backend = match redis {
        Some((url, prefix)) => {
            json!({ "type": "redis", "url": url, "keyPrefix": prefix,
                    "timeoutMs": STORE_TIMEOUT_MS, "connectTimeoutMs": 5 * STORE_TIMEOUT_MS })
        }
        None => json!({ "type": "memory" }),
    };
    let mut retry = json!({ "maxAttempts": settings.max_attempts, "baseDelayMs": 100, "maxDelayMs": 1_000 });
    if let Some(b) = budget {
        retry["budgetMicroUsd"] = json!(b);
    }
    let price = |p: ModelPrice| json!({ "inputMicroUsdPer1M": p.input_micro_usd_per_1m, "outputMicroUsdPer1M": p.output_micro_usd_per_1m });
    json!({
        "listen": "127.0.0.1:0",
        "upstreams": { "mock": { "url": base_url.trim_end_matches("/v1"), "pathPrefix": "/" } },
        "backend": backend,
        "admin": { "listen": "127.0.0.1:0" },
        "pressure": {
            "perRoute": [ {
                "resource": ROUTE_RESOURCE,
                "pathPrefix": "/v1/chat/completions",
                "limits": { "maxConcurrentRequests": 10_000 }
            } ]
        },
        "llm": {
            "providers": { "mock": {
                "baseUrl": base_url,
                "timeouts": {
                    "connectMs": 500,
                    "firstByteMs": settings.provider_timeout_ms,
                    "readMs": settings.provider_timeout_ms,
                    "poolWaitMs": 500,
                    "maxConnections": settings.max_connections
                }
            } },
            "models": [
                { "provider": "mock", "model": PRIMARY,
                  "limits": { "requestsPerMinute": 6_000_000 },
                  "context": { "contextTokens": 8_192, "maxOutputTokens": 256 },
                  "price": price(PRIMARY_PRICE) },
                { "provider": "mock", "model": BACKUP,
                  "limits": { "requestsPerMinute": 6_000_000 },
                  "context": { "contextTokens": 8_192, "maxOutputTokens": 256 },
                  "price": price(BACKUP_PRICE) }
            ],
            "rules": { "chaos-keywords": [
                { "keywords": ["refund", "invoice"], "answer": "Billing questions: see /help/billing.", "label": "billing" }
            ] },
            "useCases": { USE_CASE: {
                "chain": [ { "model": format!("mock/{PRIMARY}") }, { "model": format!("mock/{BACKUP}") },
                           { "rules": "chaos-keywords" }, { "manualQueue": true } ],
                "totalMs": settings.total_ms,
                "retry": retry
            } },
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

impl Stack {
    /// Starts the mock (playing `scenario`'s behaviour from now) and a gateway
    /// in front of it.
    pub(super) async fn start(
        scenario: &Scenario,
        settings: &StackSettings,
        budget: Option<u64>,
        redis: Option<(&str, &str)>,
        seed: Option<u64>,
    ) -> Result<Self, ChaosError> {
        let price = |p: ModelPrice| Price::new(p.input_micro_usd_per_1m, p.output_micro_usd_per_1m);
        let prices: BTreeMap<String, Price> = [
            (PRIMARY.to_owned(), price(PRIMARY_PRICE)),
            (BACKUP.to_owned(), price(BACKUP_PRICE)),
        ]
        .into();
        Self::launch(scenario, prices, seed, |base_url| {
            gateway_config(base_url, settings, budget, redis)
        })
        .await
    }

    /// Starts the mock (playing `scenario`'s behaviour, billing at `prices`)
    /// and a gateway whose section `section` makes for the mock's base URL.
    pub(super) async fn launch(
        scenario: &Scenario,
        prices: BTreeMap<String, Price>,
        seed: Option<u64>,
        section: impl FnOnce(&str) -> Value,
    ) -> Result<Self, ChaosError> {
        let config = MockConfig {
            behaviour: scenario.behaviour.clone(),
            prices,
            seed,
            ..MockConfig::default()
        };
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let mock = MockProvider::start(loopback, config)
            .await
            .map_err(|e| ChaosError::Start(format!("mock provider: {e}")))?;
        let section = section(&mock.base_url());
        let text = json!({ "gateway": section }).to_string();
        let config = pressure_gateway::config::parse_in(&text, Path::new("."))
            .map_err(|e| ChaosError::Start(format!("gateway config: {e}")))?;
        let gateway = Gateway::build(config, Path::new("."))
            .await
            .map_err(|e| ChaosError::Start(format!("gateway: {e}")))?;
        let llm = gateway
            .llm()
            .ok_or_else(|| ChaosError::Start("the gateway has no LLM client".into()))?;
        let broker = gateway.broker().clone();
        let listener = TcpListener::bind(loopback).await.map_err(ChaosError::Io)?;
        let admin_listener = TcpListener::bind(loopback).await.map_err(ChaosError::Io)?;
        let addr = listener.local_addr().map_err(ChaosError::Io)?;
        let admin = admin_listener.local_addr().map_err(ChaosError::Io)?;
        Ok(Self {
            mock,
            addr,
            admin,
            llm,
            broker,
            serving: gateway.spawn(listener, admin_listener),
        })
    }

    /// Stops the gateway and the mock.
    pub(super) async fn stop(self) {
        self.serving.stop(std::time::Duration::from_secs(5)).await;
        self.mock.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_config_is_valid() {
        let s = StackSettings::for_concurrency(64);
        for budget in [None, Some(BUDGET_MICRO_USD)] {
            let text = json!({ "gateway": gateway_config("http://127.0.0.1:1/v1", &s, budget, None) });
            let cfg = pressure_gateway::config::parse_in(&text.to_string(), Path::new("."));
            assert!(cfg.is_ok(), "{cfg:?}");
        }
        let text = json!({ "gateway": gateway_config("http://127.0.0.1:1/v1", &s, None, Some(("redis://127.0.0.1:6379", "p:"))) });
        assert!(pressure_gateway::config::parse_in(&text.to_string(), Path::new(".")).is_ok());
    }
}
