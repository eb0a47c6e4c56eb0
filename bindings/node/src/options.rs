//! The JSON options `index.js` hands over, parsed with serde into the core's
//! own types (`Limits`, `QueueConfig`, `RedisConfig`): unknown keys and bad
//! values are errors naming the JSON path, as in the gateway's config.

use crate::error;
use pressure_core::{AcquireOptions, Limits, Priority, QueueConfig};
use pressure_redis::RedisConfig;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// `register(resource, { limits, queue })`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RegisterOptions {
    pub(crate) limits: Limits,
    #[serde(default)]
    pub(crate) queue: QueueConfig,
}

/// `ResourceBroker.connect({ redis, maxLazyResources })`, with `redis`
/// already turned into a `RedisConfig` object by `index.js`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ConnectOptions {
    pub(crate) redis: RedisConfig,
    /// `false`: start even when Redis does not answer yet (the failure mode
    /// applies until it does); default `true`: fail with the cause.
    #[serde(default = "yes")]
    pub(crate) strict: bool,
}

fn yes() -> bool {
    true
}

/// Parses `json` as `T`; the error names `what` and the JSON path, which is
/// also its `field` (under `limits.` when `what` is the limits themselves,
/// as the core's own limit errors say it).
pub(crate) fn parse<T: DeserializeOwned>(what: &str, json: &str) -> napi::Result<T> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            error::config(format!("{what}: {inner}"))
        } else {
            let field = if what == "limits" {
                format!("limits.{path}")
            } else {
                path.clone()
            };
            error::coded(
                error::CONFIG,
                format!("{what}.{path}: {inner}"),
                serde_json::json!({ "field": field }),
            )
        }
    })
}

/// One unit count from JavaScript: a non-negative integer.
pub(crate) fn units(name: &str, v: f64) -> napi::Result<u64> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_SAFE {
        // Exact: a non-negative integer below 2^53.
        Ok(v as u64)
    } else {
        Err(error::config(format!(
            "{name}: must be a non-negative integer, got {v}"
        )))
    }
}

/// What one acquisition asks for, from the numbers `index.js` passes:
/// requests, input and output tokens, and money (µ$, for the calendar
/// budgets `costMicroUsdPerDay` / `costMicroUsdPerMonth`).
pub(crate) fn demand(
    requests: f64,
    input: f64,
    output: f64,
    cost: f64,
    batch: bool,
) -> napi::Result<AcquireOptions> {
    Ok(AcquireOptions {
        requests: units("requests", requests)?,
        input_tokens: units("inputTokens", input)?,
        output_tokens: units("outputTokens", output)?,
        cost_micro_usd: units("costMicroUsd", cost)?,
        priority: if batch {
            Priority::Batch
        } else {
            Priority::Interactive
        },
        ..AcquireOptions::default()
    })
}
