//! The lease renewal task: one per broker, batching every live lease of a
//! resource into one backend call, on tokio's paused clock.

use pressure_core::clock::{Clock, TokioClock};
use pressure_core::{
    AcquireOptions, Backend, BackendError, Counts, Decision, Demand, Grant, LimitSpec, Limits, MemoryBackend,
    NestedDecision, Reserved, ResourceBroker,
};
use pressure_core::{MemoryHandle, Usage};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The memory backend, counting renewal calls and the leases they carried.
#[derive(Debug, Clone)]
struct Counting {
    inner: MemoryBackend,
    calls: Arc<AtomicUsize>,
    renewed: Arc<AtomicU64>,
    /// Whether it says that its state is the memory backend's
    /// ([`Backend::in_process`]), as a backend chosen at run time does.
    in_process: bool,
}

impl Backend for Counting {
    type Handle = MemoryHandle;

    fn attach(&self, resource: &str, spec: Arc<LimitSpec>) -> Result<MemoryHandle, BackendError> {
        self.inner.attach(resource, spec)
    }
    fn reattach(
        &self,
        resource: &str,
        old: &MemoryHandle,
        spec: Arc<LimitSpec>,
    ) -> Result<MemoryHandle, BackendError> {
        self.inner.reattach(resource, old, spec)
    }
    fn acquire_now_if_local(&self, h: &MemoryHandle, d: &Demand) -> Option<Result<Decision, BackendError>> {
        self.inner.acquire_now_if_local(h, d)
    }
    fn counts(&self, h: &MemoryHandle) -> Counts {
        self.inner.counts(h)
    }
    async fn acquire(&self, h: &MemoryHandle, d: &Demand) -> Result<Decision, BackendError> {
        self.inner.acquire(h, d).await
    }
    async fn release(&self, h: &MemoryHandle, g: &Grant) -> Result<(), BackendError> {
        self.inner.release(h, g).await
    }
    fn release_detached(&self, h: &MemoryHandle, g: Grant) {
        self.inner.release_detached(h, g)
    }
    async fn renew(&self, h: &MemoryHandle, g: &Grant) -> Result<bool, BackendError> {
        self.inner.renew(h, g).await
    }
    async fn renew_many(&self, h: &MemoryHandle, grants: &[Grant]) -> Result<Vec<bool>, BackendError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.renewed.fetch_add(grants.len() as u64, Ordering::Relaxed);
        self.inner.renew_many(h, grants).await
    }
    async fn reconcile(&self, h: &MemoryHandle, g: &Grant, a: &Reserved) -> Result<(), BackendError> {
        self.inner.reconcile(h, g, a).await
    }
    async fn usage(&self, h: &MemoryHandle) -> Result<Usage, BackendError> {
        self.inner.usage(h).await
    }
    fn at_rest(&self, h: &MemoryHandle) -> bool {
        self.inner.at_rest(h)
    }
    async fn acquire_nested(
        &self,
        levels: &[(&MemoryHandle, &Demand)],
    ) -> Result<NestedDecision, BackendError> {
        self.inner.acquire_nested(levels).await
    }
    fn in_process<'a>(&'a self, h: &'a MemoryHandle) -> Option<(&'a MemoryBackend, &'a MemoryHandle)> {
        self.in_process.then_some((&self.inner, h))
    }
}

fn counting_broker() -> (ResourceBroker<Counting>, Counting) {
    counting_broker_in_process(false)
}

fn counting_broker_in_process(in_process: bool) -> (ResourceBroker<Counting>, Counting) {
    let clock = Arc::new(TokioClock::new());
    let backend = Counting {
        inner: MemoryBackend::with_clock(clock.clone()),
        calls: Arc::default(),
        renewed: Arc::default(),
        in_process,
    };
    let b = ResourceBroker::builder(backend.clone()).clock(clock).build();
    (b, backend)
}

/// Registers resources `a` and `b`, each with `slots` concurrency slots
/// leased for `ttl`.
fn register_both<B: Backend>(b: &ResourceBroker<B>, slots: u64, ttl: Duration) {
    for id in ["a", "b"] {
        b.register_limit(
            id,
            Limits::default().max_concurrent_requests(slots).lease_ttl(ttl),
        )
        .expect("valid");
    }
}

/// 50 held permits on each of `a` and `b` (100 live leases).
async fn hold_fifty_each<B: Backend>(b: &ResourceBroker<B>) -> Vec<pressure_core::Permit<B>> {
    let mut held = Vec::new();
    for id in ["a", "b"] {
        for _ in 0..50 {
            held.push(
                b.try_acquire(id, AcquireOptions::default())
                    .await
                    .expect("answers")
                    .into_permit()
                    .expect("granted"),
            );
        }
    }
    assert_eq!(b.live_leases(), 100);
    held
}

#[tokio::test(start_paused = true)]
async fn one_call_per_resource_renews_all_its_leases() {
    let (b, counting) = counting_broker();
    let ttl = Duration::from_millis(300);
    register_both(&b, 100, ttl);
    let held = hold_fifty_each(&b).await;
    // Held ten TTLs: every lease survives, renewed a third of a TTL apart.
    tokio::time::sleep(ttl * 10).await;
    for id in ["a", "b"] {
        let s = b.resource_stats(id).await.expect("registered");
        assert_eq!(
            s.usage.get("maxConcurrentRequests"),
            Some(&50),
            "{id}: leases kept"
        );
    }
    let calls = counting.calls.load(Ordering::Relaxed);
    let renewed = counting.renewed.load(Ordering::Relaxed);
    // Two resources, one call each about every TTL/3: ~60 calls, never one
    // per lease (that would be ~3000).
    assert!((40..=80).contains(&calls), "{calls} renewal calls");
    assert_eq!(
        renewed,
        calls as u64 * 50,
        "each call carries all 50 leases of its resource"
    );
    drop(held);
    assert_eq!(b.live_leases(), 0);
    // Nothing left: the task renews nothing more.
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(counting.calls.load(Ordering::Relaxed), calls);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_broker_stops_renewing() {
    let (b, counting) = counting_broker();
    let ttl = Duration::from_millis(300);
    b.register_limit("d", Limits::default().max_concurrent_requests(1).lease_ttl(ttl))
        .expect("valid");
    let handle = b.resource("d").expect("registered");
    let p = b
        .try_acquire("d", AcquireOptions::default())
        .await
        .expect("answers");
    assert!(p.allowed());
    tokio::time::sleep(ttl * 2).await;
    assert!(
        counting.calls.load(Ordering::Relaxed) > 0,
        "renewed while the broker lived"
    );
    assert!(!handle
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    // The broker goes (its process "died"), the permit is never released.
    std::mem::forget(p);
    drop(b);
    let calls = counting.calls.load(Ordering::Relaxed);
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(
        counting.calls.load(Ordering::Relaxed),
        calls,
        "no renewal after the broker is gone"
    );
    assert!(
        handle
            .try_acquire(AcquireOptions::default())
            .await
            .expect("answers")
            .allowed(),
        "the abandoned lease expired"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_ttl_changed_by_set_limits_is_used_for_renewal() {
    let (b, _) = counting_broker();
    b.register_limit(
        "t",
        Limits::default()
            .max_concurrent_requests(1)
            .lease_ttl(Duration::from_secs(30)),
    )
    .expect("valid");
    let _p = b
        .try_acquire("t", AcquireOptions::default())
        .await
        .expect("answers")
        .into_permit()
        .expect("granted");
    b.set_limits(
        "t",
        Limits::default()
            .max_concurrent_requests(1)
            .lease_ttl(Duration::from_millis(300)),
    )
    .expect("valid");
    // The held lease keeps its slot past the new, short TTL too.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!b
            .try_acquire("t", AcquireOptions::default())
            .await
            .expect("answers")
            .allowed());
    }
}

/// The in-process backend keeps its leases as the renewer's book (the
/// broker records nothing per lease): every held lease is renewed all the
/// same, and the broker's count of live leases follows the permits.
#[tokio::test(start_paused = true)]
async fn the_memory_backend_renews_the_leases_it_keeps() {
    let clock = Arc::new(TokioClock::new());
    let b = ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock)
        .build();
    let ttl = Duration::from_millis(300);
    register_both(&b, 50, ttl);
    let mut held = hold_fifty_each(&b).await;
    tokio::time::sleep(ttl * 10).await;
    for id in ["a", "b"] {
        let s = b.resource_stats(id).await.expect("registered");
        assert_eq!(
            s.usage.get("maxConcurrentRequests"),
            Some(&50),
            "{id}: leases kept"
        );
        assert!(
            !b.try_acquire(id, AcquireOptions::default())
                .await
                .expect("answers")
                .allowed(),
            "{id}: full"
        );
    }
    assert!(held[0].renew().await.expect("renews"), "still held");
    // Half the holders go: their slots come back at once, the rest stay.
    held.truncate(50);
    assert_eq!(b.live_leases(), 50);
    tokio::time::sleep(ttl * 3).await;
    let a = b.resource_stats("a").await.expect("registered");
    let bb = b.resource_stats("b").await.expect("registered");
    assert_eq!(a.usage.get("maxConcurrentRequests"), Some(&50));
    assert_eq!(bb.usage.get("maxConcurrentRequests"), Some(&0));
    drop(held);
    assert_eq!(b.live_leases(), 0);
    // The resources leave the renewer's list, and come back with a lease.
    tokio::time::sleep(ttl * 3).await;
    let again = b
        .try_acquire("a", AcquireOptions::default())
        .await
        .expect("answers")
        .into_permit()
        .expect("granted");
    tokio::time::sleep(ttl * 5).await;
    let a = b.resource_stats("a").await.expect("registered");
    assert_eq!(a.usage.get("maxConcurrentRequests"), Some(&1), "renewed again");
    drop(again);
    assert_eq!(b.live_leases(), 0);
}

/// Leases taken before and after a change of limits live in one state
/// (every version of the resource shares it): counted once, all renewed,
/// with the newest TTL.
#[tokio::test(start_paused = true)]
async fn leases_across_a_change_of_limits_are_counted_once() {
    let clock = Arc::new(TokioClock::new());
    let b = ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock)
        .build();
    let ttl = Duration::from_millis(300);
    b.register_limit("v", Limits::default().max_concurrent_requests(10).lease_ttl(ttl))
        .expect("valid");
    let take = || async {
        b.try_acquire("v", AcquireOptions::default())
            .await
            .expect("answers")
            .into_permit()
            .expect("granted")
    };
    let mut held = vec![take().await, take().await, take().await];
    b.set_limits(
        "v",
        Limits::default().max_concurrent_requests(5).lease_ttl(ttl / 2),
    )
    .expect("valid");
    held.push(take().await);
    held.push(take().await);
    assert_eq!(b.live_leases(), 5);
    tokio::time::sleep(ttl * 10).await;
    let s = b.resource_stats("v").await.expect("registered");
    assert_eq!(s.usage.get("maxConcurrentRequests"), Some(&5));
    assert!(!b
        .try_acquire("v", AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    drop(held);
    assert_eq!(b.live_leases(), 0);
}

/// Stress for the race the in-process book must not lose: a resource
/// leaves the renewer's list when it has no lease, while other threads take
/// its first lease again (the two interleavings are forced step by step in
/// `renewal`'s unit tests). Threads take and drop permits as fast as they
/// can (the resource's lease count goes through zero again and again)
/// while each also holds one permit for several TTLs: every held lease
/// must still be held at the end, i.e. its resource was never left off the
/// list while it had a lease.
#[test]
fn a_held_lease_is_never_left_unrenewed_while_others_come_and_go() {
    const THREADS: usize = 3;
    const ROUNDS: usize = 3;
    // Long enough that a loaded machine's scheduling delays (the task is
    // due every third of it) cannot expire a lease by themselves.
    let ttl = Duration::from_millis(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let _in_rt = rt.enter();
    let b = ResourceBroker::new();
    for i in 0..THREADS {
        b.register_limit(
            format!("r{i}"),
            Limits::default().max_concurrent_requests(4).lease_ttl(ttl),
        )
        .expect("valid");
    }
    let lost = std::sync::atomic::AtomicUsize::new(0);
    let clock = pressure_core::clock::MonotonicClock::new();
    std::thread::scope(|s| {
        for i in 0..THREADS {
            let (b, lost, clock, rt) = (&b, &lost, &clock, rt.handle().clone());
            s.spawn(move || {
                let _in_rt = rt.enter();
                let h = b.resource(&format!("r{i}")).expect("registered");
                for _ in 0..ROUNDS {
                    // Through zero many times, then one held for 3 TTLs
                    // while the count keeps going through one and two.
                    for _ in 0..2_000 {
                        drop(h.try_acquire_now(AcquireOptions::default()).expect("answers"));
                    }
                    let mut kept = h
                        .try_acquire_now(AcquireOptions::default())
                        .expect("answers")
                        .into_permit()
                        .expect("granted");
                    let until = clock.now_nanos() + 3 * ttl.as_nanos() as u64;
                    while clock.now_nanos() < until {
                        drop(h.try_acquire_now(AcquireOptions::default()).expect("answers"));
                        std::thread::yield_now();
                    }
                    if !futures::executor::block_on(kept.renew()).expect("renews") {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(lost.load(Ordering::Relaxed), 0, "held leases expired unrenewed");
    assert_eq!(b.live_leases(), 0);
}

/// A backend that wraps the memory backend and says so
/// ([`Backend::in_process`], as the gateway's run-time choice does) has its
/// leases renewed in place, never through `renew_many`, and they are kept
/// all the same; a dropped broker still stops renewing them.
#[tokio::test(start_paused = true)]
async fn a_wrapped_memory_backend_renews_in_place() {
    let (b, counting) = counting_broker_in_process(true);
    let ttl = Duration::from_millis(300);
    b.register_limit("w", Limits::default().max_concurrent_requests(3).lease_ttl(ttl))
        .expect("valid");
    let handle = b.resource("w").expect("registered");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            handle
                .try_acquire(AcquireOptions::default())
                .await
                .expect("answers")
                .into_permit()
                .expect("granted"),
        );
    }
    assert_eq!(b.live_leases(), 3);
    tokio::time::sleep(ttl * 10).await;
    assert!(!handle
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    assert_eq!(counting.calls.load(Ordering::Relaxed), 0, "renewed in place");
    for p in held {
        std::mem::forget(p);
    }
    drop(b);
    assert!(!handle
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    tokio::time::sleep(ttl * 2).await;
    let back = handle
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers");
    assert!(back.allowed(), "the abandoned leases expired");
}
