//! Fleet-wide breakers on the llm side (`BreakerRegistry::fleet`): two
//! registries — two instances — on one in-memory shared store that follows
//! `pressure_core::shared_breaker`'s contract (the Redis one is tested in
//! pressure-redis and end to end in pressure-chaos). What is checked here is
//! the local half: learning openings and closings from the fleet, asking
//! the fleet for probe slots, and the fallback when the store is down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;
use pressure_core::clock::{Clock, TokioClock};
use pressure_core::shared_breaker::{
    CircuitRules, OutcomeCounts, ProbeGrant, ProbeOutcome, SharedBreakerStore, SharedCircuit, SharedState,
};
use pressure_core::BackendError;
use pressure_llm::breaker::{BreakerConfig, BreakerRegistry, State, TransitionReason};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The shared state, kept simply: no buckets (the window is every call
/// since the last transition).
#[derive(Debug, Default)]
struct Inner {
    open: bool,
    epoch: u64,
    until: Option<Instant>,
    granted: u32,
    successes: u32,
    window: OutcomeCounts,
}

#[derive(Debug, Default)]
struct FakeStore {
    inner: Mutex<Inner>,
    down: AtomicBool,
}

impl Inner {
    fn state(&self) -> SharedState {
        match (self.open, self.until) {
            (true, Some(u)) if Instant::now() < u => SharedState::Open,
            (true, _) => SharedState::HalfOpen,
            _ => SharedState::Closed,
        }
    }

    fn circuit(&self) -> SharedCircuit {
        let state = self.state();
        SharedCircuit {
            state,
            epoch: self.epoch,
            retry_in: match (state, self.until) {
                (SharedState::Open, Some(u)) => u.saturating_duration_since(Instant::now()),
                _ => Duration::ZERO,
            },
            probes_granted: self.granted,
        }
    }

    fn set(&mut self, open: bool, until: Option<Instant>) {
        *self = Inner {
            open,
            epoch: self.epoch + 1,
            until,
            ..Inner::default()
        };
    }
}

impl FakeStore {
    fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Inner) -> T,
    ) -> BoxFuture<'_, Result<T, BackendError>> {
        let r = if self.down.load(Ordering::Relaxed) {
            Err(BackendError::Unavailable("down".into()))
        } else {
            Ok(f(&mut self.inner.lock()))
        };
        async move { r }.boxed()
    }
}

impl SharedBreakerStore for FakeStore {
    fn read<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<SharedCircuit, BackendError>> {
        self.with(|s| s.circuit())
    }

    fn record<'a>(
        &'a self,
        _: &'a str,
        r: &'a CircuitRules,
        c: OutcomeCounts,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>> {
        let (min, thr, wait) = (r.minimum_calls, r.failure_rate_threshold, r.open_wait_ms);
        self.with(move |s| {
            if s.state() == SharedState::Closed {
                s.window.calls += c.calls;
                s.window.failures += c.failures;
                let w = s.window;
                if w.calls >= min && w.failures as f64 / w.calls as f64 >= thr {
                    s.set(true, Some(Instant::now() + Duration::from_millis(wait)));
                }
            }
            s.circuit()
        })
    }

    fn open<'a>(
        &'a self,
        _: &'a str,
        _: &'a CircuitRules,
        seen: u64,
        d: Duration,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>> {
        self.with(move |s| {
            let until = Instant::now() + d;
            match s.state() {
                SharedState::Closed => s.set(true, Some(until)),
                SharedState::Open if s.epoch == seen => s.until = s.until.max(Some(until)),
                SharedState::HalfOpen if s.epoch == seen => s.set(true, Some(until)),
                _ => {}
            }
            s.circuit()
        })
    }

    fn acquire_probe<'a>(
        &'a self,
        _: &'a str,
        r: &'a CircuitRules,
    ) -> BoxFuture<'a, Result<ProbeGrant, BackendError>> {
        let probes = r.half_open_probes;
        self.with(move |s| {
            if s.state() == SharedState::HalfOpen && s.granted < probes {
                s.granted += 1;
                ProbeGrant::Granted { epoch: s.epoch }
            } else {
                ProbeGrant::Refused(s.circuit())
            }
        })
    }

    fn report_probe<'a>(
        &'a self,
        _: &'a str,
        r: &'a CircuitRules,
        epoch: u64,
        outcome: ProbeOutcome,
    ) -> BoxFuture<'a, Result<SharedCircuit, BackendError>> {
        let (probes, wait) = (r.half_open_probes, r.open_wait_ms);
        self.with(move |s| {
            if s.state() == SharedState::HalfOpen && s.epoch == epoch {
                match outcome {
                    ProbeOutcome::Failure => s.set(true, Some(Instant::now() + Duration::from_millis(wait))),
                    ProbeOutcome::Success => {
                        s.successes += 1;
                        if s.successes >= probes {
                            s.set(false, None);
                        }
                    }
                    ProbeOutcome::Released => s.granted = s.granted.saturating_sub(1),
                }
            }
            s.circuit()
        })
    }
}

fn config(open_wait_ms: u64, probes: u32) -> BreakerConfig {
    BreakerConfig {
        minimum_calls: 4,
        open_wait_ms,
        half_open_probes: probes,
        ..BreakerConfig::default()
    }
}

fn instance(store: &Arc<FakeStore>, cfg: &BreakerConfig) -> BreakerRegistry {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let store: Arc<dyn SharedBreakerStore> = Arc::clone(store) as Arc<dyn SharedBreakerStore>;
    BreakerRegistry::fleet(cfg.clone(), clock, None, store).expect("valid")
}

/// Waits (10 ms steps, at most 2 s) until `done`.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

#[tokio::test]
async fn an_opening_on_one_instance_stops_the_other() {
    let store = Arc::new(FakeStore::default());
    let cfg = config(60_000, 1);
    let (a, b) = (instance(&store, &cfg), instance(&store, &cfg));
    let (ba, bb) = (a.get("p", "m"), b.get("p", "m"));
    // Two failures each: neither window alone reaches minimumCalls (4).
    for br in [&ba, &bb, &ba, &bb] {
        br.try_acquire()
            .expect("closed")
            .failure(Duration::from_millis(1));
    }
    assert!(eventually(|| ba.state() == State::Open && bb.state() == State::Open).await);
    for reg in [&a, &b] {
        let t = reg.recent_transitions();
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!((t[0].to, t[0].reason), (State::Open, TransitionReason::Fleet));
    }
    assert!(bb.try_acquire().is_err(), "open means no call");
    assert!(b.fleet_status().expect("fleet").healthy);
    // A breaker created later learns the fleet's state too.
    drop(ba);
    let c = instance(&store, &cfg);
    let bc = c.get("p", "m");
    assert!(eventually(|| bc.state() == State::Open).await);
}

#[tokio::test]
async fn half_open_probes_are_one_quota_for_the_fleet() {
    let store = Arc::new(FakeStore::default());
    let cfg = config(200, 1);
    let (a, b) = (instance(&store, &cfg), instance(&store, &cfg));
    let (ba, bb) = (a.get("p", "m"), b.get("p", "m"));
    ba.open_for(Duration::from_millis(200));
    assert!(
        eventually(|| bb.state() == State::Open).await,
        "b learns the opening"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = ba.acquire().await.expect("a takes the fleet's one probe");
    assert!(probe.is_probe());
    let refused = bb
        .acquire()
        .await
        .expect_err("b has a local slot but the fleet has none");
    assert_eq!(refused.state, State::HalfOpen);
    probe.success(Duration::from_millis(1));
    assert!(eventually(|| ba.state() == State::Closed && bb.state() == State::Closed).await);
    let closed = b
        .recent_transitions()
        .into_iter()
        .rfind(|t| t.to == State::Closed)
        .expect("b closed");
    assert_eq!(closed.reason, TransitionReason::Fleet);
    assert!(!bb.acquire().await.expect("closed").is_probe());
}

#[tokio::test]
async fn a_failed_probe_reopens_it_everywhere() {
    let store = Arc::new(FakeStore::default());
    let cfg = config(200, 1);
    let (a, b) = (instance(&store, &cfg), instance(&store, &cfg));
    let (ba, bb) = (a.get("p", "m"), b.get("p", "m"));
    ba.open_for(Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = bb.acquire().await.expect("probe");
    let epoch = store.inner.lock().epoch;
    probe.failure(Duration::from_millis(1));
    assert!(
        eventually(|| store.inner.lock().epoch == epoch + 1).await,
        "a new epoch"
    );
    assert!(eventually(|| ba.state() == State::Open && bb.state() == State::Open).await);
    assert_eq!(store.inner.lock().circuit().state, SharedState::Open);
}

#[tokio::test]
async fn a_store_that_is_down_leaves_each_breaker_to_decide_alone() {
    let store = Arc::new(FakeStore::default());
    store.down.store(true, Ordering::Relaxed);
    let cfg = config(100, 1);
    let a = instance(&store, &cfg);
    let ba = a.get("p", "m");
    for _ in 0..4 {
        ba.acquire()
            .await
            .expect("closed")
            .failure(Duration::from_millis(1));
    }
    assert_eq!(ba.state(), State::Open, "the local window still trips");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let probe = ba
        .acquire()
        .await
        .expect("a local probe: never fail a call for the store");
    assert!(probe.is_probe());
    probe.success(Duration::from_millis(1));
    assert_eq!(ba.state(), State::Closed);
    let status = a.fleet_status().expect("fleet");
    assert!(!status.healthy);
    assert!(status.errors > 0);
    // Back up: the fleet is in sync again, and the opening the store missed
    // is not published after the breaker recovered by itself.
    store.down.store(false, Ordering::Relaxed);
    assert!(eventually(|| a.fleet_status().is_some_and(|s| s.healthy)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.inner.lock().circuit().state, SharedState::Closed);
    assert_eq!(ba.state(), State::Closed);
}
