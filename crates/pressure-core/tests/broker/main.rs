//! Broker-level behaviour on the in-memory backend: registration errors,
//! the stats surface, "wait up to D", lazy resources under a flood, and a
//! heavy multi-threaded stress run.

#[path = "../support.rs"]
mod support;

use pressure_core::clock::ManualClock;
use pressure_core::{
    AcquireOptions, Acquisition, Error, LimitTemplate, Limits, MemoryBackend, QueueConfig, ResourceBroker,
    ResourceConfig,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn invalid_registrations_are_typed_errors() {
    let b = ResourceBroker::new();
    let e = b
        .register_limit("r", Limits::default().requests_per_second(0))
        .expect_err("zero");
    assert_eq!(e.to_string(), "resource \"r\": requestsPerSecond: must be > 0");
    let e = b
        .register(
            "q",
            ResourceConfig::new(Limits::default().requests_per_second(1)).queue(QueueConfig {
                batch_headroom: 1.5,
                ..QueueConfig::default()
            }),
        )
        .expect_err("headroom");
    assert!(e.to_string().contains("queue.batchHeadroom"), "{e}");
    b.register_limit("r", Limits::default().requests_per_second(1))
        .expect("valid");
    assert!(matches!(
        b.register_limit("r", Limits::default().requests_per_second(1)),
        Err(Error::AlreadyRegistered(_))
    ));
}

#[tokio::test]
async fn stats_have_null_queue_fields_for_limits_only() {
    let b = ResourceBroker::new();
    b.register_limit("limit", Limits::default().requests_per_second(5))
        .expect("valid");
    b.register(
        "queue",
        ResourceConfig::new(Limits::default().requests_per_second(5)),
    )
    .expect("valid");
    let _p = b
        .try_acquire("limit", AcquireOptions::default())
        .await
        .expect("answers");
    b.register_limit("leased", Limits::default().max_concurrent_requests(3))
        .expect("valid");
    let _held = b
        .try_acquire("leased", AcquireOptions::default())
        .await
        .expect("answers");
    let json = serde_json::to_value(b.stats().await).expect("serializes");
    let by_id = |id: &str| {
        json.as_array()
            .and_then(|a| a.iter().find(|r| r["resource"] == id))
            .cloned()
            .expect("listed")
    };
    let limit = &by_id("limit");
    assert_eq!(limit["resource"], "limit");
    assert_eq!(limit["kind"], "limit");
    assert!(limit["queued"].is_null());
    assert!(limit["waitTimeMs"].is_null());
    assert_eq!(limit["allowed"], 1);
    assert!(limit["active"].is_null(), "rate-only permits hold nothing");
    assert_eq!(limit["usage"]["requestsPerSecond"], 1);
    assert_eq!(limit["limits"]["requestsPerSecond"], 5);
    let leased = &by_id("leased");
    assert_eq!(leased["active"], 1);
    assert_eq!(leased["usage"]["maxConcurrentRequests"], 1);
    let queue = &by_id("queue");
    assert_eq!(queue["kind"], "queue");
    assert_eq!(queue["queued"], 0);
}

#[tokio::test(start_paused = true)]
async fn acquire_within_waits_or_fails_fast() {
    let b = support::paused_broker();
    b.register_limit("r", Limits::default().requests_per_second(2).gcra(Some(1)))
        .expect("valid");
    let t0 = tokio::time::Instant::now();
    let _a = b
        .acquire_within("r", AcquireOptions::default(), Duration::from_secs(1))
        .await
        .expect("now");
    let _b = b
        .acquire_within("r", AcquireOptions::default(), Duration::from_secs(1))
        .await
        .expect("after 500 ms");
    assert_eq!(t0.elapsed(), Duration::from_millis(500));
    let e = b
        .acquire_within("r", AcquireOptions::default(), Duration::from_millis(100))
        .await
        .expect_err("needs 500 ms");
    assert!(matches!(e, Error::WaitExceeded { .. }));
    assert_eq!(
        t0.elapsed(),
        Duration::from_millis(500),
        "failed without sleeping"
    );
}

#[tokio::test]
async fn a_flood_of_tenants_stays_bounded() {
    let b = ResourceBroker::builder(MemoryBackend::new())
        .max_lazy_resources(1_000)
        .build();
    let t = LimitTemplate::new(&Limits::default().requests_per_minute(10)).expect("valid");
    let mut peak = 0;
    for i in 0..50_000 {
        let h = b.lazy_limit(&format!("tenant:{i}"), &t).expect("registers");
        assert!(h
            .try_acquire(AcquireOptions::default())
            .await
            .expect("answers")
            .allowed());
        drop(h);
        peak = peak.max(b.len());
    }
    assert!(peak <= 1_001, "peak {peak}");
    assert!(b.lazy_resources() <= 1_000);
    assert!(b.evicted_resources() >= 49_000);
}

#[tokio::test]
async fn eviction_prefers_resources_at_rest_and_spares_held_ones() {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let b = ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock.clone())
        .max_lazy_resources(10)
        .build();
    let t = LimitTemplate::new(&Limits::default().requests_per_minute(3)).expect("valid");
    // A held tenant, exhausted.
    let held = b.lazy_limit("held", &t).expect("registers");
    for _ in 0..3 {
        assert!(held
            .try_acquire(AcquireOptions::default())
            .await
            .expect("answers")
            .allowed());
    }
    // Nine busy tenants used long ago (at rest after a minute) …
    for i in 0..9 {
        let h = b.lazy_limit(&format!("old:{i}"), &t).expect("registers");
        let _ = h.try_acquire(AcquireOptions::default()).await;
    }
    clock.advance(Duration::from_secs(120));
    // … and one fresh, busy tenant.
    let fresh = b.lazy_limit("fresh", &t).expect("registers");
    let _ = fresh.try_acquire(AcquireOptions::default()).await;
    drop(fresh);
    assert!(b.lazy_resources() <= 10);
    assert!(b.resource("held").is_some(), "a held resource is never evicted");
    assert!(
        b.resource("fresh").is_some(),
        "a busy resource goes after those at rest"
    );
    // The held tenant was kept (its window has drained since).
    let u = b.resource_stats("held").await.expect("registered").usage;
    assert_eq!(
        u.get("requestsPerMinute"),
        Some(&0),
        "a minute passed, the window drained"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heavy_stress_keeps_every_bound() {
    let b = ResourceBroker::new();
    b.register_limit(
        "s",
        Limits::default()
            .requests_per_minute(20_000)
            .tokens_per_minute(1_000_000)
            .max_concurrent_requests(8),
    )
    .expect("valid");
    b.register_limit("g", Limits::default().requests_per_minute(5_000).gcra(Some(100)))
        .expect("valid");
    let held = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (b, held, peak) = (b.clone(), held.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let (mut s_ok, mut g_ok) = (0u64, 0u64);
            for i in 0..500u64 {
                if let Acquisition::Granted(p) = b
                    .try_acquire("s", AcquireOptions::default().tokens(10 + i % 7, 20))
                    .await
                    .expect("answers")
                {
                    s_ok += 1;
                    let n = held.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    if i % 3 == 0 {
                        tokio::task::yield_now().await;
                    }
                    held.fetch_sub(1, Ordering::SeqCst);
                    drop(p);
                }
                g_ok += u64::from(
                    b.try_acquire("g", AcquireOptions::default())
                        .await
                        .expect("answers")
                        .allowed(),
                );
            }
            (s_ok, g_ok)
        }));
    }
    let (mut s_ok, mut g_ok) = (0, 0);
    for t in tasks {
        let (s, g) = t.await.expect("task");
        s_ok += s;
        g_ok += g;
    }
    assert!(
        peak.load(Ordering::SeqCst) <= 8,
        "concurrency peak {}",
        peak.load(Ordering::SeqCst)
    );
    assert!(s_ok > 0 && s_ok <= 20_000);
    // The bucket: at most burst + elapsed/T; the run takes far less than a minute.
    assert!((100..=200).contains(&g_ok), "gcra admitted {g_ok}");
    let stats = b.resource_stats("s").await.expect("registered");
    assert_eq!(stats.active, Some(0));
    assert_eq!(stats.usage.get("maxConcurrentRequests"), Some(&0));
    assert_eq!(stats.allowed, s_ok);
    assert_eq!(stats.allowed + stats.denied, 64 * 500);
}

#[tokio::test]
async fn local_stats_are_the_counters_without_usage() {
    let b = ResourceBroker::new();
    b.register_limit(
        "r",
        Limits::default()
            .requests_per_minute(1)
            .max_concurrent_requests(5),
    )
    .expect("valid");
    let _held = b
        .try_acquire("r", AcquireOptions::default())
        .await
        .expect("answers");
    assert!(!b
        .try_acquire("r", AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    let full = b.stats().await;
    let local = b.local_stats();
    assert_eq!(local.len(), 1);
    assert!(local[0].usage.is_empty(), "no backend read");
    assert_eq!(full[0].usage.get("requestsPerMinute"), Some(&1));
    assert_eq!(
        (local[0].allowed, local[0].denied, local[0].active),
        (1, 1, Some(1))
    );
    assert_eq!((full[0].allowed, full[0].denied, full[0].active), (1, 1, Some(1)));
}

/// `check_now` is `try_acquire_now` with the permit dropped at once, on
/// every layout: the same grants and denials and counters, the same
/// oversized-demand error, tokens stay reserved, a concurrency slot comes
/// straight back.
#[tokio::test]
async fn check_now_is_try_acquire_now_with_the_permit_dropped() {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let b = ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock.clone())
        .build();
    let layouts = [
        ("gcra", Limits::default().requests_per_minute(3).gcra(None)),
        ("window", Limits::default().requests_per_minute(3)),
        (
            "multi",
            Limits::default()
                .requests_per_minute(3)
                .tokens_per_minute(1_000)
                .max_concurrent_requests(1),
        ),
    ];
    for (id, limits) in layouts {
        b.register_limit(id, limits).expect("valid");
        let h = b.resource(id).expect("registered");
        let opts = AcquireOptions::default().tokens(100, 0);
        let answers: Vec<bool> = (0..5)
            .map(|i| match i % 2 {
                0 => h.check_now(opts).expect("answers").is_ok(),
                _ => b.check_now(id, opts).expect("answers").is_ok(),
            })
            .collect();
        assert_eq!(answers, [true, true, true, false, false], "{id}");
        let d = h.check_now(opts).expect("answers").expect_err("denied");
        assert!(d.wait > Duration::ZERO, "{id}: {d:?}");
        let s = b.resource_stats(id).await.expect("registered");
        assert_eq!((s.allowed, s.denied), (3, 3), "{id}");
        assert_eq!(s.usage.get("requestsPerMinute"), Some(&3), "{id}");
        if id == "multi" {
            assert_eq!(s.usage.get("tokensPerMinute"), Some(&300), "tokens stay reserved");
            assert_eq!(
                s.usage.get("maxConcurrentRequests"),
                Some(&0),
                "the slot came back"
            );
            assert_eq!(s.active, Some(0));
        }
        assert!(matches!(
            h.check_now(AcquireOptions::default().requests(4)),
            Err(Error::DemandTooLarge { .. })
        ));
    }
}
