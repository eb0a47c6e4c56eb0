//! A holder that dies: a child process takes concurrency permits, keeps
//! renewing them, and is killed with SIGKILL; this process gets the slots
//! back within the lease TTL.

#[path = "../support.rs"]
mod support;

use pressure_core::{AcquireOptions, Limits};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(1_000);
const SLOTS: u64 = 3;

fn limits() -> Limits {
    Limits::default().max_concurrent_requests(SLOTS).lease_ttl(TTL)
}

/// The child's side: runs only when the parent sets PRESSURE_CRASH_CHILD.
#[tokio::test]
async fn child_holds_permits_until_killed() {
    let Ok(id) = std::env::var("PRESSURE_CRASH_CHILD") else {
        return;
    };
    let b = support::broker().await;
    b.register_limit(&id, limits()).expect("valid");
    let mut permits = Vec::new();
    for _ in 0..SLOTS {
        let p = b
            .try_acquire(&id, AcquireOptions::default())
            .await
            .expect("answers");
        permits.push(p.into_permit().expect("granted"));
    }
    println!("HELD");
    // A well-behaved holder: renews every third of the TTL, until killed.
    for _ in 0..600 {
        tokio::time::sleep(TTL / 3).await;
        for p in &mut permits {
            assert!(p.renew().await.expect("renews"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_gives_slots_back_within_the_ttl() {
    if std::env::var("PRESSURE_CRASH_CHILD").is_ok() {
        return;
    }
    let id = format!("{}:crash", support::run_id());
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_holds_permits_until_killed",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("PRESSURE_CRASH_CHILD", &id)
        // The child uses this process's server, not one of its own.
        .env("PRESSURE_REDIS_URL", support::redis_url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("child starts");
    let stdout = child.stdout.take().expect("piped");
    let held = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("HELD"))
    });
    assert!(
        tokio::time::timeout(Duration::from_secs(20), held)
            .await
            .expect("child reports")
            .expect("reader"),
        "child never held its permits"
    );
    let b = support::broker().await;
    b.register_limit(&id, limits()).expect("valid");
    // While the child lives (and renews past the TTL), nothing is free.
    tokio::time::sleep(TTL + TTL / 2).await;
    assert!(!b
        .try_acquire(&id, AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());

    child.kill().expect("SIGKILL");
    let killed = Instant::now();
    let _ = child.wait();
    let mut got = Vec::new();
    while (got.len() as u64) < SLOTS {
        assert!(
            killed.elapsed() < TTL + Duration::from_millis(300),
            "slots not back after {:?}",
            killed.elapsed()
        );
        if let Some(p) = b
            .try_acquire(&id, AcquireOptions::default())
            .await
            .expect("answers")
            .into_permit()
        {
            got.push(p);
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    println!(
        "all {SLOTS} slots back {:?} after SIGKILL (lease TTL {TTL:?})",
        killed.elapsed()
    );
}
