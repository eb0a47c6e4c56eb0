//! Round trips and key isolation, on a Redis of the test's own:
//! one client command per `try_acquire` (seen by MONITOR), NOSCRIPT
//! recovery, no busy polling by queued waiters, hostile ids kept apart.

#[path = "../support.rs"]
mod support;

use futures::StreamExt;
use pressure_core::{AcquireOptions, Limits, Request, ResourceConfig, TaskError};
use std::time::Duration;
use support::RedisServer;

/// Commands sent by clients (not from inside scripts) between two markers.
async fn client_commands_between(
    srv: &RedisServer,
    work: impl std::future::Future<Output = ()>,
) -> Vec<String> {
    let client = redis::Client::open(srv.url()).expect("url");
    let mut monitor = client.get_async_monitor().await.expect("monitor");
    let mut stream = monitor.on_message::<String>();
    let mut marker = client.get_multiplexed_async_connection().await.expect("conn");
    let _: String = redis::cmd("ECHO")
        .arg("marker-start")
        .query_async(&mut marker)
        .await
        .expect("echo");
    work.await;
    let _: String = redis::cmd("ECHO")
        .arg("marker-end")
        .query_async(&mut marker)
        .await
        .expect("echo");
    let mut lines = Vec::new();
    let mut started = false;
    while let Some(line) = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("monitor keeps up")
    {
        if line.contains("\"marker-start\"") {
            started = true;
        } else if line.contains("\"marker-end\"") {
            break;
        } else if started && !line.contains(" lua]") {
            lines.push(line);
        }
    }
    lines
}

fn command_of(line: &str) -> String {
    line.split("] \"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or("")
        .to_uppercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_command_per_acquisition() {
    let srv = RedisServer::start();
    let b = support::broker_with(support::config(srv.url())).await;
    b.register_limit(
        "rt",
        Limits::default()
            .requests_per_minute(1_000)
            .tokens_per_minute(1_000_000)
            .max_concurrent_requests(100),
    )
    .expect("valid");
    // Warm up: the first call loads the script (NOSCRIPT, SCRIPT LOAD, EVALSHA).
    let _ = b
        .try_acquire("rt", AcquireOptions::default())
        .await
        .expect("answers");
    let mut held = Vec::new();
    let lines = client_commands_between(&srv, async {
        for _ in 0..50 {
            let a = b
                .try_acquire("rt", AcquireOptions::default().tokens(100, 50))
                .await
                .expect("answers");
            assert!(a.allowed());
            held.push(a);
        }
    })
    .await;
    let commands: Vec<String> = lines.iter().map(|l| command_of(l)).collect();
    assert_eq!(commands.len(), 50, "{commands:?}");
    assert!(commands.iter().all(|c| c == "EVALSHA"), "{commands:?}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_script_is_reloaded() {
    let srv = RedisServer::start();
    let b = support::broker_with(support::config(srv.url())).await;
    b.register_limit("rt", Limits::default().requests_per_minute(10))
        .expect("valid");
    assert!(b
        .try_acquire("rt", AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut support::conn(&srv))
        .expect("flush");
    assert!(b
        .try_acquire("rt", AcquireOptions::default())
        .await
        .expect("reloads")
        .allowed());
    let s = b.resource_stats("rt").await.expect("registered");
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&2));
    assert_eq!(s.backend_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_do_not_poll() {
    let srv = RedisServer::start();
    let b = support::broker_with(support::config(srv.url())).await;
    b.register("q", ResourceConfig::new(Limits::default().requests_per_second(2)))
        .expect("valid");
    let lines = client_commands_between(&srv, async {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move {
                    b.enqueue(Request::new("q", |_| async { Ok::<_, TaskError<()>>(()) }))
                        .await
                        .expect("served")
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    })
    .await;
    let evals = lines.iter().filter(|l| command_of(l).starts_with("EVAL")).count();
    // 4 grants, the first denial of each waiter's turn, plus a few wake-ups:
    // a busy poller would send hundreds in the second the waiters wait.
    assert!(
        (4..=16).contains(&evals),
        "{evals} acquisition attempts for 4 requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tenant_ids_cannot_collide() {
    let b = support::broker().await;
    let run = support::run_id();
    let ids = [
        "a",
        "a}",
        "{a}",
        "a:s",
        "a}:s",
        "}{",
        "tenant 1",
        "tenant%201",
        "日本",
        "a{b}c",
        "x}:c",
        "",
        "%",
    ];
    for id in ids {
        let id = format!("{run}:{id}");
        b.register_limit(&id, Limits::default().requests_per_minute(1))
            .expect("valid");
    }
    for id in ids {
        let id = format!("{run}:{id}");
        let a = b
            .try_acquire(&id, AcquireOptions::default())
            .await
            .expect("answers");
        assert!(a.allowed(), "{id:?} saw another tenant's usage");
    }
    for id in ids {
        let id = format!("{run}:{id}");
        let s = b.resource_stats(&id).await.expect("registered");
        assert_eq!(s.usage.get("requestsPerMinute"), Some(&1), "{id:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_cache_refuses_locally_until_the_store_said() {
    let srv = RedisServer::start();
    let b = support::broker_with(support::config(srv.url())).await;
    b.register_limit("dc", Limits::default().requests_per_second(5).gcra(Some(5)))
        .expect("valid");
    for _ in 0..5 {
        assert!(b
            .try_acquire("dc", AcquireOptions::default())
            .await
            .expect("answers")
            .allowed());
    }
    let first = b
        .try_acquire("dc", AcquireOptions::default())
        .await
        .expect("answers");
    assert!(!first.allowed());
    let until = tokio::time::Instant::now() + first.wait_time();
    let mut waits = Vec::new();
    let lines = client_commands_between(&srv, async {
        for _ in 0..100 {
            let a = b
                .try_acquire("dc", AcquireOptions::default())
                .await
                .expect("answers");
            assert!(!a.allowed());
            waits.push(a.wait_time());
        }
    })
    .await;
    assert!(
        lines.is_empty(),
        "hammering a full resource costs no round trip: {lines:?}"
    );
    assert!(waits.windows(2).all(|w| w[1] <= w[0]), "the wait counts down");
    // At T the store is asked again, and the demand fits.
    tokio::time::sleep_until(until).await;
    assert!(b
        .try_acquire("dc", AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    // Cached denials are not counted as store work, but are denials.
    let s = b.resource_stats("dc").await.expect("registered");
    assert_eq!(s.allowed, 6);
}

/// A calendar denial (wait until midnight) is cached for about a second,
/// not until the reset: a refund by another instance frees the budget for
/// the whole fleet within that second. The cached wait is the real one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_cache_keeps_a_calendar_denial_about_a_second() {
    let srv = RedisServer::start();
    let a = support::broker_with(support::config(srv.url())).await;
    let b = support::broker_with(support::config(srv.url())).await;
    let limits = Limits::default().cost_micro_usd_per_day(100);
    // Noon UTC on both (never a minute from a real midnight).
    let noon_ms =
        pressure_core::Calendar::Month.period_start((2027 - 1970) * 12 + 5) + 14 * 86_400_000 + 43_200_000;
    for broker in [&a, &b] {
        broker.backend().wall_shift().stand_at(noon_ms * 1_000_000);
        broker.register_limit("budget", limits.clone()).expect("valid");
    }
    let cost = |c| AcquireOptions::default().cost_micro_usd(c);
    let mut held = b
        .try_acquire("budget", cost(100))
        .await
        .expect("answers")
        .into_permit()
        .expect("fits");
    let first = a.try_acquire("budget", cost(10)).await.expect("answers");
    let d = *first.denial().expect("over budget");
    assert!(
        d.wait > Duration::from_secs(11 * 3_600),
        "until midnight: {:?}",
        d.wait
    );
    let lines = client_commands_between(&srv, async {
        let again = a.try_acquire("budget", cost(10)).await.expect("answers");
        let w = again.denial().expect("cached").wait;
        assert!(w <= d.wait && w + Duration::from_secs(1) > d.wait, "{w:?}");
    })
    .await;
    assert!(lines.is_empty(), "answered by the deny cache: {lines:?}");
    // Another instance refunds: within about a second `a` asks again.
    held.reconcile(pressure_core::Reserved {
        requests: 1,
        ..Default::default()
    })
    .await
    .expect("reconciled");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !a
        .try_acquire("budget", cost(10))
        .await
        .expect("answers")
        .allowed()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refund was never seen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
