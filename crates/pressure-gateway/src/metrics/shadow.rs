//! Would-be refusals of shadow limits (`"shadow": true` on a limits
//! object): the limit decided and counted a denial, the gateway admitted
//! the request anyway. Counted per resource and dimension
//! (`pressure_shadow_denied_total{resource,dimension}`, tenant resources
//! folded into `gateway:tenant:*` like every per-resource family) and
//! logged as a `request denied` line with `shadow: true`, within the same
//! per-resource budget of lines as the real denials.

use super::layer::Layer;
use super::text::{header, sample};
use super::GatewayMetrics;
use crate::resources;
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The metric family.
pub(crate) const FAMILY: &str = "pressure_shadow_denied_total";

/// Counts by resource label, then by dimension (a handful per resource).
type Counts = HashMap<Box<str>, Vec<(&'static str, AtomicU64)>, ahash::RandomState>;

/// Shadow denials by `(resource label, dimension)`; a repeated one takes a
/// read lock and an atomic add, allocating nothing.
#[derive(Debug, Default)]
pub(crate) struct ShadowDenials(RwLock<Counts>);

impl ShadowDenials {
    fn inc(&self, resource: &str, dimension: &'static str) {
        let label = resources::label(resource);
        let bump = |counts: &[(&'static str, AtomicU64)]| {
            counts
                .iter()
                .find(|(d, _)| *d == dimension)
                .map(|(_, n)| n.fetch_add(1, Ordering::Relaxed))
                .is_some()
        };
        if self.0.read().get(label).is_some_and(|c| bump(c)) {
            return;
        }
        let mut all = self.0.write();
        let counts = all.entry(label.into()).or_default();
        if !bump(counts) {
            counts.push((dimension, AtomicU64::new(1)));
        }
    }

    /// Appends the family (nothing before the first shadow denial).
    pub(crate) fn encode(&self, out: &mut String) -> fmt::Result {
        let samples: BTreeMap<(String, &'static str), u64> = self
            .0
            .read()
            .iter()
            .flat_map(|(r, counts)| {
                counts
                    .iter()
                    .map(move |(d, n)| ((r.to_string(), *d), n.load(Ordering::Relaxed)))
            })
            .collect();
        if samples.is_empty() {
            return Ok(());
        }
        header(
            out,
            FAMILY,
            "counter",
            "Requests a shadow limit would have refused, admitted (tenant resources aggregated as gateway:tenant:*)",
        )?;
        for ((resource, dimension), n) in samples {
            sample(
                out,
                FAMILY,
                &[("resource", &resource), ("dimension", dimension)],
                n,
            )?;
        }
        Ok(())
    }
}

/// One would-be refusal of a shadow limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShadowDenial<'a> {
    /// The resource whose shadow limit refused.
    pub resource: &'a str,
    /// The layer that charged it.
    pub layer: Layer,
    /// The dimension that refused.
    pub dimension: &'static str,
    /// How long a real refusal would have told the client to wait.
    pub wait: Duration,
    /// The tenant, when known.
    pub namespace_id: Option<&'a str>,
}

impl GatewayMetrics {
    /// Counts a shadow denial (`pressure_shadow_denied_total`) and writes
    /// its `request denied` line with `shadow: true`, within the
    /// resource's budget of `denial_lines` lines per second (0: no bound).
    #[cold]
    pub(crate) fn shadow_denied(&self, d: &ShadowDenial<'_>, denial_lines: u32) {
        self.shadow.inc(d.resource, d.dimension);
        if !self
            .denial_logs()
            .denied
            .admit(d.resource, d.layer, denial_lines, tokio::time::Instant::now())
        {
            return;
        }
        tracing::info!(
            target: "pressure::denial",
            resource = d.resource,
            layer = d.layer.as_str(),
            wait_time_ms = u64::try_from(d.wait.as_millis()).unwrap_or(u64::MAX),
            namespace_id = d.namespace_id.unwrap_or(""),
            dimension = d.dimension,
            shadow = true,
            "request denied"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_by_resource_and_dimension_tenants_folded() {
        let m = GatewayMetrics::new();
        let d = |resource, dimension| ShadowDenial {
            resource,
            layer: Layer::Tenant,
            dimension,
            wait: Duration::from_millis(5),
            namespace_id: None,
        };
        m.shadow_denied(&d("gateway:tenant:a", "requestsPerMinute"), 0);
        m.shadow_denied(&d("gateway:tenant:b", "requestsPerMinute"), 0);
        m.shadow_denied(&d("gateway:route:x", "requestsPerSecond"), 0);
        let page = m.encode(&[], None);
        assert!(
            page.contains("# TYPE pressure_shadow_denied_total counter"),
            "{page}"
        );
        assert!(
            page.contains(
                "pressure_shadow_denied_total{resource=\"gateway:tenant:*\",dimension=\"requestsPerMinute\"} 2"
            ),
            "{page}"
        );
        assert!(
            page.contains("pressure_shadow_denied_total{resource=\"gateway:route:x\",dimension=\"requestsPerSecond\"} 1"),
            "{page}"
        );
        assert!(
            !GatewayMetrics::new().encode(&[], None).contains(FAMILY),
            "absent before the first"
        );
    }
}
