//! A holder that dies: a child process takes every concurrency slot of a
//! resource and keeps its leases alive past their TTL, then is killed with
//! SIGKILL; this process gets the slots back once the leases expire.
//!
//! There is one test. Its child is this test binary again, started by the
//! test with [`CHILD`] set: the test sees that variable first thing and
//! plays the holder instead, so the holder is no second test that passes in
//! every run.
//!
//! Nothing waits on the clock for its answer: the parent reads the child's
//! lines (`held`, then `live <n>` after each round in which every lease
//! renewed) and asks the store right after one of them; after the kill it
//! polls the store until every slot is back. Time only bounds a hang — and
//! the time the slots take to come back, by 10× the lease TTL, which a TTL
//! left at its 30 s default could not meet.

#[path = "../support.rs"]
mod support;

use pressure_core::{AcquireOptions, DenialCause, Dimension, Limits, DEFAULT_LEASE_TTL};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Set in the child's environment to the resource id it holds.
const CHILD: &str = "PRESSURE_CRASH_CHILD";
/// The one test, which the child runs too (`--exact`).
const TEST: &str = "killed_holder_gives_slots_back_within_the_ttl";

const TTL: Duration = Duration::from_millis(2_000);
const SLOTS: u64 = 3;
/// The child renews by hand this often, besides the broker's own renewer:
/// a renewal that answers `true` is its proof that it still holds.
const RENEW_EVERY: Duration = Duration::from_millis(500);
/// The parent checks the store after this round: by then more than one TTL
/// has passed since the child took its leases (its sleeps alone add up to
/// 2.5 s), so a renewal that did not extend them would show as a free slot.
const LIVE_ROUND: u32 = 5;
/// Rounds after which a child nobody killed gives up (2 minutes).
const CHILD_ROUNDS: u32 = 240;
/// Bounds the wait for a line of the child (it connects to Redis first).
const LINE_BOUND: Duration = Duration::from_secs(30);
/// The slots must be back within this after the kill: 10× the TTL, below
/// the default TTL so that a TTL that is not applied fails.
const BACK_WITHIN: Duration = Duration::from_secs(10 * TTL.as_secs());
const _: () = assert!(RENEW_EVERY.as_millis() * LIVE_ROUND as u128 > TTL.as_millis());
const _: () = assert!(BACK_WITHIN.as_secs() < DEFAULT_LEASE_TTL.as_secs());

fn limits() -> Limits {
    Limits::default().max_concurrent_requests(SLOTS).lease_ttl(TTL)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_gives_slots_back_within_the_ttl() {
    if let Ok(id) = std::env::var(CHILD) {
        hold_until_killed(&id).await;
    }
    let id = format!("{}:crash", support::run_id());
    let b = support::broker().await;
    b.register_limit(&id, limits()).expect("valid");
    let mut child = Holder::spawn(&id);
    child.wait_for("held").await;

    // Every lease just renewed, more than a TTL after it was taken: no
    // slot is free, and the store says so (not an outage's refusal).
    child.wait_for(&format!("live {LIVE_ROUND}")).await;
    let a = b
        .try_acquire(&id, AcquireOptions::default())
        .await
        .expect("answers");
    let d = a.denial().expect("no slot is free while the holder lives");
    assert_eq!(
        (d.cause, d.dimension),
        (DenialCause::Exhausted, Dimension::MaxConcurrentRequests),
        "{d:?}"
    );

    child.kill();
    let killed = Instant::now();
    let mut got = Vec::new();
    while (got.len() as u64) < SLOTS {
        assert!(
            killed.elapsed() < BACK_WITHIN,
            "{} of {SLOTS} slots back {:?} after SIGKILL (lease TTL {TTL:?})",
            got.len(),
            killed.elapsed()
        );
        match b
            .try_acquire(&id, AcquireOptions::default())
            .await
            .expect("answers")
            .into_permit()
        {
            Some(p) => got.push(p),
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    println!(
        "all {SLOTS} slots back {:?} after SIGKILL (lease TTL {TTL:?})",
        killed.elapsed()
    );
}

/// The child's side: takes every slot, then renews by hand each
/// [`RENEW_EVERY`] and says so, until it is killed. It never returns, so
/// its test harness never reports the test.
async fn hold_until_killed(id: &str) -> ! {
    let b = support::broker().await;
    b.register_limit(id, limits()).expect("valid");
    let mut permits = Vec::new();
    for _ in 0..SLOTS {
        let p = b
            .try_acquire(id, AcquireOptions::default())
            .await
            .expect("answers");
        permits.push(p.into_permit().expect("granted"));
    }
    say("held");
    for round in 1..=CHILD_ROUNDS {
        tokio::time::sleep(RENEW_EVERY).await;
        for p in &mut permits {
            assert!(
                p.renew().await.expect("renews"),
                "round {round}: a lease was gone"
            );
        }
        // A parent that is gone closes the pipe: this panics and the child ends.
        say(&format!("live {round}"));
    }
    std::process::exit(1)
}

/// One line to the parent. The harness prints `test <name> ... ` without a
/// line break before the test runs, so the parent matches line ends.
fn say(what: &str) {
    println!("crash-child: {what}");
}

/// The child process, killed when dropped (a failing parent leaves nothing
/// behind), and the lines it writes.
struct Holder {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Holder {
    fn spawn(id: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
            .env(CHILD, id)
            // The child uses this process's server, not one of its own.
            .env("PRESSURE_REDIS_URL", support::redis_url())
            .stdout(Stdio::piped())
            // Its panic message, if any, shows with this test's output.
            .stderr(Stdio::inherit())
            .spawn()
            .expect("child starts");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits until the child says `what`.
    async fn wait_for(&mut self, what: &str) {
        let want = format!("crash-child: {what}");
        let deadline = Instant::now() + LINE_BOUND;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) if line.trim_end().ends_with(&want) => return,
                Ok(Some(_)) => {}
                Ok(None) => panic!(
                    "the child ended ({:?}) before it said {what:?}",
                    self.child.wait()
                ),
                Err(_) => panic!("the child did not say {what:?} within {LINE_BOUND:?}"),
            }
        }
    }

    /// SIGKILL, and waits until it is gone.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
