//! The gateway's Prometheus metrics.
//!
//! [`GatewayMetrics`] holds the counters the request path bumps (admitted,
//! denied, unauthorized, bypassed requests and upstream errors) in a
//! `prometheus-client` [`Registry`], and renders them together with the
//! broker's and the Redis backend's numbers, read at scrape time, in the
//! Prometheus text exposition format (version 0.0.4).
//!
//! | series | type | labels |
//! |---|---|---|
//! | `pressure_gateway_allowed_total` | counter | `layer` |
//! | `pressure_gateway_denied_total` | counter | `resource`, `layer` |
//! | `pressure_gateway_unauthorized_total` | counter | `reason` |
//! | `pressure_gateway_bypassed_total` | counter | `kind` |
//! | `pressure_gateway_upstream_errors_total` | counter | `kind` |
//! | `pressure_active_permits` | gauge | `resource` |
//! | `pressure_resource_allowed_total` | counter | `resource` |
//! | `pressure_resource_denied_total` | counter | `resource` |
//! | `pressure_backend_errors_total` | counter | `resource` |
//! | `pressure_queue_queued` | gauge | `resource` |
//! | `pressure_redis_healthy` | gauge | |
//! | `pressure_redis_failures_total` | counter | |
//! | `pressure_redis_fallbacks_total` | counter | |
//! | `pressure_redis_transitions_total` | counter | |
//!
//! Per-tenant resources (`gateway:tenant:<id>`) are reported under the one
//! label value `gateway:tenant:*` (summed), so that 100 000 tenants make one
//! series, not 100 000.

use parking_lot::RwLock;
use pressure_core::ResourceStats;
use pressure_redis::RedisStatus;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::sync::Arc;

/// The prefix of per-tenant resource ids.
pub const TENANT_RESOURCE_PREFIX: &str = "gateway:tenant:";

/// The `resource` label value every per-tenant resource is reported under.
pub const TENANT_RESOURCE_LABEL: &str = "gateway:tenant:*";

/// The content type of [`GatewayMetrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The `resource` label value of `resource`: tenant resources are folded
/// into [`TENANT_RESOURCE_LABEL`].
pub fn resource_label(resource: &str) -> &str {
    if resource.starts_with(TENANT_RESOURCE_PREFIX) {
        TENANT_RESOURCE_LABEL
    } else {
        resource
    }
}

/// The layer of the request path that decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Per-route / per-service limits, before authentication.
    PreAuth,
    /// Per-tenant limits, after authentication.
    Tenant,
}

impl Layer {
    /// The label value: `pre_auth` or `tenant`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Layer::PreAuth => "pre_auth",
            Layer::Tenant => "tenant",
        }
    }

    const fn index(self) -> usize {
        match self {
            Layer::PreAuth => 0,
            Layer::Tenant => 1,
        }
    }
}

impl EncodeLabelValue for Layer {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LayerLabels {
    layer: Layer,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DeniedLabels {
    resource: String,
    layer: Layer,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The gateway's counters, and the renderer of the whole `/metrics` page.
///
/// Every method that counts is a few atomic operations; admitting a request
/// ([`allowed`](Self::allowed)) allocates nothing, and a repeated denial of
/// the same resource allocates nothing either.
#[derive(Debug)]
pub struct GatewayMetrics {
    registry: Registry,
    /// `[pre_auth, tenant]`, created up front.
    allowed: [Counter; 2],
    denied: Family<DeniedLabels, Counter>,
    /// Per layer: label value → the counter of `denied` for it, so a repeated
    /// denial finds its counter by `&str`, without building a label set.
    denied_by_label: [RwLock<HashMap<Box<str>, Counter>>; 2],
    unauthorized: Family<ReasonLabels, Counter>,
    bypassed: Family<KindLabels, Counter>,
    upstream_errors: Family<KindLabels, Counter>,
    /// Sections appended at scrape time (e.g. the LLM client's counters).
    sections: Sections,
}

/// A section of the `/metrics` page rendered at scrape time: it appends
/// whole metric families (`# HELP`, `# TYPE`, samples) in the Prometheus
/// text format to the page.
pub type MetricsSection = Arc<dyn Fn(&mut String) + Send + Sync>;

#[derive(Default)]
struct Sections(RwLock<Vec<MetricsSection>>);

impl fmt::Debug for Sections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sections({})", self.0.read().len())
    }
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl GatewayMetrics {
    /// A registry with every gateway counter registered (and the two
    /// `allowed` series at zero).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let allowed_family = Family::<LayerLabels, Counter>::default();
        let allowed = [Layer::PreAuth, Layer::Tenant]
            .map(|layer| allowed_family.get_or_create_owned(&LayerLabels { layer }));
        let denied = Family::<DeniedLabels, Counter>::default();
        let unauthorized = Family::<ReasonLabels, Counter>::default();
        let bypassed = Family::<KindLabels, Counter>::default();
        let upstream_errors = Family::<KindLabels, Counter>::default();
        // Counter names without `_total`: the OpenMetrics encoder appends it
        // to the samples (and `encode` to the HELP/TYPE lines).
        registry.register(
            "pressure_gateway_allowed",
            "Requests admitted by a pressure layer",
            allowed_family,
        );
        registry.register(
            "pressure_gateway_denied",
            "Requests refused with 429 by a pressure layer (tenant resources aggregated as gateway:tenant:*)",
            denied.clone(),
        );
        registry.register(
            "pressure_gateway_unauthorized",
            "Requests refused with 401",
            unauthorized.clone(),
        );
        registry.register(
            "pressure_gateway_bypassed",
            "Requests that bypassed pressure (long-lived connections)",
            bypassed.clone(),
        );
        registry.register(
            "pressure_gateway_upstream_errors",
            "Requests whose upstream failed",
            upstream_errors.clone(),
        );
        Self {
            registry,
            allowed,
            denied,
            denied_by_label: Default::default(),
            unauthorized,
            bypassed,
            upstream_errors,
            sections: Sections::default(),
        }
    }

    /// Adds a section rendered after the built-in families on every scrape.
    pub fn add_section(&self, section: MetricsSection) {
        self.sections_lock().write().push(section);
    }

    fn sections_lock(&self) -> &RwLock<Vec<MetricsSection>> {
        &self.sections.0
    }

    /// Counts a request admitted by `layer`.
    #[inline]
    pub fn allowed(&self, layer: Layer) {
        self.allowed[layer.index()].inc();
    }

    /// Counts a request refused by `layer` on `resource` (tenant resources
    /// are counted under `gateway:tenant:*`).
    pub fn denied(&self, resource: &str, layer: Layer) {
        let label = resource_label(resource);
        let cache = &self.denied_by_label[layer.index()];
        if let Some(counter) = cache.read().get(label) {
            counter.inc();
            return;
        }
        let counter = self.denied.get_or_create_owned(&DeniedLabels {
            resource: label.to_owned(),
            layer,
        });
        counter.inc();
        cache.write().entry(label.into()).or_insert(counter);
    }

    /// Counts a request refused with 401 (`reason`: e.g. `missing`,
    /// `invalid`, `expired`).
    pub fn unauthorized(&self, reason: &'static str) {
        self.unauthorized.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts a request that bypassed pressure (`kind`: `websocket`, `sse`).
    pub fn bypassed(&self, kind: &'static str) {
        self.bypassed.get_or_create(&KindLabels { kind }).inc();
    }

    /// Counts a failed upstream call (`kind`: `timeout`, `unavailable`).
    pub fn upstream_error(&self, kind: &'static str) {
        self.upstream_errors.get_or_create(&KindLabels { kind }).inc();
    }

    /// The `/metrics` page: the gateway counters, then the broker's
    /// per-resource numbers from `stats` and, when given, the Redis
    /// backend's health, in the Prometheus text format 0.0.4
    /// ([`CONTENT_TYPE`]).
    pub fn encode(&self, stats: &[ResourceStats], redis: Option<RedisStatus>) -> String {
        let mut openmetrics = String::with_capacity(2048);
        let mut out = String::with_capacity(4096 + 256 * stats.len().min(64));
        // Writing into a `String` cannot fail; an error would only truncate
        // the page.
        if prometheus_client::encoding::text::encode_registry(&mut openmetrics, &self.registry).is_ok() {
            openmetrics_to_prometheus(&openmetrics, &mut out);
        }
        let _ = encode_snapshot(&mut out, stats, redis);
        let sections: Vec<MetricsSection> = self.sections_lock().read().clone();
        for section in sections {
            section(&mut out);
        }
        out
    }
}

/// Rewrites `prometheus-client`'s OpenMetrics text as Prometheus text
/// 0.0.4: a counter family `x` is announced as `x_total` (the name of its
/// samples), `# UNIT` and `# EOF` lines are dropped.
fn openmetrics_to_prometheus(input: &str, out: &mut String) {
    let lines: Vec<&str> = input.lines().collect();
    let mut counters: Vec<&str> = Vec::new();
    for line in &lines {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, "counter")) = rest.split_once(' ') {
                counters.push(name);
            }
        }
    }
    for line in lines {
        if line.starts_with("# EOF") || line.starts_with("# UNIT ") {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        if let Some((prefix, rest)) = descriptor {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(&name) && !name.ends_with("_total") {
                out.push_str(prefix);
                out.push_str(name);
                out.push_str("_total ");
                out.push_str(tail);
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
}

/// Name, type, help and value of a per-resource family of the snapshot.
type SnapshotFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Aggregate) -> Option<u64>,
);

/// Per-label sums of the broker's stats.
#[derive(Default)]
struct Aggregate {
    active: Option<u64>,
    allowed: u64,
    denied: u64,
    backend_errors: u64,
    queued: Option<u64>,
}

fn add_opt(acc: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *acc = Some(acc.unwrap_or(0).saturating_add(v));
    }
}

fn encode_snapshot(out: &mut String, stats: &[ResourceStats], redis: Option<RedisStatus>) -> fmt::Result {
    let mut by_label: BTreeMap<&str, Aggregate> = BTreeMap::new();
    for s in stats {
        let a = by_label.entry(resource_label(&s.resource)).or_default();
        add_opt(&mut a.active, s.active);
        add_opt(&mut a.queued, s.queued);
        a.allowed = a.allowed.saturating_add(s.allowed);
        a.denied = a.denied.saturating_add(s.denied);
        a.backend_errors = a.backend_errors.saturating_add(s.backend_errors);
    }
    let families: [SnapshotFamily; 5] = [
        (
            "pressure_active_permits",
            "gauge",
            "Permits of this process holding a concurrency lease (resources with maxConcurrentRequests).",
            |a| a.active,
        ),
        (
            "pressure_resource_allowed_total",
            "counter",
            "Acquisitions granted by this process, per resource.",
            |a| Some(a.allowed),
        ),
        (
            "pressure_resource_denied_total",
            "counter",
            "Acquisitions refused by this process, per resource.",
            |a| Some(a.denied),
        ),
        (
            "pressure_backend_errors_total",
            "counter",
            "Backend failures seen by this process, per resource.",
            |a| Some(a.backend_errors),
        ),
        (
            "pressure_queue_queued",
            "gauge",
            "Requests waiting in the queue now (queue resources).",
            |a| a.queued,
        ),
    ];
    for (name, kind, help, value) in families {
        header(out, name, kind, help)?;
        for (label, a) in &by_label {
            if let Some(v) = value(a) {
                sample(out, name, &[("resource", label)], v)?;
            }
        }
    }
    if let Some(r) = redis {
        let redis_families = [
            (
                "pressure_redis_healthy",
                "gauge",
                "Whether the last call reached Redis (1) or not (0).",
                u64::from(r.healthy),
            ),
            (
                "pressure_redis_failures_total",
                "counter",
                "Redis calls that failed or timed out.",
                r.failures,
            ),
            (
                "pressure_redis_fallbacks_total",
                "counter",
                "Acquisitions answered by the Redis failure mode.",
                r.fallbacks,
            ),
            (
                "pressure_redis_transitions_total",
                "counter",
                "Redis healthy/unavailable transitions.",
                r.transitions,
            ),
        ];
        for (name, kind, help, v) in redis_families {
            header(out, name, kind, help)?;
            writeln!(out, "{name} {v}")?;
        }
    }
    Ok(())
}

pub(crate) fn header(out: &mut String, name: &str, kind: &str, help: &str) -> fmt::Result {
    writeln!(out, "# HELP {name} {help}")?;
    writeln!(out, "# TYPE {name} {kind}")
}

/// One sample line, `name{k1="v1",k2="v2"} v`, the label values escaped.
pub(crate) fn sample(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    v: impl fmt::Display,
) -> fmt::Result {
    out.push_str(name);
    out.push('{');
    for (i, (key, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(key);
        out.push_str("=\"");
        escape_label_value(out, value);
        out.push('"');
    }
    writeln!(out, "}} {v}")
}

/// Label value escaping of the text format: `\`, `"` and newline.
pub(crate) fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
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
            active,
            allowed: 10,
            denied,
            backend_errors: 0,
            queued: (kind == ResourceKind::Queue).then_some(3),
            wait_time_ms: None,
            lazy: resource.starts_with(TENANT_RESOURCE_PREFIX),
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
        m.unauthorized("invalid");
        m.bypassed("websocket");
        m.upstream_error("timeout");
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
        assert!(text.contains("pressure_gateway_unauthorized_total{reason=\"invalid\"} 1\n"));
        assert!(text.contains("pressure_gateway_bypassed_total{kind=\"websocket\"} 1\n"));
        assert!(text.contains("pressure_gateway_upstream_errors_total{kind=\"timeout\"} 1\n"));
        assert!(!text.contains("# EOF"));
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
        let status = RedisStatus {
            healthy: false,
            failures: 4,
            fallbacks: 3,
            transitions: 1,
            ..RedisStatus::default()
        };
        let text = m.encode(&stats, Some(status));
        assert!(text.contains("pressure_resource_denied_total{resource=\"gateway:tenant:*\"} 3\n"));
        assert!(text.contains("pressure_resource_allowed_total{resource=\"gateway:tenant:*\"} 20\n"));
        assert!(!text.contains("pressure_active_permits{resource=\"gateway:tenant:*\"}"));
        assert!(text.contains("pressure_active_permits{resource=\"llm\"} 2\n"));
        assert!(text.contains("pressure_active_permits{resource=\"we\\\"ird\\\\id\"} 0\n"));
        assert!(text.contains("pressure_queue_queued{resource=\"llm\"} 3\n"));
        assert!(!text.contains("pressure_queue_queued{resource=\"gateway"));
        assert!(text.contains("pressure_redis_healthy 0\n"));
        assert!(text.contains("pressure_redis_failures_total 4\n"));
        assert!(text.contains("pressure_redis_fallbacks_total 3\n"));
        assert!(text.contains("pressure_redis_transitions_total 1\n"));
    }
}
