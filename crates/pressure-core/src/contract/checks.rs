//! The checks of the contract suite, one public async fn each.
//!
//! They run on real time against real stores (Redis counts by its own
//! clock), so no check asserts how fast the machine is: what must not
//! happen early is checked from below against the configured value, and
//! every upper bound is a deadline that only catches a hang (many times the
//! configured value), never a measure of speed.

use super::support::{admits, assert_never_fits, permit, take};
use super::Harness;
use crate::{
    AcquireOptions, Acquisition, Dimension, Error, Limits, Priority, QueueConfig, Request, Reserved,
    ResourceBroker, ResourceConfig, TaskError,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Deadline for something that happens within milliseconds on an idle
/// machine (a release delivered in the background, a slot coming back): it
/// only catches a hang.
const HANG: Duration = Duration::from_secs(10);

async fn usage<B: crate::Backend>(b: &ResourceBroker<B>, id: &str, dim: &str) -> u64 {
    let s = b.resource_stats(id).await.expect("registered");
    s.usage.get(dim).copied().unwrap_or(0)
}

/// A denial on one dimension consumes nothing on the others.
pub async fn multi_dimension_denial_consumes_nothing<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("atomic");
    b.register_limit(
        &id,
        Limits::default()
            .requests_per_minute(100)
            .tokens_per_minute(1_000)
            .max_concurrent_requests(10),
    )
    .expect("valid");
    let _first = take(&b, &id, AcquireOptions::default().tokens(900, 0)).await;
    assert!(_first.allowed());
    for _ in 0..5 {
        let d = take(&b, &id, AcquireOptions::default().tokens(150, 50)).await;
        assert!(!d.allowed());
        assert_eq!(d.denial().expect("denied").dimension, Dimension::TokensPerMinute);
    }
    assert_eq!(usage(&b, &id, "requestsPerMinute").await, 1);
    assert_eq!(usage(&b, &id, "tokensPerMinute").await, 900);
    assert_eq!(usage(&b, &id, "maxConcurrentRequests").await, 1);
    let fits = take(&b, &id, AcquireOptions::default().tokens(100, 0)).await;
    assert!(fits.allowed(), "the denials must not have consumed tokens");
}

/// `requestsPerHour` and `requestsPer24Hours` count like the short windows
/// and answer waits of their own length: the hour refuses the fourth of
/// three with a wait of about an hour, consuming nothing on the 24 hours;
/// the 24 hours refuses with a wait of about a day; `gcra` on an hour waits
/// one emission interval.
pub async fn hour_and_24_hour_windows_count_and_wait<H: Harness>(h: &H) {
    const HOUR: u64 = 3_600;
    let b = h.broker().await;
    let id = h.unique("hour");
    b.register_limit(
        &id,
        Limits::default().requests_per_hour(3).requests_per_24_hours(5),
    )
    .expect("valid");
    for _ in 0..3 {
        assert!(admits(&b, &id, AcquireOptions::default()).await);
    }
    let d = take(&b, &id, AcquireOptions::default()).await;
    let denial = d.denial().expect("the fourth of three per hour is refused");
    assert_eq!(denial.dimension, Dimension::RequestsPerHour);
    // The first admission leaves the sliding hour after 31 sub-windows of
    // 120 s from its own: more than 58 minutes from now, at most 62.
    let wait = denial.wait.as_secs();
    assert!((HOUR - 120..=HOUR + 120).contains(&wait), "wait {wait} s");
    assert_eq!(usage(&b, &id, "requestsPerHour").await, 3);
    assert_eq!(
        usage(&b, &id, "requestsPer24Hours").await,
        3,
        "a denial consumes nothing"
    );

    let day = h.unique("day");
    b.register_limit(&day, Limits::default().requests_per_24_hours(2))
        .expect("valid");
    for _ in 0..2 {
        assert!(admits(&b, &day, AcquireOptions::default()).await);
    }
    let d = take(&b, &day, AcquireOptions::default()).await;
    let denial = d.denial().expect("the third of two per 24 hours is refused");
    assert_eq!(denial.dimension, Dimension::RequestsPer24Hours);
    let wait = denial.wait.as_secs();
    assert!(
        (24 * HOUR - 2_880..=24 * HOUR + 2_880).contains(&wait),
        "wait {wait} s"
    );

    let gcra = h.unique("hour-gcra");
    b.register_limit(&gcra, Limits::default().requests_per_hour(3).gcra(None))
        .expect("valid");
    for _ in 0..3 {
        assert!(admits(&b, &gcra, AcquireOptions::default()).await);
    }
    let d = take(&b, &gcra, AcquireOptions::default()).await;
    let denial = d.denial().expect("the bucket of three is empty");
    assert_eq!(denial.dimension, Dimension::RequestsPerHour);
    // One emission interval (20 minutes), less the time the test took.
    let wait = denial.wait.as_secs();
    assert!((HOUR / 3 - 60..=HOUR / 3).contains(&wait), "wait {wait} s");
}

async fn exact_count<H: Harness>(h: &H, limits: Limits, n: u64, name: &str) {
    let b = h.broker().await;
    let id = h.unique(name);
    b.register_limit(&id, limits).expect("valid");
    let tasks: Vec<_> = (0..n * 2)
        .map(|_| {
            let b = b.clone();
            let id = id.clone();
            tokio::spawn(async move {
                let a = b
                    .try_acquire(&id, AcquireOptions::default())
                    .await
                    .expect("answers");
                // Keep the permit; rate limits do not depend on it.
                a.allowed()
            })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += u64::from(t.await.expect("task"));
    }
    assert_eq!(allowed, n, "exactly the limit is admitted");
    let s = b.resource_stats(&id).await.expect("registered");
    assert_eq!(s.allowed, n);
    assert_eq!(s.denied, n);
}

/// `window`: a concurrent burst of 2N against N per minute admits exactly N.
pub async fn window_counts_exactly_under_concurrency<H: Harness>(h: &H) {
    exact_count(h, Limits::default().requests_per_minute(40), 40, "wexact").await;
}

/// `gcra`: a concurrent burst of 2N against a bucket of N admits exactly N
/// (the refill of one unit takes 6 s, longer than the test).
pub async fn gcra_counts_exactly_under_concurrency<H: Harness>(h: &H) {
    exact_count(
        h,
        Limits::default().requests_per_minute(10).gcra(None),
        10,
        "gexact",
    )
    .await;
}

/// Exhausts `burst` grants, then retries at the denial's wait time (which
/// must be positive and at most `max_wait`): the retry succeeds.
async fn retry_at_wait_time<H: Harness>(h: &H, limits: Limits, burst: usize, max_wait: Duration, name: &str) {
    let b = h.broker().await;
    let id = h.unique(name);
    b.register_limit(&id, limits).expect("valid");
    for _ in 0..burst {
        assert!(admits(&b, &id, AcquireOptions::default()).await);
    }
    let d = take(&b, &id, AcquireOptions::default()).await;
    assert!(!d.allowed());
    let wait = d.wait_time();
    assert!(wait > Duration::ZERO && wait <= max_wait, "wait {wait:?}");
    tokio::time::sleep(wait).await;
    assert!(admits(&b, &id, AcquireOptions::default()).await);
}

/// `window`: retrying at the denial's wait time succeeds.
pub async fn window_retry_at_wait_time_succeeds<H: Harness>(h: &H) {
    let limits = Limits::default().requests_per_second(5);
    retry_at_wait_time(h, limits, 5, Duration::from_millis(1_100), "wretry").await;
}

/// `window`: a burst that exhausts the limit inside one sub-window is
/// refused with a wait of at most the window (the burst leaves it a window
/// after its last admission, not a window after its sub-window ends), and
/// no shorter than the window less the time the burst took; retried at
/// that wait, the demand is admitted.
pub async fn window_burst_wait_is_at_most_the_window<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("wburst");
    b.register_limit(&id, Limits::default().requests_per_minute(2))
        .expect("valid");
    let t0 = Instant::now();
    for _ in 0..2 {
        assert!(admits(&b, &id, AcquireOptions::default()).await);
    }
    let d = take(&b, &id, AcquireOptions::default()).await;
    let elapsed = t0.elapsed();
    let wait = d.wait_time();
    let minute = Duration::from_secs(60);
    assert!(!d.allowed());
    assert!(wait <= minute, "a wait for a minute window of {wait:?}");
    assert!(
        wait + elapsed + Duration::from_millis(2) >= minute,
        "wait {wait:?} after {elapsed:?}"
    );

    let id = h.unique("wburst-retry");
    b.register_limit(&id, Limits::default().requests_per_second(2))
        .expect("valid");
    for _ in 0..2 {
        assert!(admits(&b, &id, AcquireOptions::default()).await);
    }
    let d = take(&b, &id, AcquireOptions::default()).await;
    assert!(!d.allowed());
    let wait = d.wait_time();
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(1),
        "wait {wait:?}"
    );
    tokio::time::sleep(wait).await;
    assert!(admits(&b, &id, AcquireOptions::default()).await);
}

/// `gcra`: retrying at the denial's wait time succeeds.
pub async fn gcra_retry_at_wait_time_succeeds<H: Harness>(h: &H) {
    let limits = Limits::default().requests_per_second(10).gcra(Some(2));
    retry_at_wait_time(h, limits, 2, Duration::from_millis(100), "gretry").await;
}

/// `gcra`: after a burst, the wait equals one emission interval minus the
/// time that passed, to within the clock's and the store's resolution.
pub async fn gcra_wait_time_is_exact<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("gexactwait");
    b.register_limit(&id, Limits::default().requests_per_minute(1).gcra(None))
        .expect("valid");
    let t0 = Instant::now();
    assert!(admits(&b, &id, AcquireOptions::default()).await);
    let d = take(&b, &id, AcquireOptions::default()).await;
    let elapsed = t0.elapsed();
    let wait = d.wait_time();
    let expected = Duration::from_secs(60);
    assert!(wait <= expected, "wait {wait:?}");
    assert!(
        wait + elapsed + Duration::from_millis(2) >= expected,
        "wait {wait:?} after {elapsed:?}"
    );
}

/// Concurrency: a released slot is reusable, releases are idempotent and
/// never free someone else's slot; a denied acquisition's release is a no-op.
pub async fn concurrency_release_is_exact_and_idempotent<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("conc");
    b.register_limit(&id, Limits::default().max_concurrent_requests(2))
        .expect("valid");
    let mut a = take(&b, &id, AcquireOptions::default()).await;
    let c = take(&b, &id, AcquireOptions::default()).await;
    assert!(a.allowed() && c.allowed());
    let mut denied = take(&b, &id, AcquireOptions::default()).await;
    assert!(!denied.allowed());
    assert!(denied.wait_time() > Duration::ZERO);
    denied.release().await.expect("no-op");
    a.release().await.expect("release");
    a.release().await.expect("second release is a no-op");
    assert_eq!(usage(&b, &id, "maxConcurrentRequests").await, 1);
    drop(a);
    assert_eq!(
        usage(&b, &id, "maxConcurrentRequests").await,
        1,
        "drop after release frees nothing more"
    );
    let again = take(&b, &id, AcquireOptions::default()).await;
    assert!(again.allowed());
    assert!(!admits(&b, &id, AcquireOptions::default()).await);
    drop(c);
    drop(again);
    // Drop releases; with a remote store it is delivered in the background.
    let deadline = Instant::now() + HANG;
    while usage(&b, &id, "maxConcurrentRequests").await != 0 {
        assert!(Instant::now() < deadline, "leases not returned after drop");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(b.resource_stats(&id).await.expect("registered").active, Some(0));
}

/// A lease whose holder is gone gives its slot back after the TTL: the
/// broker that took it is dropped (as when its process dies) with the permit
/// never released (`mem::forget`), so nothing renews the lease any more.
///
/// Not before the TTL: the slot comes back no earlier than the TTL after
/// the lease was asked for (the store starts the TTL at the grant, which is
/// later), so an answer that frees it earlier fails however slow the
/// machine. The upper bound only catches a lease that never expires.
pub async fn abandoned_lease_is_reclaimed_after_ttl<H: Harness>(h: &H) {
    const TTL: Duration = Duration::from_millis(300);
    // Clock resolution and the store's clock against this process's (Redis
    // counts by its own).
    const SLACK: Duration = Duration::from_millis(30);
    let b = h.broker().await;
    let id = h.unique("abandon");
    b.register_limit(&id, Limits::default().max_concurrent_requests(1).lease_ttl(TTL))
        .expect("valid");
    let handle = b.resource(&id).expect("registered");
    let t0 = Instant::now();
    let p = take(&b, &id, AcquireOptions::default()).await;
    assert!(p.allowed());
    std::mem::forget(p);
    drop(b);
    let deadline = t0 + HANG;
    let mut denied = 0u32;
    loop {
        let a = handle
            .try_acquire(AcquireOptions::default())
            .await
            .expect("answers");
        // Read after the answer: the store decided no later than this.
        let at = t0.elapsed();
        if a.allowed() {
            assert!(
                at + SLACK >= TTL,
                "the slot came back {at:?} after the lease was taken, before its {TTL:?} TTL \
                 ({denied} denials before)"
            );
            break;
        }
        denied += 1;
        assert!(
            Instant::now() < deadline,
            "abandoned lease never expired: still held after {at:?} (TTL {TTL:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A permit held much longer than its lease TTL keeps its slot: the broker
/// renews every live lease, so a cap of 2 with two holders denies a third
/// throughout; when the holders go, the slots come back.
pub async fn held_permits_keep_their_slots_past_the_ttl<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("hold");
    b.register_limit(
        &id,
        Limits::default()
            .max_concurrent_requests(2)
            .lease_ttl(Duration::from_millis(300)),
    )
    .expect("valid");
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(permit(&b, &id, AcquireOptions::default()).await);
    }
    assert_eq!(b.live_leases(), 2);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1_500) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let third = take(&b, &id, AcquireOptions::default()).await;
        assert!(
            !third.allowed(),
            "a third permit was admitted after {:?}: the held leases expired",
            t0.elapsed()
        );
    }
    assert_eq!(usage(&b, &id, "maxConcurrentRequests").await, 2);
    assert!(held[0].renew().await.expect("renew"), "the lease is still held");
    drop(held);
    assert_eq!(b.live_leases(), 0, "dropped permits leave the renewer");
    let deadline = Instant::now() + HANG;
    while !admits(&b, &id, AcquireOptions::default()).await {
        assert!(Instant::now() < deadline, "slots not back after the holders left");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn reconcile_both_ways<H: Harness>(h: &H, limits: Limits, name: &str) {
    let b = h.broker().await;
    let id = h.unique(name);
    b.register_limit(&id, limits).expect("valid");
    let mut p = permit(&b, &id, AcquireOptions::default().tokens(100, 400)).await;
    assert_eq!(usage(&b, &id, "tokensPerMinute").await, 500);
    p.reconcile(Reserved {
        requests: 1,
        input_tokens: 100,
        output_tokens: 50,
        cost_micro_usd: 0,
    })
    .await
    .expect("reconcile down");
    let used = usage(&b, &id, "tokensPerMinute").await;
    assert!((149..=150).contains(&used), "after refund {used}");
    assert!(admits(&b, &id, AcquireOptions::default().tokens(800, 0)).await);
    p.reconcile(Reserved {
        requests: 1,
        input_tokens: 100,
        output_tokens: 100,
        cost_micro_usd: 0,
    })
    .await
    .expect("reconcile up");
    let used = usage(&b, &id, "tokensPerMinute").await;
    assert!((999..=1_000).contains(&used), "after correction up {used}");
    assert!(!admits(&b, &id, AcquireOptions::default().tokens(10, 0)).await);
}

/// Reconcile corrects a `window` reservation up and down.
pub async fn reconcile_moves_usage_both_ways_window<H: Harness>(h: &H) {
    reconcile_both_ways(h, Limits::default().tokens_per_minute(1_000), "recw").await;
}

/// Reconcile corrects a `gcra` reservation up and down.
pub async fn reconcile_moves_usage_both_ways_gcra<H: Harness>(h: &H) {
    reconcile_both_ways(h, Limits::default().tokens_per_minute(1_000).gcra(None), "recg").await;
}

async fn huge_reconciles_fill<H: Harness>(h: &H, limits: Limits, name: &str) {
    let b = h.broker().await;
    let id = h.unique(name);
    b.register_limit(&id, limits).expect("valid");
    let mut held = Vec::new();
    for n in [100, 100, 50] {
        held.push(permit(&b, &id, AcquireOptions::default().tokens(n, 0)).await);
    }
    let tokens = |input: u64, output: u64| Reserved {
        requests: 1,
        input_tokens: input,
        output_tokens: output,
        cost_micro_usd: 0,
    };
    // `u64::MAX` once (read as −1 when cast to i64), `2^63` on two permits
    // (wraps a signed sum), both counts at `u64::MAX` (overflows their
    // sum), and another holder's refund while the count is pinned.
    for (step, (i, actual)) in [
        (0, tokens(u64::MAX, 0)),
        (0, tokens(1 << 63, 0)),
        (1, tokens(1 << 63, 0)),
        (0, tokens(u64::MAX, u64::MAX)),
        (2, tokens(0, 0)),
    ]
    .into_iter()
    .enumerate()
    {
        held[i].reconcile(actual).await.expect("reconcile");
        let used = usage(&b, &id, "tokensPerMinute").await;
        assert!(
            used >= 1_000,
            "step {step}: usage {used} after reconciling {actual:?}"
        );
        assert!(
            !admits(&b, &id, AcquireOptions::default().tokens(1, 0)).await,
            "step {step}: a token admitted after reconciling {actual:?}"
        );
    }
}

/// Reconciling counts near `u64::MAX` fills a `window` (saturating, never
/// wrapping to a refund), and a later refund of another holder leaves it
/// full: no holder can erase the usage by overflowing it.
pub async fn huge_reconcile_fills_never_wraps_window<H: Harness>(h: &H) {
    huge_reconciles_fill(h, Limits::default().tokens_per_minute(1_000), "hugew").await;
}

/// Reconciling counts near `u64::MAX` fills a `gcra` bucket, as for a
/// `window`.
pub async fn huge_reconcile_fills_never_wraps_gcra<H: Harness>(h: &H) {
    huge_reconciles_fill(h, Limits::default().tokens_per_minute(1_000).gcra(None), "hugeg").await;
}

/// A demand larger than a limit can ever admit is refused at once, in both
/// strategies.
pub async fn oversized_demand_is_refused_at_once<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("oversized");
    b.register(&id, ResourceConfig::new(Limits::default().tokens_per_minute(100)))
        .expect("valid");
    assert_never_fits(&b, &id, AcquireOptions::default().tokens(101, 0), 101, 100).await;
    // Refused, not queued: a request queued for capacity that never comes
    // waits out the queue's max wait; this one is answered in a small part
    // of it (a bound that catches the wait, not a slow machine).
    let max_wait = QueueConfig::default().max_wait();
    let r = tokio::time::timeout(
        max_wait / 10,
        b.enqueue(Request::new(&id, |_| async { Ok::<_, TaskError<()>>(()) }).tokens(60, 60)),
    )
    .await
    .unwrap_or_else(|_| panic!("queued instead of refused: no answer within {:?}", max_wait / 10));
    assert!(
        matches!(r, Err(crate::QueueError::Broker(Error::DemandTooLarge { .. }))),
        "{r:?}"
    );
    let s = b.resource_stats(&id).await.expect("registered");
    assert_eq!(s.queued, Some(0), "nothing left waiting: {s:?}");
}

/// Unknown ids are a typed error.
pub async fn unknown_resource_is_an_error<H: Harness>(h: &H) {
    let b = h.broker().await;
    let e = b
        .try_acquire(&h.unique("nope"), AcquireOptions::default())
        .await
        .expect_err("unknown");
    assert!(matches!(e, Error::UnknownResource(_)));
}

/// Batch callers fill at most `1 − batchHeadroom` of a limit; interactive
/// callers get the rest.
pub async fn batch_is_confined_below_headroom<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("headroom");
    let queue = QueueConfig {
        batch_headroom: 0.5,
        ..QueueConfig::default()
    };
    b.register(
        &id,
        ResourceConfig::new(Limits::default().requests_per_minute(10)).queue(queue),
    )
    .expect("valid");
    let batch = AcquireOptions::default().priority(Priority::Batch);
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(take(&b, &id, batch).await);
    }
    assert_eq!(held.iter().filter(|a| a.allowed()).count(), 5);
    for _ in 0..10 {
        held.push(take(&b, &id, AcquireOptions::default()).await);
    }
    assert_eq!(held.iter().filter(|a| a.allowed()).count(), 10);
}

/// Many tasks on a multi-threaded runtime: rates never over-admit,
/// concurrency never exceeds its limit, and every permit comes back.
pub async fn stress_never_over_admits<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("stress");
    b.register_limit(
        &id,
        Limits::default()
            .requests_per_minute(300)
            .max_concurrent_requests(4),
    )
    .expect("valid");
    let held = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (b, id, held, peak) = (b.clone(), id.clone(), held.clone(), peak.clone());
            tokio::spawn(async move {
                let mut allowed = 0u64;
                for _ in 0..60 {
                    let a = b
                        .try_acquire(&id, AcquireOptions::default())
                        .await
                        .expect("answers");
                    if let Acquisition::Granted(mut p) = a {
                        allowed += 1;
                        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        held.fetch_sub(1, Ordering::SeqCst);
                        p.release().await.expect("release");
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.expect("task");
    }
    assert!(allowed <= 300, "over-admitted {allowed}");
    assert!(allowed >= 4, "admitted almost nothing: {allowed}");
    assert!(
        peak.load(Ordering::SeqCst) <= 4,
        "peak {}",
        peak.load(Ordering::SeqCst)
    );
    let s = b.resource_stats(&id).await.expect("registered");
    assert_eq!(s.active, Some(0));
    assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&allowed));
}

/// Two brokers (two processes, each with its own backend instance): on a
/// shared store they enforce one limit together; on a process-local store
/// each counts alone. The count is exact either way.
pub async fn two_brokers_share_one_limit<H: Harness>(h: &H) {
    let (b1, b2) = (h.broker().await, h.broker().await);
    let id = h.unique("fleet");
    for b in [&b1, &b2] {
        b.register_limit(&id, Limits::default().requests_per_minute(20))
            .expect("valid");
    }
    let mut allowed = 0;
    for i in 0..40 {
        let b = if i % 2 == 0 { &b1 } else { &b2 };
        allowed += u64::from(admits(b, &id, AcquireOptions::default()).await);
    }
    if h.shared_store() {
        assert_eq!(usage(&b1, &id, "requestsPerMinute").await, 20);
        assert_eq!(usage(&b2, &id, "requestsPerMinute").await, 20);
        assert_eq!(allowed, 20, "one limit across the fleet");
    } else {
        assert_eq!(allowed, 40, "independent limits per process");
    }
}

/// Enqueues `n` tasks at once on `id` and returns when each started, sorted,
/// measured from just before the first was enqueued.
async fn start_times<B: crate::Backend>(b: &ResourceBroker<B>, id: &str, n: usize) -> Vec<Duration> {
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (b, id) = (b.clone(), id.to_owned());
            tokio::spawn(async move {
                b.enqueue(Request::new(&id, |_| async {
                    Ok::<_, TaskError<()>>(Instant::now())
                }))
                .await
                .expect("served")
                .value
            })
        })
        .collect();
    let mut starts = Vec::new();
    for t in tasks {
        starts.push(t.await.expect("task").duration_since(t0));
    }
    starts.sort();
    starts
}

/// queue+execute over `gcra`: every task runs, and start times respect the
/// bucket (at most `C + d/T` in any span `d`) — each waiter booked a slot.
pub async fn enqueue_paces_gcra_by_booking<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("qgcra");
    b.register(
        &id,
        ResourceConfig::new(Limits::default().requests_per_second(20).gcra(Some(5))),
    )
    .expect("valid");
    let starts = start_times(&b, &id, 15).await;
    // 5 at once, then one per 50 ms: the 15th not before ~500 ms (and not
    // hung: the bound is many times that).
    assert!(starts[14] >= Duration::from_millis(480), "{starts:?}");
    assert!(starts[14] < HANG, "{starts:?}");
    for (i, s) in starts.iter().enumerate() {
        let allowed_by = 5 + (s.as_millis() as usize + 5) / 50;
        assert!(i < allowed_by, "start #{i} at {s:?} ran early");
    }
    assert_eq!(b.resource_stats(&id).await.expect("registered").queued, Some(0));
}

/// queue+execute over `window`: the first N run in the first window,
/// callers beyond N wait for the window and then all run.
pub async fn enqueue_waits_for_window_capacity<H: Harness>(h: &H) {
    const WINDOW: Duration = Duration::from_secs(1);
    // The window opens at the first grant, after the start of the
    // measurement; this covers the store's clock against this process's.
    const SLACK: Duration = Duration::from_millis(100);
    let b = h.broker().await;
    let id = h.unique("qwindow");
    b.register(&id, ResourceConfig::new(Limits::default().requests_per_second(5)))
        .expect("valid");
    let starts = start_times(&b, &id, 8).await;
    // The boundary is the window's end: five start before it (they take
    // one store call each, far less than a window however loaded the
    // machine), the sixth not before it.
    assert!(starts[4] < WINDOW - SLACK, "the first 5 waited: {starts:?}");
    assert!(starts[5] >= WINDOW - SLACK, "the 6th ran early: {starts:?}");
    assert!(starts[7] < HANG, "{starts:?}");
}

/// queue+execute over concurrency: a waiter runs as soon as a holder
/// releases; at most the limit run at once.
pub async fn enqueue_waits_for_concurrency_release<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("qconc");
    b.register(
        &id,
        ResourceConfig::new(Limits::default().max_concurrent_requests(2)),
    )
    .expect("valid");
    let running = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (b, id, running, peak) = (b.clone(), id.clone(), running.clone(), peak.clone());
            tokio::spawn(async move {
                b.enqueue(Request::new(&id, move |_| {
                    let (running, peak) = (running.clone(), peak.clone());
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, TaskError<()>>(())
                    }
                }))
                .await
                .expect("served")
            })
        })
        .collect();
    let t0 = Instant::now();
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    // Four rounds of 30 ms. Woken by the releases (or, at worst, a
    // denial's 100 ms retry hint), never by the holders' leases expiring:
    // that would take a lease TTL per round, each longer than this bound.
    assert!(
        HANG < crate::DEFAULT_LEASE_TTL && t0.elapsed() < HANG,
        "waiters woke late: {:?}",
        t0.elapsed()
    );
    let s = b.resource_stats(&id).await.expect("registered");
    assert_eq!(s.active, Some(0));
    assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&0));
}
