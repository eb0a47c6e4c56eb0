//! Memory cost of tenants: builds the broker exactly as the gateway does with
//! the in-memory backend, registers 100,000 lazy tenant resources the way
//! the tenant layer does (`lazy_limit("gateway:tenant:<id>", template)` with
//! `perTenant.limits = {"requestsPerMinute": 600}`), takes one permit on
//! each, and prints the process's resident set size (VmRSS) before and
//! after, as `key=value` lines for `benches/gateway-vs-nginx.sh`.
//!
//! ```text
//! cargo run --release -p pressure-gateway --example tenants_rss [-- TENANTS]
//! ```
//!
//! Linux only (reads `/proc/self/status`).

use pressure_core::{AcquireOptions, Acquisition, LimitTemplate, Limits, MemoryBackend, ResourceBroker};
use pressure_gateway::backend::{AnyBackend, Broker};
use std::error::Error;

/// Tenants registered unless the first argument says otherwise.
const DEFAULT_TENANTS: usize = 100_000;

/// The `VmRSS` line of `/proc/self/status`, in KiB.
fn rss_kib() -> Result<u64, Box<dyn Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS in /proc/self/status")?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .ok_or("malformed VmRSS line")?
        .parse()?;
    Ok(kib)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let tenants = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => DEFAULT_TENANTS,
    };
    // The gateway's broker type on the memory backend, with the gateway's
    // default bound on lazy resources (`perTenant.maxTenants`), raised if
    // more tenants are asked for so that nothing is evicted.
    let broker: Broker = ResourceBroker::builder(AnyBackend::Memory(MemoryBackend::new()))
        .max_lazy_resources(tenants.max(pressure_core::DEFAULT_MAX_LAZY_RESOURCES))
        .build();
    // Compiled once, as the gateway does from `perTenant.limits`.
    let template = LimitTemplate::new(&Limits::default().requests_per_minute(600))?;

    let before = rss_kib()?;
    let started = tokio::time::Instant::now();
    let mut id = String::with_capacity(40);
    for i in 0..tenants {
        // The resource id the tenant layer derives from the JWT claim.
        id.clear();
        id.push_str("gateway:tenant:");
        id.push_str(&i.to_string());
        let handle = broker.lazy_limit(&id, &template)?;
        // One request each, so every tenant has counted state, not just an
        // entry; the permit is dropped at once (a rate permit holds nothing).
        match handle.try_acquire(AcquireOptions::default()).await? {
            Acquisition::Granted(_) => {}
            Acquisition::Denied(_) => return Err(format!("tenant {i} denied its first request").into()),
        }
    }
    let elapsed = started.elapsed();
    let after = rss_kib()?;

    let delta = after.saturating_sub(before);
    println!("tenants={tenants}");
    println!("registered={}", broker.lazy_resources());
    println!("evicted={}", broker.evicted_resources());
    println!("rss_before_kib={before}");
    println!("rss_after_kib={after}");
    println!("rss_delta_kib={delta}");
    println!(
        "bytes_per_tenant={}",
        delta * 1024 / u64::try_from(tenants.max(1))?
    );
    println!("register_ms={}", elapsed.as_millis());
    Ok(())
}
