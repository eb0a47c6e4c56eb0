//! Circuit breaker tests, driven by a [`ManualClock`]: no sleeps, every
//! time step is explicit.

use parking_lot::Mutex;
use pressure_core::clock::{Clock, ManualClock};
use pressure_llm::breaker::{
    BreakerConfig, BreakerRegistry, CircuitBreaker, Rejected, State, Transition, TransitionHook,
    TransitionReason,
};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const START: u64 = 1_000_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn breaker(cfg: BreakerConfig) -> (Arc<ManualClock>, CircuitBreaker) {
    let clock = Arc::new(ManualClock::new(START));
    let b = CircuitBreaker::new("p/m", cfg, clock.clone()).expect("valid config");
    (clock, b)
}

fn fail(b: &CircuitBreaker) {
    b.try_acquire().expect("admitted").failure(ms(100));
}

fn succeed(b: &CircuitBreaker) {
    b.try_acquire().expect("admitted").success(ms(100));
}

fn recorder() -> (Arc<Mutex<Vec<Transition>>>, TransitionHook) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let hook: TransitionHook = Arc::new(move |t: &Transition| sink.lock().push(t.clone()));
    (log, hook)
}

/// Trips a default-config breaker: 10 failures.
fn trip(b: &CircuitBreaker) {
    for _ in 0..b.config().minimum_calls {
        fail(b);
    }
    assert_eq!(b.state(), State::Open);
}

#[test]
fn config_defaults_serde_and_validation() {
    let d = BreakerConfig::default();
    assert_eq!(d.failure_rate_threshold, 0.5);
    assert_eq!(d.slow_call_rate_threshold, 1.0);
    assert!(!d.slow_calls_enabled());
    assert_eq!(
        (d.window_ms, d.minimum_calls, d.open_wait_ms, d.half_open_probes),
        (30_000, 10, 30_000, 3)
    );
    assert_eq!((d.bucket_ms(), d.buckets()), (1_000, 30));
    assert_eq!(d.validate(), Ok(()));

    let c: BreakerConfig =
        serde_json::from_str(r#"{"failureRateThreshold":0.25,"halfOpenProbes":1,"slowCallDurationMs":500}"#)
            .unwrap();
    assert_eq!(c.failure_rate_threshold, 0.25);
    assert_eq!(c.half_open_probes, 1);
    assert_eq!(c.slow_call_duration_ms, 500);
    assert_eq!(c.window_ms, 30_000);
    assert!(serde_json::from_str::<BreakerConfig>(r#"{"windowSize":3}"#).is_err());
    let back: BreakerConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);

    let bad = |f: fn(&mut BreakerConfig)| {
        let mut c = BreakerConfig::default();
        f(&mut c);
        c.validate().unwrap_err().path
    };
    assert_eq!(bad(|c| c.failure_rate_threshold = 0.0), "failureRateThreshold");
    assert_eq!(
        bad(|c| c.failure_rate_threshold = f64::NAN),
        "failureRateThreshold"
    );
    assert_eq!(bad(|c| c.slow_call_rate_threshold = 1.5), "slowCallRateThreshold");
    assert_eq!(bad(|c| c.slow_call_duration_ms = 0), "slowCallDurationMs");
    assert_eq!(bad(|c| c.window_ms = 5), "windowMs");
    assert_eq!(bad(|c| c.minimum_calls = 0), "minimumCalls");
    assert_eq!(bad(|c| c.open_wait_ms = 0), "openWaitMs");
    assert_eq!(bad(|c| c.half_open_probes = 0), "halfOpenProbes");

    let clock = Arc::new(ManualClock::new(START));
    let err = CircuitBreaker::new(
        "x",
        BreakerConfig {
            minimum_calls: 0,
            ..d.clone()
        },
        clock.clone(),
    )
    .unwrap_err();
    assert_eq!(err.path, "minimumCalls");
    assert!(BreakerRegistry::new(BreakerConfig { window_ms: 0, ..d }, clock).is_err());
}

#[test]
fn bucket_geometry() {
    let g = |w| {
        let c = BreakerConfig {
            window_ms: w,
            ..BreakerConfig::default()
        };
        (c.bucket_ms(), c.buckets())
    };
    assert_eq!(g(10), (1, 10));
    assert_eq!(g(1_000), (100, 10));
    assert_eq!(g(10_000), (1_000, 10));
    assert_eq!(g(3_600_000), (6_000, 600));
    assert_eq!(g(25), (2, 13)); // rounded up to whole buckets
}

#[test]
fn stays_closed_below_minimum_calls_even_at_full_failure() {
    let (_clock, b) = breaker(BreakerConfig::default());
    for _ in 0..9 {
        fail(&b);
    }
    assert_eq!(b.state(), State::Closed);
    let s = b.snapshot();
    assert_eq!((s.calls, s.failures, s.failure_rate), (9, 9, 1.0));
    assert_eq!(b.transitions(), 0);
}

#[test]
fn opens_at_exactly_the_threshold() {
    let (log, hook) = recorder();
    let clock = Arc::new(ManualClock::new(START));
    let b = CircuitBreaker::with_hook("p/m", BreakerConfig::default(), clock, Some(hook)).unwrap();
    for _ in 0..5 {
        succeed(&b);
    }
    for _ in 0..4 {
        fail(&b);
    }
    // 4/9 failed: below minimum anyway. Tenth call, a failure: 5/10 = 50 %.
    assert_eq!(b.state(), State::Closed);
    fail(&b);
    assert_eq!(b.state(), State::Open);
    let log = log.lock();
    assert_eq!(log.len(), 1);
    let t = &log[0];
    assert_eq!(
        (t.from, t.to, t.reason),
        (State::Closed, State::Open, TransitionReason::FailureRate)
    );
    assert_eq!((t.failure_rate, t.calls, t.open_for), (0.5, 10, Some(ms(30_000))));
    assert_eq!(&*t.name, "p/m");
    assert_eq!(b.transitions(), 1);
}

#[test]
fn just_below_the_threshold_stays_closed() {
    let (_clock, b) = breaker(BreakerConfig::default());
    for _ in 0..6 {
        succeed(&b);
    }
    for _ in 0..5 {
        fail(&b);
    }
    // 5/11 ≈ 45 %.
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn failures_older_than_the_window_are_forgotten() {
    let (clock, b) = breaker(BreakerConfig::default());
    for _ in 0..9 {
        fail(&b);
    }
    clock.advance(ms(29_000));
    assert_eq!(b.snapshot().calls, 9, "still inside the 30 s window");
    clock.advance(ms(1_000));
    assert_eq!(b.snapshot().calls, 0, "a whole window later they are gone");
    fail(&b); // 1 failure in the window: below minimumCalls
    assert_eq!(b.state(), State::Closed);
    let s = b.snapshot();
    assert_eq!((s.calls, s.failures), (1, 1));
}

#[test]
fn buckets_expire_one_by_one() {
    let (clock, b) = breaker(BreakerConfig::default());
    for _ in 0..5 {
        fail(&b);
        clock.advance(ms(1_000));
    }
    // Failures at t = 0, 1, 2, 3, 4 s; now at 5 s.
    clock.advance(ms(26_000)); // t = 31 s: the ones at 0 and 1 s have left
    assert_eq!(b.snapshot().calls, 3);
    for _ in 0..7 {
        fail(&b);
    }
    assert_eq!(b.state(), State::Open, "3 + 7 = 10 failures in the window");
}

#[test]
fn open_rejects_without_a_call_and_reports_the_wait() {
    let (clock, b) = breaker(BreakerConfig::default());
    trip(&b);
    let r = b.try_acquire().unwrap_err();
    assert_eq!(
        r,
        Rejected {
            state: State::Open,
            retry_in: ms(30_000)
        }
    );
    clock.advance(ms(10_000));
    assert_eq!(b.try_acquire().unwrap_err().retry_in, ms(20_000));
    clock.advance(ms(19_999));
    assert_eq!(b.try_acquire().unwrap_err().retry_in, ms(1));
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.rejected, s.times_opened, s.retry_in),
        (State::Open, 3, 1, ms(1))
    );
    assert_eq!(
        (s.calls, s.failures),
        (10, 10),
        "open reports the counts that opened it"
    );
    assert!(r.to_string().contains("open"));
}

#[test]
fn half_open_admits_exactly_the_probes() {
    let (clock, b) = breaker(BreakerConfig::default());
    trip(&b);
    clock.advance(ms(30_000));
    assert_eq!(b.state(), State::HalfOpen);
    let p1 = b.try_acquire().unwrap();
    let p2 = b.try_acquire().unwrap();
    let p3 = b.try_acquire().unwrap();
    assert!(p1.is_probe() && p2.is_probe() && p3.is_probe());
    let r = b.try_acquire().unwrap_err();
    assert_eq!(
        r,
        Rejected {
            state: State::HalfOpen,
            retry_in: Duration::ZERO
        }
    );
    assert_eq!(b.snapshot().probes_in_flight, 3);
    // A reported probe keeps its slot: still no fourth probe.
    p1.success(ms(10));
    assert!(b.try_acquire().is_err());
    assert_eq!(b.snapshot().probes_in_flight, 2);
    drop((p2, p3));
}

#[test]
fn all_probes_succeed_closes_with_a_fresh_window() {
    let (log, hook) = recorder();
    let clock = Arc::new(ManualClock::new(START));
    let b = CircuitBreaker::with_hook("p/m", BreakerConfig::default(), clock.clone(), Some(hook)).unwrap();
    trip(&b);
    clock.advance(ms(30_000));
    let probes: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    for p in probes {
        assert_eq!(b.state(), State::HalfOpen);
        p.success(ms(10));
    }
    assert_eq!(b.state(), State::Closed);
    let s = b.snapshot();
    assert_eq!((s.calls, s.failures), (0, 0), "the window restarts empty");
    // Nothing from before the close counts: 9 new failures do not open it.
    for _ in 0..9 {
        fail(&b);
    }
    assert_eq!(b.state(), State::Closed);
    let steps: Vec<_> = log.lock().iter().map(|t| (t.from, t.to, t.reason)).collect();
    assert_eq!(
        steps,
        vec![
            (State::Closed, State::Open, TransitionReason::FailureRate),
            (State::Open, State::HalfOpen, TransitionReason::WaitElapsed),
            (State::HalfOpen, State::Closed, TransitionReason::ProbesSucceeded),
        ]
    );
    assert_eq!(b.transitions(), 3);
}

#[test]
fn window_is_reset_on_close_even_within_the_old_window() {
    let cfg = BreakerConfig {
        open_wait_ms: 1_000,
        ..BreakerConfig::default()
    };
    let (clock, b) = breaker(cfg);
    for _ in 0..5 {
        succeed(&b);
    }
    for _ in 0..5 {
        fail(&b);
    }
    assert_eq!(b.state(), State::Open, "5 ok + 5 failed = 50 %");
    clock.advance(ms(1_000));
    for _ in 0..3 {
        succeed(&b);
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot().calls, 0);
}

#[test]
fn a_failing_probe_reopens_with_one_probe() {
    let cfg = BreakerConfig {
        half_open_probes: 1,
        ..BreakerConfig::default()
    };
    let (clock, b) = breaker(cfg);
    trip(&b);
    clock.advance(ms(30_000));
    let p = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err());
    p.failure(ms(10));
    assert_eq!(b.state(), State::Open);
    assert_eq!(
        b.try_acquire().unwrap_err().retry_in,
        ms(30_000),
        "a full new wait"
    );
    assert_eq!(b.snapshot().times_opened, 2);
}

#[test]
fn the_first_failed_probe_reopens_and_late_probes_are_ignored() {
    let (log, hook) = recorder();
    let clock = Arc::new(ManualClock::new(START));
    let b = CircuitBreaker::with_hook("p/m", BreakerConfig::default(), clock.clone(), Some(hook)).unwrap();
    trip(&b);
    clock.advance(ms(30_000));
    let p1 = b.try_acquire().unwrap();
    let p2 = b.try_acquire().unwrap();
    let p3 = b.try_acquire().unwrap();
    p1.failure(ms(10));
    // One failed probe is enough: open again at once.
    assert_eq!(b.state(), State::Open);
    // Probes of the old half-open phase report late: ignored.
    p2.failure(ms(10));
    let last = log.lock().last().cloned().unwrap();
    assert_eq!(
        (last.from, last.to, last.reason),
        (State::HalfOpen, State::Open, TransitionReason::ProbesFailed)
    );
    assert_eq!(last.calls, 1);
    // The late third probe belongs to the old half-open phase: ignored.
    p3.success(ms(10));
    assert_eq!(b.state(), State::Open);
}

#[test]
fn one_failed_probe_of_three_reopens() {
    // Closed on success, open again on failure: a probe failing reopens at
    // once, whatever the other probes do.
    let (clock, b) = breaker(BreakerConfig::default());
    trip(&b);
    clock.advance(ms(30_000));
    succeed(&b);
    assert_eq!(b.state(), State::HalfOpen);
    fail(&b);
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.try_acquire().unwrap_err().retry_in, ms(30_000));
}

#[test]
fn open_for_honours_a_longer_retry_after() {
    let (log, hook) = recorder();
    let clock = Arc::new(ManualClock::new(START));
    let b = CircuitBreaker::with_hook("p/m", BreakerConfig::default(), clock.clone(), Some(hook)).unwrap();
    trip(&b);
    b.open_for(ms(120_000));
    assert_eq!(b.try_acquire().unwrap_err().retry_in, ms(120_000));
    b.open_for(ms(5_000)); // shorter: no effect
    assert_eq!(b.try_acquire().unwrap_err().retry_in, ms(120_000));
    clock.advance(ms(30_000));
    assert_eq!(b.state(), State::Open, "the default wait is not enough");
    clock.advance(ms(90_000));
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(
        log.lock().len(),
        2,
        "extending an open breaker is not a transition"
    );
}

#[test]
fn open_for_from_closed_and_half_open() {
    let (log, hook) = recorder();
    let clock = Arc::new(ManualClock::new(START));
    let b = CircuitBreaker::with_hook("p/m", BreakerConfig::default(), clock.clone(), Some(hook)).unwrap();
    b.open_for(Duration::ZERO);
    assert_eq!(b.state(), State::Closed, "zero does not open");
    let in_flight = b.try_acquire().unwrap();
    b.open_for(ms(5_000)); // a 429 with retry-after: 5 s
    let r = b.try_acquire().unwrap_err();
    assert_eq!(
        r,
        Rejected {
            state: State::Open,
            retry_in: ms(5_000)
        }
    );
    in_flight.failure(ms(10)); // issued while closed: ignored
    clock.advance(ms(5_000));
    assert_eq!(b.state(), State::HalfOpen);
    let probe = b.try_acquire().unwrap();
    b.open_for(ms(60_000));
    assert_eq!(b.state(), State::Open);
    probe.success(ms(10)); // stale probe: ignored
    assert_eq!(b.try_acquire().unwrap_err().retry_in, ms(60_000));
    let reasons: Vec<_> = log.lock().iter().map(|t| (t.to, t.reason, t.open_for)).collect();
    assert_eq!(
        reasons,
        vec![
            (State::Open, TransitionReason::Forced, Some(ms(5_000))),
            (State::HalfOpen, TransitionReason::WaitElapsed, None),
            (State::Open, TransitionReason::Forced, Some(ms(60_000))),
        ]
    );
}

#[test]
fn slow_calls_open_it_when_enabled() {
    let cfg = BreakerConfig {
        slow_call_rate_threshold: 0.5,
        slow_call_duration_ms: 2_000,
        ..BreakerConfig::default()
    };
    let (log, hook) = recorder();
    let clock = Arc::new(ManualClock::new(START));
    let b = CircuitBreaker::with_hook("p/m", cfg, clock, Some(hook)).unwrap();
    for _ in 0..5 {
        b.try_acquire().unwrap().success(ms(2_000)); // not slow: not above the limit
    }
    for _ in 0..4 {
        b.try_acquire().unwrap().success(ms(2_001));
    }
    assert_eq!(b.state(), State::Closed);
    b.try_acquire().unwrap().success(ms(9_000)); // 5/10 slow
    assert_eq!(b.state(), State::Open);
    let t = log.lock()[0].clone();
    assert_eq!(
        (t.reason, t.failure_rate, t.slow_call_rate),
        (TransitionReason::SlowCallRate, 0.0, 0.5)
    );
}

#[test]
fn slow_calls_are_ignored_by_default() {
    let (_clock, b) = breaker(BreakerConfig::default());
    for _ in 0..50 {
        b.try_acquire().unwrap().success(ms(60_000));
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot().slow_calls, 50, "still counted for metrics");
}

#[test]
fn slow_probes_reopen() {
    let cfg = BreakerConfig {
        slow_call_rate_threshold: 0.5,
        slow_call_duration_ms: 2_000,
        half_open_probes: 2,
        ..BreakerConfig::default()
    };
    let (clock, b) = breaker(cfg);
    trip(&b);
    clock.advance(ms(30_000));
    b.try_acquire().unwrap().success(ms(5_000)); // 1 of 2 slow = 50 %
    assert_eq!(b.state(), State::Open);
}

#[test]
fn dropped_permits_do_not_count() {
    let (clock, b) = breaker(BreakerConfig::default());
    for _ in 0..100 {
        let p = b.try_acquire().unwrap();
        drop(p);
    }
    for _ in 0..100 {
        b.try_acquire().unwrap().ignore();
    }
    assert_eq!(b.snapshot().calls, 0);
    trip(&b);
    clock.advance(ms(30_000));
    // Half-open: dropping a probe frees its slot.
    let p1 = b.try_acquire().unwrap();
    let p2 = b.try_acquire().unwrap();
    let p3 = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err());
    drop(p3);
    let p4 = b.try_acquire().expect("the slot came back");
    assert!(b.try_acquire().is_err());
    p1.success(ms(1));
    p2.success(ms(1));
    assert_eq!(b.state(), State::HalfOpen, "only two probes reported");
    p4.success(ms(1));
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn permit_elapsed_uses_the_injected_clock() {
    let (clock, b) = breaker(BreakerConfig::default());
    let p = b.try_acquire().unwrap();
    clock.advance(ms(1_234));
    assert_eq!(p.elapsed(), ms(1_234));
    let d = p.elapsed();
    p.success(d);
}

#[test]
fn late_outcomes_from_before_the_trip_are_ignored() {
    let (clock, b) = breaker(BreakerConfig::default());
    let slow_call = b.try_acquire().unwrap();
    trip(&b);
    clock.advance(ms(30_000));
    let _ = b.state(); // half-open now
    slow_call.failure(ms(30_000)); // issued while closed
    let s = b.snapshot();
    assert_eq!((s.state, s.calls, s.probes_in_flight), (State::HalfOpen, 0, 0));
}

#[test]
fn concurrent_hammering_counts_add_up() {
    let cfg = BreakerConfig {
        minimum_calls: 1_000_000,
        window_ms: 3_600_000,
        ..BreakerConfig::default()
    };
    let (clock, b) = breaker(cfg);
    let b = Arc::new(b);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let b = b.clone();
            let clock = clock.clone();
            std::thread::spawn(move || {
                let mut failures = 0;
                for i in 0..2_000u64 {
                    let p = b.try_acquire().expect("closed");
                    if (i + t) % 3 == 0 {
                        failures += 1;
                        p.failure(ms(1));
                    } else {
                        p.success(ms(1));
                    }
                    clock.advance(Duration::from_micros(10));
                }
                failures
            })
        })
        .collect();
    let failures: u64 = threads.into_iter().map(|h| h.join().unwrap()).sum();
    let s = b.snapshot();
    assert_eq!(s.state, State::Closed);
    assert_eq!((s.calls, s.failures), (16_000, failures));
}

#[test]
fn concurrent_transitions_stay_consistent() {
    let cfg = BreakerConfig {
        minimum_calls: 5,
        open_wait_ms: 5,
        window_ms: 1_000,
        ..BreakerConfig::default()
    };
    let (log, hook) = recorder();
    let clock = Arc::new(ManualClock::new(START));
    let b = Arc::new(CircuitBreaker::with_hook("p/m", cfg, clock.clone(), Some(hook)).unwrap());
    let admitted = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (b, clock, admitted, rejected) =
                (b.clone(), clock.clone(), admitted.clone(), rejected.clone());
            std::thread::spawn(move || {
                for i in 0..3_000u64 {
                    match b.try_acquire() {
                        Ok(p) => {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            match (i * 7 + t) % 5 {
                                0 | 1 => p.failure(ms(1)),
                                2 => drop(p),
                                _ => p.success(ms(1)),
                            }
                        }
                        Err(r) => {
                            rejected.fetch_add(1, Ordering::Relaxed);
                            assert!(r.state != State::Closed);
                        }
                    }
                    if i % 10 == 0 {
                        clock.advance(ms(1));
                    }
                    if i % 500 == 0 {
                        b.open_for(ms(2));
                    }
                }
            })
        })
        .collect();
    for h in threads {
        h.join().unwrap();
    }
    let s = b.snapshot();
    let (admitted, rejected) = (admitted.load(Ordering::Relaxed), rejected.load(Ordering::Relaxed));
    assert_eq!(admitted + rejected, 8 * 3_000);
    assert_eq!(s.rejected, rejected);
    let log = log.lock();
    assert_eq!(s.transitions, log.len() as u64);
    assert_eq!(
        s.times_opened,
        log.iter().filter(|t| t.to == State::Open).count() as u64
    );
    assert!(s.times_opened > 0);
    assert!(s.probes_in_flight <= 3);
    for pair in log.windows(2) {
        // Hooks run outside the lock, so neighbours may be reordered, but
        // no transition is ever a self-loop.
        assert_ne!(pair[0].from, pair[0].to);
    }
}

#[test]
fn registry_creates_breakers_lazily_per_provider_and_model() {
    let clock = Arc::new(ManualClock::new(START));
    let (log, hook) = recorder();
    let reg = BreakerRegistry::with_hook(BreakerConfig::default(), clock.clone(), Some(hook)).unwrap();
    assert!(reg.is_empty());
    let a = reg.get("openai", "gpt-4o");
    let a2 = reg.get("openai", "gpt-4o");
    assert!(Arc::ptr_eq(&a, &a2));
    let b = reg.get("openai", "gpt-4o-mini");
    let c = reg.get("anthropic", "claude");
    assert_eq!(reg.len(), 3);
    assert_eq!(a.name(), "openai/gpt-4o");
    trip(&b);
    assert_eq!(a.state(), State::Closed, "breakers are independent");
    assert_eq!(c.state(), State::Closed);
    let snap = reg.snapshot();
    let keys: Vec<_> = snap
        .iter()
        .map(|k| (k.provider.as_str(), k.model.as_str(), k.snapshot.state))
        .collect();
    assert_eq!(
        keys,
        vec![
            ("anthropic", "claude", State::Closed),
            ("openai", "gpt-4o", State::Closed),
            ("openai", "gpt-4o-mini", State::Open),
        ]
    );
    assert_eq!(&*log.lock()[0].name, "openai/gpt-4o-mini");
    assert_eq!(State::Open.as_gauge(), 2);
    assert_eq!(State::HalfOpen.to_string(), "half_open");
    let shared: Arc<dyn Clock> = clock;
    assert!(shared.now_nanos() >= START);
}

#[test]
fn breaker_is_send_sync_and_static_permits() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<CircuitBreaker>();
    assert_send_sync::<BreakerRegistry>();
    fn assert_send<T: Send + 'static>() {}
    assert_send::<pressure_llm::breaker::CallPermit>();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// In the closed state the decision equals a recomputation over the raw
    /// events: calls whose bucket is still in the window, calls ≥ minimum and
    /// failure rate ≥ threshold (or slow rate ≥ slow threshold when on).
    #[test]
    fn closed_decision_matches_reference(
        window_ms in prop::sample::select(vec![25u64, 1_000, 5_000, 30_000]),
        minimum_calls in 1u64..8,
        threshold in prop::sample::select(vec![0.2f64, 0.5, 0.75, 1.0]),
        slow_threshold in prop::sample::select(vec![0.3f64, 0.6, 1.0]),
        events in prop::collection::vec((0u64..400, any::<bool>(), any::<bool>()), 1..120),
    ) {
        let cfg = BreakerConfig {
            window_ms,
            minimum_calls,
            failure_rate_threshold: threshold,
            slow_call_rate_threshold: slow_threshold,
            slow_call_duration_ms: 1_000,
            ..BreakerConfig::default()
        };
        let bucket_nanos = cfg.bucket_ms() * 1_000_000;
        let buckets = cfg.buckets();
        let (clock, b) = breaker(cfg);
        let mut seen: Vec<(u64, bool, bool)> = Vec::new();
        for (step, failed, slow) in events {
            // Up to 0.4 window per step, at arbitrary nanosecond offsets.
            clock.advance(Duration::from_nanos(window_ms * 1_000_000 * step / 1_000));
            let now = clock.now_nanos();
            let permit = b.try_acquire();
            prop_assert!(permit.is_ok(), "closed breakers admit every call");
            let d = if slow { ms(1_001) } else { ms(5) };
            let permit = permit.unwrap();
            if failed { permit.failure(d) } else { permit.success(d) }
            seen.push((now, failed, slow));

            let (mut calls, mut fails, mut slows) = (0u64, 0u64, 0u64);
            for &(t, f, s) in &seen {
                if now / bucket_nanos - t / bucket_nanos < buckets {
                    calls += 1;
                    fails += u64::from(f);
                    slows += u64::from(s);
                }
            }
            let trips = calls >= minimum_calls
                && (fails as f64 / calls as f64 >= threshold
                    || (slow_threshold < 1.0 && slows as f64 / calls as f64 >= slow_threshold));
            let snap = b.snapshot();
            if trips {
                prop_assert_eq!(snap.state, State::Open);
                prop_assert_eq!((snap.calls, snap.failures, snap.slow_calls), (calls, fails, slows));
                break;
            }
            prop_assert_eq!(snap.state, State::Closed);
            prop_assert_eq!((snap.calls, snap.failures, snap.slow_calls), (calls, fails, slows));
        }
    }
}
