//! The broker's and the Redis backend's section of `/metrics`, read at
//! scrape time: per-resource counters (tenant resources folded into
//! `gateway:tenant:*`) and the store's health.

use super::text::{self, header, sample, Family};
use crate::resources;
use pressure_core::ResourceStats;
use pressure_redis::RedisStatus;
use std::collections::BTreeMap;
use std::fmt;

/// Name, type, help and value of a per-resource family of the snapshot.
type SnapshotFamily = Family<Aggregate>;

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

/// Appends the snapshot families.
pub(super) fn encode(out: &mut String, stats: &[ResourceStats], redis: Option<RedisStatus>) -> fmt::Result {
    let mut by_label: BTreeMap<&str, Aggregate> = BTreeMap::new();
    for s in stats {
        let a = by_label.entry(resources::label(&s.resource)).or_default();
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
    text::families(out, &families, "resource", by_label.iter().map(|(k, a)| (*k, a)))?;
    if let Some(r) = redis {
        let redis_families = [
            (
                "pressure_redis_healthy",
                "gauge",
                "Whether every shard of the store answers and decides (1) or one is in failure mode (0): no connection, no answer within the timeout, or an error reply such as OOM, READONLY or BUSY.",
                u64::from(r.healthy),
            ),
            (
                "pressure_redis_unhealthy_shards",
                "gauge",
                "Shards in failure mode now (the single Redis, or each Redis Cluster master that is out).",
                u64::try_from(r.unhealthy_shards.len()).unwrap_or(u64::MAX),
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
            (
                "pressure_redis_cancelled_calls_total",
                "counter",
                "Redis calls whose caller went away before the answer, finished and settled by the backend.",
                r.cancelled_calls,
            ),
            (
                "pressure_redis_cancel_releases_total",
                "counter",
                "Leases and reservations given back because their acquisition's caller went away before its answer.",
                r.cancel_releases,
            ),
        ];
        for (name, kind, help, v) in redis_families {
            header(out, name, kind, help)?;
            sample(out, name, &[], v)?;
        }
    }
    Ok(())
}
