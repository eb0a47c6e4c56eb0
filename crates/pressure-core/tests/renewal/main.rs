//! The lease renewal task: one per broker, batching every live lease of a
//! resource into one backend call, on tokio's paused clock.

use pressure_core::clock::TokioClock;
use pressure_core::{
    AcquireOptions, Backend, BackendError, Counts, Decision, Demand, Grant, LimitSpec, Limits, MemoryBackend,
    Reserved, ResourceBroker,
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
    fn acquire_now(&self, h: &MemoryHandle, d: &Demand) -> Option<Result<Decision, BackendError>> {
        self.inner.acquire_now(h, d)
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
}

fn counting_broker() -> (ResourceBroker<Counting>, Counting) {
    let clock = Arc::new(TokioClock::new());
    let backend = Counting {
        inner: MemoryBackend::with_clock(clock.clone()),
        calls: Arc::default(),
        renewed: Arc::default(),
    };
    let b = ResourceBroker::builder(backend.clone()).clock(clock).build();
    (b, backend)
}

#[tokio::test(start_paused = true)]
async fn one_call_per_resource_renews_all_its_leases() {
    let (b, counting) = counting_broker();
    let ttl = Duration::from_millis(300);
    for id in ["a", "b"] {
        b.register_limit(id, Limits::default().max_concurrent_requests(100).lease_ttl(ttl))
            .expect("valid");
    }
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
