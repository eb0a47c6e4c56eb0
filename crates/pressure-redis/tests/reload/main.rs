//! Live reconfiguration on Redis (`set_limits`): the state stays in the
//! store under the resource's key, and the new script arguments continue it
//! — window counts, `gcra` buckets (rescaled to the new rate), leases —
//! also when a dimension is added or removed.

#[path = "../support.rs"]
mod support;

use pressure_core::{AcquireOptions, LimitChange, Limits, Permit, ResourceBroker};
use pressure_redis::RedisBackend;

fn id(name: &str) -> String {
    format!("{}:reload:{name}", support::run_id())
}

async fn grants(b: &ResourceBroker<RedisBackend>, id: &str, n: usize) -> Vec<Permit<RedisBackend>> {
    let mut out = Vec::new();
    for _ in 0..n {
        if let Some(p) = b
            .try_acquire(id, AcquireOptions::default())
            .await
            .expect("answers")
            .into_permit()
        {
            out.push(p);
        }
    }
    out
}

async fn usage(b: &ResourceBroker<RedisBackend>, id: &str, dim: &str) -> Option<u64> {
    b.resource_stats(id)
        .await
        .expect("registered")
        .usage
        .get(dim)
        .copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raised_window_limit_admits_exactly_the_difference() {
    let b = support::broker().await;
    let r = id("window");
    b.register_limit(&r, Limits::default().requests_per_minute(2))
        .expect("valid");
    assert_eq!(grants(&b, &r, 4).await.len(), 2);
    assert_eq!(
        b.set_limits(&r, Limits::default().requests_per_minute(5)),
        Ok(LimitChange::Changed)
    );
    assert_eq!(grants(&b, &r, 8).await.len(), 3, "2 used of 5: exactly 3 more");
    let s = b.resource_stats(&r).await.expect("registered");
    assert_eq!((s.allowed, s.denied), (5, 7), "counters continue");
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raised_gcra_limit_keeps_the_units_in_the_bucket() {
    let b = support::broker().await;
    let r = id("gcra");
    b.register_limit(&r, Limits::default().requests_per_minute(2).gcra(None))
        .expect("valid");
    assert_eq!(grants(&b, &r, 4).await.len(), 2);
    b.set_limits(&r, Limits::default().requests_per_minute(5).gcra(None))
        .expect("valid");
    assert_eq!(
        usage(&b, &r, "requestsPerMinute").await,
        Some(2),
        "usage reads the old TAT right"
    );
    assert_eq!(
        grants(&b, &r, 8).await.len(),
        3,
        "the TAT is rescaled to the new rate: 2 used of 5, exactly 3 more"
    );
    b.set_limits(&r, Limits::default().requests_per_minute(1).gcra(None))
        .expect("valid");
    assert_eq!(grants(&b, &r, 2).await.len(), 0, "5 used is over a bucket of 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raised_concurrency_admits_exactly_one_more_and_old_permits_release() {
    let b = support::broker().await;
    let r = id("conc");
    b.register_limit(&r, Limits::default().max_concurrent_requests(2))
        .expect("valid");
    let mut held = grants(&b, &r, 2).await;
    assert_eq!(held.len(), 2);
    b.set_limits(&r, Limits::default().max_concurrent_requests(3))
        .expect("valid");
    let more = grants(&b, &r, 3).await;
    assert_eq!(more.len(), 1, "2 held of 3: exactly 1 more");
    for p in &mut held {
        p.release().await.expect("an old permit releases");
    }
    assert_eq!(usage(&b, &r, "maxConcurrentRequests").await, Some(1));
    b.set_limits(&r, Limits::default().max_concurrent_requests(1))
        .expect("valid");
    assert_eq!(
        grants(&b, &r, 2).await.len(),
        0,
        "the lease from before fills the new 1"
    );
    drop(more);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dimensions_added_and_removed_continue_by_name() {
    let b = support::broker().await;
    let r = id("dims");
    b.register_limit(&r, Limits::default().requests_per_minute(3))
        .expect("valid");
    let old = b.resource(&r).expect("registered");
    assert_eq!(grants(&b, &r, 2).await.len(), 2);
    // Add tokens and concurrency; requestsPerMinute keeps its 2.
    b.set_limits(
        &r,
        Limits::default()
            .requests_per_minute(3)
            .tokens_per_minute(100)
            .max_concurrent_requests(5),
    )
    .expect("valid");
    let p = old
        .try_acquire(AcquireOptions::default().tokens(60, 0))
        .await
        .expect("answers");
    assert!(p.allowed(), "the old handle counts against the new limits");
    assert!(
        p.permit().is_some_and(|p| p.grant().lease.is_some()),
        "with a lease"
    );
    assert_eq!(grants(&b, &r, 2).await.len(), 0, "3 of 3 per minute used");
    let s = b.resource_stats(&r).await.expect("registered");
    assert_eq!(s.usage.get("tokensPerMinute"), Some(&60));
    assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&1));
    // Remove requestsPerMinute: only tokens and concurrency count now.
    b.set_limits(
        &r,
        Limits::default()
            .tokens_per_minute(100)
            .max_concurrent_requests(5),
    )
    .expect("valid");
    assert_eq!(grants(&b, &r, 3).await.len(), 3);
    assert!(
        !b.try_acquire(&r, AcquireOptions::default().tokens(50, 0))
            .await
            .expect("answers")
            .allowed(),
        "60 + 50 tokens > 100"
    );
}
