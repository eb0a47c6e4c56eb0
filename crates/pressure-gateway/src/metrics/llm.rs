//! The LLM client's section of `/metrics`.

use super::text::{self, header, sample, Family};
use crate::backend::AnyBackend;
use pressure_llm::pipeline::{LlmClient, MetricsSnapshot};
use pressure_llm::provider::PoolStats;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// One counter family without labels.
type Plain = (&'static str, &'static str, u64);

/// One per-provider pool family: name, type, help and its value.
type PoolFamily = Family<PoolStats>;

/// Appends the LLM client's counters and breaker states to a `/metrics`
/// page (Prometheus text 0.0.4):
///
/// | series | type | labels |
/// |---|---|---|
/// | `pressure_llm_requests_total` | counter | |
/// | `pressure_llm_attempts_total` | counter | |
/// | `pressure_llm_retries_total` | counter | |
/// | `pressure_llm_spent_micro_usd_total` | counter | |
/// | `pressure_llm_failed_spent_micro_usd_total` | counter | |
/// | `pressure_llm_breaker_rejections_total` | counter | |
/// | `pressure_llm_limiter_rejections_total` | counter | |
/// | `pressure_llm_embedding_requests_total` | counter | |
/// | `pressure_llm_embedding_spent_micro_usd_total` | counter | |
/// | `pressure_llm_errors_total` | counter | `kind` |
/// | `pressure_llm_attempt_errors_total` | counter | `kind` |
/// | `pressure_llm_answers_total` | counter | `degradation` |
/// | `pressure_llm_breaker_state` | gauge (0 closed, 1 half-open, 2 open) | `provider`, `model` |
/// | `pressure_llm_breaker_transitions_total` | counter (learned from the fleet included) | `provider`, `model` |
/// | `pressure_llm_breaker_fleet_store_healthy` | gauge (1/0; fleet scope only) | |
/// | `pressure_llm_breaker_fleet_store_errors_total` | counter (fleet scope only) | |
/// | `pressure_llm_pool_in_use`, `_peak`, `_max` | gauge | `provider` |
/// | `pressure_llm_pool_wait_timeouts_total` | counter | `provider` |
/// | `pressure_llm_ttft_seconds` | histogram | `provider`, `model` |
/// | `pressure_llm_latency_seconds` | histogram | `provider`, `model` |
pub(crate) fn encode(llm: &LlmClient<AnyBackend>, out: &mut String) {
    // Writing into a `String` cannot fail.
    let _ = try_encode_metrics(llm, out);
}

/// Breaker transitions per (provider, model), and the health of the fleet's
/// shared breaker store when the breakers are shared (docs/architecture.md#what-openai-and-anthropic-clients-expect).
fn encode_breaker_extras(llm: &LlmClient<AnyBackend>, out: &mut String) -> fmt::Result {
    let name = "pressure_llm_breaker_transitions_total";
    header(
        out,
        name,
        "counter",
        "Circuit breaker transitions per (provider, model), those learned from the fleet included.",
    )?;
    for b in llm.breakers().snapshot() {
        let labels = [("provider", b.provider.as_str()), ("model", b.model.as_str())];
        sample(out, name, &labels, b.snapshot.transitions)?;
    }
    if let Some(f) = llm.breakers().fleet_status() {
        let name = "pressure_llm_breaker_fleet_store_healthy";
        header(
            out,
            name,
            "gauge",
            "Whether the fleet's shared breaker store (Redis) answered the last call: 1 yes, 0 no.",
        )?;
        writeln!(out, "{name} {}", u8::from(f.healthy))?;
        let name = "pressure_llm_breaker_fleet_store_errors_total";
        header(
            out,
            name,
            "counter",
            "Shared breaker store calls that failed (the local breaker decided alone).",
        )?;
        writeln!(out, "{name} {}", f.errors)?;
    }
    Ok(())
}

/// The whole section, family group by family group.
fn try_encode_metrics(llm: &LlmClient<AnyBackend>, out: &mut String) -> fmt::Result {
    let s = llm.snapshot();
    encode_counters(&s, out)?;
    encode_by_label(&s, out)?;
    encode_breaker_states(llm, out)?;
    encode_breaker_extras(llm, out)?;
    encode_pools(llm, out)?;
    encode_histograms(&s, out)
}

/// The event counters without labels.
fn encode_counters(s: &MetricsSnapshot, out: &mut String) -> fmt::Result {
    let plain: [Plain; 9] = [
        (
            "pressure_llm_requests_total",
            "LLM events started (chat completion and embeddings requests).",
            s.requests,
        ),
        (
            "pressure_llm_attempts_total",
            "Provider calls made (all levels, retries included).",
            s.attempts,
        ),
        (
            "pressure_llm_retries_total",
            "Provider calls made after a backoff on the same level.",
            s.retries,
        ),
        (
            "pressure_llm_spent_micro_usd_total",
            "Micro-dollars spent on all provider calls.",
            s.spent_micro_usd,
        ),
        (
            "pressure_llm_failed_spent_micro_usd_total",
            "Micro-dollars spent on failed provider calls.",
            s.failed_spent_micro_usd,
        ),
        (
            "pressure_llm_breaker_rejections_total",
            "Model levels skipped because their circuit breaker was open.",
            s.breaker_rejections,
        ),
        (
            "pressure_llm_limiter_rejections_total",
            "Model levels skipped because the limiter had no capacity in time.",
            s.limiter_rejections,
        ),
        (
            "pressure_llm_embedding_requests_total",
            "Embeddings events started (also in pressure_llm_requests_total).",
            s.embedding_requests,
        ),
        (
            "pressure_llm_embedding_spent_micro_usd_total",
            "Micro-dollars spent on embeddings calls (also in pressure_llm_spent_micro_usd_total).",
            s.embedding_spent_micro_usd,
        ),
    ];
    for (name, help, v) in plain {
        header(out, name, "counter", help)?;
        writeln!(out, "{name} {v}")?;
    }
    Ok(())
}

/// Errors by kind and answers by chain level (every level has a series).
fn encode_by_label(s: &MetricsSnapshot, out: &mut String) -> fmt::Result {
    let mut served = s.served.clone();
    for d in ["primary", "backup", "knn", "rules", "manual_queue"] {
        served.entry(d.to_owned()).or_insert(0);
    }
    let labelled: [(&str, &str, &str, &BTreeMap<String, u64>); 3] = [
        (
            "pressure_llm_errors_total",
            "LLM events that failed, by error kind.",
            "kind",
            &s.errors,
        ),
        (
            "pressure_llm_attempt_errors_total",
            "Failed provider calls, by error kind (rate_limited gives the 429 share).",
            "kind",
            &s.attempt_errors,
        ),
        (
            "pressure_llm_answers_total",
            "LLM answers by the chain level that served them.",
            "degradation",
            &served,
        ),
    ];
    for (name, help, label, values) in labelled {
        header(out, name, "counter", help)?;
        for (value, n) in values {
            sample(out, name, &[(label, value)], n)?;
        }
    }
    Ok(())
}

/// The breaker state of every configured model.
fn encode_breaker_states(llm: &LlmClient<AnyBackend>, out: &mut String) -> fmt::Result {
    // Every configured model has a series (closed until its breaker exists).
    let mut states: BTreeMap<(String, String), i64> = llm
        .config()
        .models
        .iter()
        .map(|m| ((m.provider.clone(), m.model.clone()), 0))
        .collect();
    for b in llm.breakers().snapshot() {
        states.insert((b.provider, b.model), b.snapshot.state.as_gauge());
    }
    let name = "pressure_llm_breaker_state";
    header(
        out,
        name,
        "gauge",
        "Circuit breaker state per (provider, model): 0 closed, 1 half-open, 2 open.",
    )?;
    for ((provider, model), v) in states {
        sample(out, name, &[("provider", &provider), ("model", &model)], v)?;
    }
    Ok(())
}

/// The providers' connection pools.
fn encode_pools(llm: &LlmClient<AnyBackend>, out: &mut String) -> fmt::Result {
    let pools = llm.provider_pools();
    let families: [PoolFamily; 4] = [
        (
            "pressure_llm_pool_in_use",
            "gauge",
            "Provider connection slots in use now.",
            |p| Some(p.in_use as u64),
        ),
        (
            "pressure_llm_pool_peak",
            "gauge",
            "Most provider connection slots in use at once.",
            |p| Some(p.peak as u64),
        ),
        (
            "pressure_llm_pool_max",
            "gauge",
            "Provider connection slots (maxConnections).",
            |p| Some(p.max as u64),
        ),
        (
            "pressure_llm_pool_wait_timeouts_total",
            "counter",
            "Calls that found no free provider connection within poolWaitMs.",
            |p| Some(p.wait_timeouts),
        ),
    ];
    text::families(out, &families, "provider", pools.iter())
}

/// Time to first token and latency per (provider, model).
fn encode_histograms(s: &MetricsSnapshot, out: &mut String) -> fmt::Result {
    let histograms = [
        (
            "pressure_llm_ttft_seconds",
            "Time to first token of successful provider calls.",
            &s.ttft,
        ),
        (
            "pressure_llm_latency_seconds",
            "Total latency of successful provider calls.",
            &s.latency,
        ),
    ];
    for (name, help, series) in histograms {
        header(out, name, "histogram", help)?;
        let (bucket, sum, count) = (
            format!("{name}_bucket"),
            format!("{name}_sum"),
            format!("{name}_count"),
        );
        for ((provider, model), h) in series {
            let labels = [("provider", provider.as_str()), ("model", model.as_str())];
            for (le, n) in h.cumulative() {
                let le = le.to_string();
                sample(out, &bucket, &[labels[0], labels[1], ("le", &le)], n)?;
            }
            sample(out, &bucket, &[labels[0], labels[1], ("le", "+Inf")], h.count)?;
            sample(out, &sum, &labels, h.sum_seconds())?;
            sample(out, &count, &labels, h.count)?;
        }
    }
    Ok(())
}
