//! The gateway's Prometheus metrics.
//!
//! [`GatewayMetrics`] holds the counters the request path bumps (admitted,
//! denied, unauthorized, bypassed requests, limiter outages, upstream
//! errors, config reloads) and renders them together with the broker's and
//! the Redis backend's numbers, read at scrape time, in the Prometheus text
//! format 0.0.4 (one writer: [`text`]).
//!
//! | series | type | labels |
//! |---|---|---|
//! | `pressure_gateway_allowed_total` | counter | `layer` |
//! | `pressure_gateway_denied_total` | counter | `resource`, `layer` |
//! | `pressure_gateway_limiter_unavailable_total` | counter | `layer` |
//! | `pressure_gateway_unauthorized_total` | counter | `reason` |
//! | `pressure_gateway_bypassed_total` | counter | `kind` |
//! | `pressure_gateway_upstream_errors_total` | counter | `kind` |
//! | `pressure_config_reloads_total` | counter | `result` (`ok`, `error`) |
//! | `pressure_active_permits` | gauge | `resource` |
//! | `pressure_resource_allowed_total` | counter | `resource` |
//! | `pressure_resource_denied_total` | counter | `resource` |
//! | `pressure_backend_errors_total` | counter | `resource` |
//! | `pressure_queue_queued` | gauge | `resource` |
//! | `pressure_shadow_denied_total` | counter | `resource`, `dimension` |
//! | `pressure_redis_healthy` | gauge | |
//! | `pressure_redis_unhealthy_shards` | gauge | |
//! | `pressure_redis_failures_total` | counter | |
//! | `pressure_redis_fallbacks_total` | counter | |
//! | `pressure_redis_transitions_total` | counter | |
//! | `pressure_redis_cancelled_calls_total` | counter | |
//! | `pressure_redis_cancel_releases_total` | counter | |
//!
//! and the traffic families of [`traffic`] (requests by route, upstream and
//! status class, latency histograms per route, requests in flight, upstream
//! failures by cause).
//!
//! Per-tenant resources (`gateway:tenant:<id>`) are reported under the one
//! label value `gateway:tenant:*` (summed), so that 100 000 tenants make one
//! series, not 100 000.

pub(crate) mod denial_log;
pub(crate) mod layer;
pub(crate) mod llm;
pub(crate) mod shadow;
mod snapshot;
pub(crate) mod text;
pub(crate) mod traffic;

pub use layer::Layer;
pub(crate) use text::CONTENT_TYPE;

use crate::resources;
use parking_lot::RwLock;
use pressure_core::ResourceStats;
use pressure_redis::RedisStatus;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use text::{header, sample};

/// Counters by a label value created on first use; the common case (the
/// value seen before) takes a read lock and an atomic add.
#[derive(Debug, Default)]
struct Labelled(RwLock<HashMap<Box<str>, Arc<AtomicU64>, ahash::RandomState>>);

impl Labelled {
    fn inc(&self, label: &str) {
        if let Some(c) = self.0.read().get(label) {
            c.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.0
            .write()
            .entry(label.into())
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    fn sorted(&self) -> BTreeMap<String, u64> {
        self.0
            .read()
            .iter()
            .map(|(k, v)| (k.to_string(), v.load(Ordering::Relaxed)))
            .collect()
    }
}

/// A section of the `/metrics` page rendered at scrape time: it appends
/// whole metric families (`# HELP`, `# TYPE`, samples) in the Prometheus
/// text format to the page.
pub(crate) type MetricsSection = Arc<dyn Fn(&mut String) + Send + Sync>;

/// The gateway's counters, and the renderer of the whole `/metrics` page.
///
/// Every method that counts is a few atomic operations; admitting a request
/// ([`allowed`](Self::allowed)) allocates nothing, and a repeated denial of
/// the same resource allocates nothing either.
#[derive(Default)]
pub struct GatewayMetrics {
    allowed: [AtomicU64; 3],
    denied: [Labelled; 3],
    limiter_unavailable: [AtomicU64; 3],
    unauthorized: Labelled,
    bypassed: Labelled,
    upstream_errors: Labelled,
    reloads: Labelled,
    traffic: traffic::TrafficMetrics,
    logs: denial_log::DenialLogs,
    shadow: shadow::ShadowDenials,
    sections: RwLock<Vec<MetricsSection>>,
}

impl fmt::Debug for GatewayMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayMetrics")
            .field("sections", &self.sections.read().len())
            .finish_non_exhaustive()
    }
}

impl GatewayMetrics {
    /// Every counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a section rendered after the built-in families on every scrape.
    pub fn add_section(&self, section: MetricsSection) {
        self.sections.write().push(section);
    }

    /// Counts a request admitted by `layer`.
    #[inline]
    pub fn allowed(&self, layer: Layer) {
        self.allowed[layer.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request refused by `layer` on `resource` (tenant resources
    /// are counted under `gateway:tenant:*`).
    pub fn denied(&self, resource: &str, layer: Layer) {
        self.denied[layer.index()].inc(resources::label(resource));
    }

    /// The per-resource budgets of denial log lines.
    pub(crate) fn denial_logs(&self) -> &denial_log::DenialLogs {
        &self.logs
    }

    /// Counts a request refused with 503 because the limiter could not
    /// decide (kept apart from real denials).
    pub fn limiter_unavailable(&self, layer: Layer) {
        self.limiter_unavailable[layer.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request refused with 401 (`reason`: e.g. `missing`,
    /// `invalid`, `no_tenant`, `invalid_api_key`, `key_expired`).
    pub fn unauthorized(&self, reason: &'static str) {
        self.unauthorized.inc(reason);
    }

    /// Counts a request that bypassed pressure (`kind`: `websocket`, `sse`).
    pub fn bypassed(&self, kind: &'static str) {
        self.bypassed.inc(kind);
    }

    /// Counts a failed upstream call (`kind`: `timeout`, `unavailable`,
    /// `error`).
    pub fn upstream_error(&self, kind: &'static str) {
        self.upstream_errors.inc(kind);
    }

    /// The traffic counters (requests, latency, in flight, upstream failures).
    #[inline]
    pub fn traffic(&self) -> &traffic::TrafficMetrics {
        &self.traffic
    }

    /// Counts a config reload (`result`: `ok` or `error`).
    pub fn reload(&self, result: &'static str) {
        self.reloads.inc(result);
    }

    /// The `/metrics` page: the gateway counters, then the broker's
    /// per-resource numbers from `stats` and, when given, the Redis
    /// backend's health, in the Prometheus text format 0.0.4
    /// (`CONTENT_TYPE`).
    pub fn encode(&self, stats: &[ResourceStats], redis: Option<RedisStatus>) -> String {
        let mut out = String::with_capacity(4096 + 256 * stats.len().min(64));
        // Writing into a `String` cannot fail.
        let _ = self.encode_counters(&mut out);
        let _ = self.shadow.encode(&mut out);
        let _ = self.traffic.encode(&mut out);
        let _ = snapshot::encode(&mut out, stats, redis);
        let sections: Vec<MetricsSection> = self.sections.read().clone();
        for section in sections {
            section(&mut out);
        }
        out
    }

    fn encode_counters(&self, out: &mut String) -> fmt::Result {
        let name = "pressure_gateway_allowed_total";
        header(out, name, "counter", "Requests admitted by a pressure layer")?;
        for l in Layer::ALL {
            sample(
                out,
                name,
                &[("layer", l.as_str())],
                self.allowed[l.index()].load(Ordering::Relaxed),
            )?;
        }
        let name = "pressure_gateway_denied_total";
        let denied: Vec<(Layer, BTreeMap<String, u64>)> = Layer::ALL
            .iter()
            .map(|&l| (l, self.denied[l.index()].sorted()))
            .collect();
        if denied.iter().any(|(_, m)| !m.is_empty()) {
            header(
                out,
                name,
                "counter",
                "Requests refused with 429 by a pressure layer (tenant resources aggregated as gateway:tenant:*)",
            )?;
        }
        for (l, samples) in denied {
            for (resource, n) in samples {
                sample(out, name, &[("resource", &resource), ("layer", l.as_str())], n)?;
            }
        }
        let name = "pressure_gateway_limiter_unavailable_total";
        header(
            out,
            name,
            "counter",
            "Requests refused with 503 because the limiter could not decide (store outage in closed mode)",
        )?;
        for l in Layer::ALL {
            let n = self.limiter_unavailable[l.index()].load(Ordering::Relaxed);
            sample(out, name, &[("layer", l.as_str())], n)?;
        }
        let families: [(&str, &str, &str, &Labelled); 4] = [
            (
                "pressure_gateway_unauthorized_total",
                "Requests refused with 401",
                "reason",
                &self.unauthorized,
            ),
            (
                "pressure_gateway_bypassed_total",
                "Requests that bypassed pressure (long-lived connections)",
                "kind",
                &self.bypassed,
            ),
            (
                "pressure_gateway_upstream_errors_total",
                "Requests whose upstream failed",
                "kind",
                &self.upstream_errors,
            ),
            (
                "pressure_config_reloads_total",
                "Config reloads by result",
                "result",
                &self.reloads,
            ),
        ];
        for (name, help, key, family) in families {
            let samples = family.sorted();
            // A family without a sample yet is not announced.
            if samples.is_empty() {
                continue;
            }
            header(out, name, "counter", help)?;
            for (value, n) in samples {
                sample(out, name, &[(key, &value)], n)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pressure_core::{Limits, ResourceKind};

    fn stat(resource: &str, kind: ResourceKind, active: Option<u64>, denied: u64) -> ResourceStats {
        ResourceStats {
            resource: resource.to_owned(),
            kind,
            limits: Limits::default(),
            usage: BTreeMap::new(),
            resets_at: BTreeMap::new(),
            active,
            allowed: 10,
            denied,
            backend_errors: 0,
            shadow_denied: 0,
            queued: (kind == ResourceKind::Queue).then_some(3),
            wait_time_ms: None,
            lazy: resources::is_tenant(resource),
        }
    }

    #[test]
    fn counters_are_announced_under_their_sample_names() {
        let m = GatewayMetrics::new();
        m.allowed(Layer::PreAuth);
        m.allowed(Layer::PreAuth);
        m.denied("gateway:route:a", Layer::PreAuth);
        m.denied("gateway:tenant:x", Layer::Tenant);
        m.denied("gateway:tenant:y", Layer::Tenant);
        m.limiter_unavailable(Layer::PreAuth);
        m.unauthorized("invalid");
        m.bypassed("websocket");
        m.upstream_error("timeout");
        m.reload("error");
        let text = m.encode(&[], None);
        assert!(
            text.contains("# TYPE pressure_gateway_allowed_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("pressure_gateway_allowed_total{layer=\"pre_auth\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("pressure_gateway_allowed_total{layer=\"tenant\"} 0\n"),
            "{text}"
        );
        assert!(text
            .contains("pressure_gateway_denied_total{resource=\"gateway:tenant:*\",layer=\"tenant\"} 2\n"));
        assert!(text
            .contains("pressure_gateway_denied_total{resource=\"gateway:route:a\",layer=\"pre_auth\"} 1\n"));
        assert!(text.contains("pressure_gateway_limiter_unavailable_total{layer=\"pre_auth\"} 1\n"));
        assert!(text.contains("pressure_gateway_unauthorized_total{reason=\"invalid\"} 1\n"));
        assert!(text.contains("pressure_gateway_bypassed_total{kind=\"websocket\"} 1\n"));
        assert!(text.contains("pressure_gateway_upstream_errors_total{kind=\"timeout\"} 1\n"));
        assert!(text.contains("pressure_config_reloads_total{result=\"error\"} 1\n"));
        assert!(!text.contains("pressure_redis_"));
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = line.split(' ').nth(2).unwrap_or_default();
            if line.ends_with(" counter") {
                assert!(name.ends_with("_total"), "{line}");
            }
        }
    }

    #[test]
    fn snapshot_aggregates_tenants_and_escapes() {
        let m = GatewayMetrics::new();
        let stats = [
            stat("gateway:tenant:a", ResourceKind::Limit, None, 1),
            stat("gateway:tenant:b", ResourceKind::Limit, None, 2),
            stat("llm", ResourceKind::Queue, Some(2), 0),
            stat("we\"ird\\id", ResourceKind::Limit, Some(0), 5),
        ];
        let text = m.encode(&stats, None);
        assert!(text.contains("pressure_resource_denied_total{resource=\"gateway:tenant:*\"} 3\n"));
        assert!(text.contains("pressure_resource_allowed_total{resource=\"gateway:tenant:*\"} 20\n"));
        assert!(!text.contains("pressure_active_permits{resource=\"gateway:tenant:*\"}"));
        assert!(text.contains("pressure_active_permits{resource=\"llm\"} 2\n"));
        assert!(text.contains("pressure_active_permits{resource=\"we\\\"ird\\\\id\"} 0\n"));
        assert!(text.contains("pressure_queue_queued{resource=\"llm\"} 3\n"));
        assert!(!text.contains("pressure_queue_queued{resource=\"gateway"));
    }
}
