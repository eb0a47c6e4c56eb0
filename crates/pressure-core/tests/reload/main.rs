//! Live reconfiguration on the in-memory backend (`set_limits`,
//! `unregister`): a changed limit applies to new acquisitions — also through
//! handles obtained before — while current usage, leases and counters carry
//! over, on every layout the backend uses (lock-free single `gcra`, locked).

use pressure_core::clock::ManualClock;
use pressure_core::{
    AcquireOptions, Acquisition, ActualUsage, Error, LimitChange, Limits, MemoryBackend, Permit,
    ResourceBroker,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A broker whose time only moves when the test says so.
fn broker() -> (ResourceBroker<MemoryBackend>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let b = ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock.clone())
        .build();
    (b, clock)
}

fn take(b: &ResourceBroker<MemoryBackend>, id: &str) -> Acquisition<MemoryBackend> {
    b.try_acquire_now(id, AcquireOptions::default())
        .expect("registered")
}

/// Takes `n` acquisitions and returns the permits of those granted.
fn grants(b: &ResourceBroker<MemoryBackend>, id: &str, n: usize) -> Vec<Permit<MemoryBackend>> {
    (0..n).filter_map(|_| take(b, id).into_permit()).collect()
}

async fn usage(b: &ResourceBroker<MemoryBackend>, id: &str, dim: &str) -> Option<u64> {
    b.resource_stats(id)
        .await
        .expect("registered")
        .usage
        .get(dim)
        .copied()
}

#[test]
fn set_limits_registers_an_absent_resource_and_keeps_an_unchanged_one() {
    let (b, _) = broker();
    let limits = Limits::default().requests_per_minute(2);
    assert_eq!(b.set_limits("r", limits.clone()), Ok(LimitChange::Registered));
    assert_eq!(grants(&b, "r", 1).len(), 1);
    assert_eq!(b.set_limits("r", limits), Ok(LimitChange::Unchanged));
    assert_eq!(
        grants(&b, "r", 5).len(),
        1,
        "the unchanged resource kept its count"
    );
    let bad = b.set_limits("r", Limits::default().requests_per_minute(0));
    assert!(matches!(bad, Err(Error::InvalidLimits { .. })), "{bad:?}");
    assert!(!take(&b, "r").allowed(), "an invalid change changes nothing");
}

#[tokio::test]
async fn raised_window_limit_admits_exactly_the_difference() {
    let (b, _) = broker();
    b.register_limit("w", Limits::default().requests_per_minute(2))
        .expect("valid");
    assert_eq!(grants(&b, "w", 5).len(), 2);
    assert_eq!(
        b.set_limits("w", Limits::default().requests_per_minute(5)),
        Ok(LimitChange::Changed)
    );
    assert_eq!(grants(&b, "w", 10).len(), 3, "2 used of 5: exactly 3 more");
    let s = b.resource_stats("w").await.expect("registered");
    assert_eq!(s.limits.requests_per_minute, Some(5));
    assert_eq!(
        (s.allowed, s.denied),
        (5, 10),
        "counters continue across the change"
    );
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&5));
}

#[test]
fn lowered_window_limit_keeps_usage() {
    let (b, clock) = broker();
    b.register_limit("w", Limits::default().requests_per_minute(10))
        .expect("valid");
    assert_eq!(grants(&b, "w", 6).len(), 6);
    b.set_limits("w", Limits::default().requests_per_minute(4))
        .expect("valid");
    assert_eq!(grants(&b, "w", 3).len(), 0, "6 used is over the new 4");
    clock.advance(Duration::from_secs(61));
    assert_eq!(grants(&b, "w", 10).len(), 4, "the old usage leaves the window");
}

#[test]
fn raised_gcra_limit_keeps_the_units_in_the_bucket() {
    // Lock-free layout (one gcra dimension) changed to another lock-free one.
    let (b, clock) = broker();
    b.register_limit("g", Limits::default().requests_per_minute(2).gcra(None))
        .expect("valid");
    assert_eq!(grants(&b, "g", 5).len(), 2);
    b.set_limits("g", Limits::default().requests_per_minute(5).gcra(None))
        .expect("valid");
    assert_eq!(grants(&b, "g", 10).len(), 3, "2 used of 5: exactly 3 more");
    // And it refills at the new rate: one unit per 12 s.
    clock.advance(Duration::from_secs(12));
    assert_eq!(grants(&b, "g", 3).len(), 1);
}

#[tokio::test]
async fn gcra_fast_path_converts_to_the_locked_layout() {
    let (b, _) = broker();
    b.register_limit("f", Limits::default().requests_per_minute(5).gcra(None))
        .expect("valid");
    let old = b.resource("f").expect("registered");
    assert_eq!(grants(&b, "f", 3).len(), 3);
    // A concurrency limit moves the resource off the lock-free path.
    b.set_limits(
        "f",
        Limits::default()
            .requests_per_minute(5)
            .max_concurrent_requests(1)
            .gcra(None),
    )
    .expect("valid");
    let first = old.try_acquire_now(AcquireOptions::default()).expect("answers");
    assert!(first.allowed(), "the old handle follows the move");
    assert!(
        first.permit().is_some_and(|p| p.grant().lease.is_some()),
        "and takes a lease"
    );
    assert!(!take(&b, "f").allowed(), "concurrency 1 is held");
    drop(first);
    assert!(take(&b, "f").allowed(), "the fifth unit");
    assert_eq!(
        grants(&b, "f", 3).len(),
        0,
        "3 + 2 = 5 used: the bucket carried over"
    );
    assert_eq!(usage(&b, "f", "requestsPerMinute").await, Some(5));
    let s = b.resource_stats("f").await.expect("registered");
    assert_eq!(s.allowed, 5);
}

#[tokio::test]
async fn raised_concurrency_admits_exactly_one_more_and_old_permits_release() {
    let (b, _) = broker();
    b.register_limit("c", Limits::default().max_concurrent_requests(2))
        .expect("valid");
    let held = grants(&b, "c", 2);
    assert_eq!(held.len(), 2);
    b.set_limits("c", Limits::default().max_concurrent_requests(3))
        .expect("valid");
    let more = grants(&b, "c", 4);
    assert_eq!(more.len(), 1, "2 held of 3: exactly 1 more");
    assert_eq!(usage(&b, "c", "maxConcurrentRequests").await, Some(3));
    assert_eq!(b.resource_stats("c").await.expect("registered").active, Some(3));
    drop(held);
    assert_eq!(
        usage(&b, "c", "maxConcurrentRequests").await,
        Some(1),
        "permits granted before the change release their leases"
    );
    assert_eq!(b.resource_stats("c").await.expect("registered").active, Some(1));
    assert_eq!(grants(&b, "c", 4).len(), 2);
}

#[test]
fn lowered_concurrency_counts_leases_granted_before() {
    let (b, _) = broker();
    b.register_limit("c", Limits::default().max_concurrent_requests(3))
        .expect("valid");
    let mut held = grants(&b, "c", 3);
    b.set_limits("c", Limits::default().max_concurrent_requests(1))
        .expect("valid");
    assert!(!take(&b, "c").allowed());
    held.truncate(1);
    assert!(
        !take(&b, "c").allowed(),
        "one old lease still fills the new limit of 1"
    );
    held.clear();
    let p = take(&b, "c");
    assert!(p.allowed());
    assert!(!take(&b, "c").allowed());
}

#[tokio::test]
async fn dimensions_are_matched_by_name_when_added_and_removed() {
    let (b, _) = broker();
    b.register_limit(
        "d",
        Limits::default().requests_per_minute(10).tokens_per_minute(1_000),
    )
    .expect("valid");
    let mut p = take(&b, "d").into_permit().expect("granted");
    drop(
        b.try_acquire_now("d", AcquireOptions::default().tokens(300, 100))
            .expect("answers"),
    );
    assert_eq!(usage(&b, "d", "tokensPerMinute").await, Some(400));
    // Remove requestsPerMinute (the first dimension), add inputTokensPerMinute
    // and concurrency: tokensPerMinute moves position and keeps its count.
    b.set_limits(
        "d",
        Limits::default()
            .tokens_per_minute(1_000)
            .input_tokens_per_minute(500)
            .max_concurrent_requests(5),
    )
    .expect("valid");
    let s = b.resource_stats("d").await.expect("registered");
    assert_eq!(s.usage.get("tokensPerMinute"), Some(&400));
    assert_eq!(
        s.usage.get("inputTokensPerMinute"),
        Some(&0),
        "an added dimension starts empty"
    );
    assert_eq!(
        s.usage.get("requestsPerMinute"),
        None,
        "a removed dimension stops counting"
    );
    assert!(
        !b.try_acquire_now("d", AcquireOptions::default().tokens(0, 601))
            .expect("answers")
            .allowed(),
        "400 + 601 > 1000"
    );
    // A permit from before the change reconciles on the dimensions that remain.
    p.reconcile(ActualUsage {
        requests: 1,
        input_tokens: 0,
        output_tokens: 50,
        cost_micro_usd: 0,
    })
    .await
    .expect("reconcile");
    assert_eq!(usage(&b, "d", "tokensPerMinute").await, Some(450));
    // Adding requestsPerMinute back starts it from zero.
    b.set_limits(
        "d",
        Limits::default().requests_per_minute(1).tokens_per_minute(1_000),
    )
    .expect("valid");
    assert_eq!(grants(&b, "d", 3).len(), 1);
}

#[test]
fn handles_obtained_before_a_change_count_against_the_new_limits() {
    let (b, _) = broker();
    b.register_limit("h", Limits::default().requests_per_minute(3))
        .expect("valid");
    let old = b.resource("h").expect("registered");
    assert!(old
        .try_acquire_now(AcquireOptions::default())
        .expect("answers")
        .allowed());
    b.set_limits("h", Limits::default().requests_per_minute(1))
        .expect("valid");
    assert_eq!(old.limits().requests_per_minute, Some(1));
    assert!(
        !old.try_acquire_now(AcquireOptions::default())
            .expect("answers")
            .allowed(),
        "1 used of the new 1"
    );
    b.set_limits("h", Limits::default().requests_per_minute(4))
        .expect("valid");
    let n = (0..6)
        .filter(|_| {
            old.try_acquire_now(AcquireOptions::default())
                .expect("answers")
                .allowed()
        })
        .count();
    assert_eq!(
        n, 3,
        "two changes later the first handle still counts on the same state"
    );
    assert_eq!(grants(&b, "h", 2).len(), 0);
}

#[tokio::test]
async fn changes_of_a_queue_resource_keep_its_queue() {
    let (b, _) = broker();
    b.register(
        "q",
        pressure_core::ResourceConfig::new(Limits::default().max_concurrent_requests(1)),
    )
    .expect("valid");
    assert_eq!(
        b.set_limits("q", Limits::default().max_concurrent_requests(2)),
        Ok(LimitChange::Changed)
    );
    let s = b.resource_stats("q").await.expect("registered");
    assert_eq!(s.kind, pressure_core::ResourceKind::Queue);
    assert_eq!(s.queued, Some(0));
    let out = b
        .enqueue(pressure_core::Request::new("q", |_| async {
            Ok::<_, pressure_core::TaskError<()>>(7)
        }))
        .await
        .expect("served");
    assert_eq!(out.value, 7);
}

#[tokio::test]
async fn unregister_removes_and_outstanding_permits_still_release() {
    let (b, _) = broker();
    b.register_limit("u", Limits::default().max_concurrent_requests(1))
        .expect("valid");
    let handle = b.resource("u").expect("registered");
    let mut p = take(&b, "u").into_permit().expect("granted");
    assert!(b.unregister("u"));
    assert!(!b.unregister("u"), "already gone");
    assert!(matches!(
        b.try_acquire_now("u", AcquireOptions::default()),
        Err(Error::UnknownResource(_))
    ));
    assert!(b.resource_stats("u").await.is_err());
    p.release().await.expect("releases without the registration");
    drop(p);
    assert!(
        handle
            .try_acquire_now(AcquireOptions::default())
            .expect("answers")
            .allowed(),
        "the slot came back"
    );
    // Registered again, it starts afresh.
    assert_eq!(
        b.set_limits("u", Limits::default().max_concurrent_requests(1)),
        Ok(LimitChange::Registered)
    );
    assert!(take(&b, "u").allowed());
}

#[test]
fn changes_racing_with_acquisitions_never_over_admit_or_panic() {
    // Threads hammer a lock-free resource through a handle obtained before
    // any change, while its limit flips between 100 and 101 per minute and
    // between the lock-free and the locked layout: the state carries over at
    // every change (rounded up), so no more than 101 are ever admitted
    // (time stands still: nothing refills).
    let (b, _) = broker();
    b.register_limit("race", Limits::default().requests_per_minute(100).gcra(None))
        .expect("valid");
    let handle = b.resource("race").expect("registered");
    let allowed = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        for _ in 0..3 {
            let (handle, allowed) = (handle.clone(), allowed.clone());
            s.spawn(move || {
                for _ in 0..20_000 {
                    if handle
                        .try_acquire_now(AcquireOptions::default())
                        .expect("answers")
                        .allowed()
                    {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        for i in 0..200u64 {
            let limits = match i % 3 {
                0 => Limits::default().requests_per_minute(101).gcra(None),
                1 => Limits::default().requests_per_minute(100).gcra(None),
                _ => Limits::default()
                    .requests_per_minute(101)
                    .max_concurrent_requests(1_000)
                    .gcra(None),
            };
            b.set_limits("race", limits).expect("valid");
            std::thread::yield_now();
        }
    });
    let allowed = allowed.load(Ordering::Relaxed);
    assert!(allowed <= 101, "over-admitted {allowed}");
    assert!(allowed >= 100, "admitted only {allowed}");
}

/// Shadow mode is a limits change like any other: switching it keeps the
/// usage and the counters; the broker decides the same either way, and a
/// shadow denial admitted by the caller consumes nothing and is counted in
/// `shadowDenied` (as a part of `denied`).
#[tokio::test]
async fn a_shadow_switch_keeps_usage_and_counts_shadow_denials() {
    let (b, _) = broker();
    let shadow = Limits::default().requests_per_minute(3).shadow(true);
    let json = serde_json::to_value(&shadow).expect("serializes");
    assert_eq!(json["shadow"], serde_json::json!(true));
    let plain = serde_json::to_value(Limits::default().requests_per_minute(3)).expect("serializes");
    assert!(plain.get("shadow").is_none(), "skipped when false: {plain}");
    assert_eq!(b.set_limits("r", shadow.clone()), Ok(LimitChange::Registered));
    let handle = b.resource("r").expect("registered");
    let mut admitted = Vec::new();
    for _ in 0..5 {
        match handle
            .try_acquire_now(AcquireOptions::default())
            .expect("answers")
        {
            Acquisition::Granted(p) => admitted.push(p),
            Acquisition::Denied(_) => {
                assert!(handle.limits().shadow, "only a shadow limit admits a denial");
                admitted.push(handle.admit_shadow_denial());
            }
        }
    }
    assert_eq!(admitted.len(), 5, "every request admitted");
    let s = b.resource_stats("r").await.expect("registered");
    assert_eq!((s.allowed, s.denied, s.shadow_denied), (3, 2, 2));
    assert_eq!(
        s.usage.get("requestsPerMinute"),
        Some(&3),
        "the shadow denials consumed nothing"
    );
    drop(admitted);
    let enforcing = Limits::default().requests_per_minute(3);
    assert_eq!(b.set_limits("r", enforcing), Ok(LimitChange::Changed));
    assert!(
        !take(&b, "r").allowed(),
        "the usage was kept: the window is still full"
    );
    let s = b.resource_stats("r").await.expect("registered");
    assert_eq!(
        (s.allowed, s.denied, s.shadow_denied),
        (3, 3, 2),
        "the counters carried over"
    );
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&3));
    assert_eq!(b.set_limits("r", shadow), Ok(LimitChange::Changed), "and back");
}
