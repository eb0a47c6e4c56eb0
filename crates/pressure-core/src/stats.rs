//! The stats surface: one [`ResourceStats`] per resource, serialized with the
//! same camelCase names the admin endpoint and dashboards read.

use crate::limits::Limits;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which strategy a resource was registered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    /// `register` + `enqueue` (callers may also `try_acquire`).
    Queue,
    /// `register_limit` + `try_acquire`.
    Limit,
}

/// Wait-time percentiles of a queue, in milliseconds, since registration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WaitTimes {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Longest.
    pub max: f64,
}

/// A snapshot of one resource.
///
/// For `limit` resources `queued` and `waitTimeMs` are `null`, never zero, so
/// a dashboard cannot mistake them for a healthy empty queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStats {
    /// Resource id.
    pub resource: String,
    /// `queue` or `limit`.
    pub kind: ResourceKind,
    /// Configured limits.
    pub limits: Limits,
    /// Units counted now per dimension (JSON name → units), as the backend
    /// sees it (fleet-wide with Redis); `maxConcurrentRequests` is the number
    /// of live leases.
    pub usage: BTreeMap<String, u64>,
    /// When each calendar dimension's count resets (JSON name → Unix ms,
    /// UTC, by the backend's clock): with `usage` and `limits`, "spend,
    /// budget, resets at". Absent when the resource has none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resets_at: BTreeMap<String, u64>,
    /// Permits of this process holding a concurrency lease now; `null` for
    /// a resource without `maxConcurrentRequests` (its permits hold nothing).
    pub active: Option<u64>,
    /// Acquisitions granted by this process.
    pub allowed: u64,
    /// Acquisitions refused by this process (try_acquire denials, queue full
    /// or timed out).
    pub denied: u64,
    /// Of `denied`, the refusals of a shadow limit (`"shadow": true`) whose
    /// requests the caller admitted anyway: what enforcing would have
    /// refused. Counted by the caller that admits (the gateway), zero for a
    /// resource never in shadow.
    #[serde(default)]
    pub shadow_denied: u64,
    /// Backend failures seen by this process.
    pub backend_errors: u64,
    /// Requests waiting now (`queue` resources only).
    pub queued: Option<u64>,
    /// Wait-time percentiles (`queue` resources only; null before the first
    /// request).
    pub wait_time_ms: Option<WaitTimes>,
    /// Whether the resource was registered lazily (and may be evicted when idle).
    pub lazy: bool,
}

/// Every resource's snapshot, in the shape the admin endpoint serves:
/// `{"resources": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokerStats {
    /// One entry per resource, sorted by id.
    pub resources: Vec<ResourceStats>,
}
