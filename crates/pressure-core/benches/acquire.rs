//! Cost of one admission decision in `pressure-core`, measured against
//! `governor` in the same run so the ratios compare like with like.
//!
//! Run with:
//!
//! ```text
//! cargo bench -p pressure-core --bench acquire
//! ```
//!
//! Groups (each benchmark in a group is one pair/row of the comparison; the
//! `governor_*` entry is the reference):
//!
//! * `free_1key`: quota never reached, one key. governor direct `check()` vs
//!   our `gcra` through a [`ResourceHandle`] (the fair equivalent of a direct
//!   limiter; `*_check` rows: `check_now`, the yes/no answer without a
//!   permit, like `check()`), `gcra` through the id lookup, `window` through
//!   a handle, and a
//!   multi-dimension resource (`requestsPerMinute` + `tokensPerMinute` +
//!   `maxConcurrentRequests`) with a token demand, `window` and `gcra`.
//! * `free_1000keys`: 1,000 string keys, cycled in order: governor keyed
//!   `check_key` vs our `try_acquire(id)` over 1,000 registered resources.
//! * `denied_1key`: the quota is exhausted first, every call is denied.
//! * `2threads_1key` / `2threads_1000keys`: the same checks with two threads
//!   hammering the same limiter at once (see [`two_threads`] for what the
//!   reported time means).
//! * `enqueue_free`: queue+execute when capacity is free, on a tokio runtime
//!   built once: a bare trivial task (baseline), `try_acquire` on the same
//!   resource, and `enqueue` running the task.
//!
//! The synchronous groups use the in-memory backend's synchronous API
//! (`try_acquire_now`), the like of governor's `check()`;
//! `free_1key/gcra_handle_async` measures the `async` `try_acquire` on the
//! same resource, its future polled once with `now_or_never()`.
//! Every granted permit is dropped inside the iteration (its release is part
//! of the measured cost, as it is for a real caller).

#![allow(missing_docs)]

use criterion::measurement::WallTime;
use criterion::{black_box, criterion_group, BenchmarkGroup, Criterion, Throughput};
use futures::FutureExt;
use governor::{Quota, RateLimiter};
use pressure_core::clock::{Clock, MonotonicClock};
use pressure_core::{
    AcquireOptions, Acquisition, Attempt, Backend, Decision, Demand, Limits, LocalBackend, MemoryBackend,
    Request, ResourceBroker, ResourceConfig, ResourceHandle, TaskError, UsageReport, MAX_LIMIT,
};
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::Duration;

/// Distinct keys of the keyed benchmarks.
const KEYS: usize = 1_000;

/// Tokens per acquisition on the multi-dimension resources.
const INPUT_TOKENS: u64 = 100;
const OUTPUT_TOKENS: u64 = 200;

/// Governor's quota that is never reached: 10⁹ per second is a 1 ns emission
/// interval, the same as ours at `MAX_LIMIT` per second (⌈10⁹ / 10¹²⌉ = 1 ns),
/// far faster than any check completes. (Governor takes a `u32`.)
fn governor_free_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero"))
}

/// Polls a future of the in-memory backend, which completes immediately.
#[inline(always)]
fn ready<T>(f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().expect("the memory backend completes at once")
}

/// One acquisition through a handle; the permit is dropped (released) here.
#[inline(always)]
fn acquire_handle(h: &ResourceHandle, opts: AcquireOptions) -> bool {
    let a = h.try_acquire_now(opts).expect("registered resource");
    let allowed = a.allowed();
    drop(black_box(a));
    allowed
}

/// The same as a yes/no (`check_now`, no permit built), like governor's
/// `check()`.
#[inline(always)]
fn check_handle(h: &ResourceHandle, opts: AcquireOptions) -> bool {
    black_box(h.check_now(opts).expect("registered resource")).is_ok()
}

/// The same through the `async` API, polled once.
#[inline(always)]
fn acquire_handle_async(h: &ResourceHandle, opts: AcquireOptions) -> bool {
    let a = ready(h.try_acquire(opts)).expect("registered resource");
    let allowed = a.allowed();
    drop(black_box(a));
    allowed
}

/// One acquisition through the id lookup; the permit is dropped here.
#[inline(always)]
fn acquire_id(b: &ResourceBroker, id: &str, opts: AcquireOptions) -> bool {
    let a = b.try_acquire_now(id, opts).expect("registered resource");
    let allowed = a.allowed();
    drop(black_box(a));
    allowed
}

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("tenant-{i:04}")).collect()
}

/// A broker with every one-key resource of the benchmarks registered.
fn broker() -> ResourceBroker {
    let b = ResourceBroker::new();
    let reg = |id: &str, l: Limits| b.register_limit(id, l).expect("valid limits");
    reg(
        "gcra",
        Limits::default().requests_per_second(MAX_LIMIT).gcra(None),
    );
    reg("window", Limits::default().requests_per_second(MAX_LIMIT));
    let multi = Limits::default()
        .requests_per_minute(MAX_LIMIT)
        .tokens_per_minute(MAX_LIMIT)
        .max_concurrent_requests(MAX_LIMIT);
    reg("multi_window", multi.clone());
    reg("multi_gcra", multi.gcra(None));
    reg("denied_gcra", Limits::default().requests_per_minute(1).gcra(None));
    reg("denied_window", Limits::default().requests_per_minute(1));
    b
}

/// A broker with one resource per key (the very strings governor is keyed
/// with, so both hash the same bytes), all with `limits`.
fn keyed_broker(keys: &[String], limits: &Limits) -> ResourceBroker {
    let b = ResourceBroker::new();
    for k in keys {
        b.register_limit(k.as_str(), limits.clone())
            .expect("valid limits");
    }
    b
}

fn keyed_brokers(keys: &[String]) -> (ResourceBroker, ResourceBroker) {
    let free = Limits::default().requests_per_second(MAX_LIMIT);
    (
        keyed_broker(keys, &free.clone().gcra(None)),
        keyed_broker(keys, &free),
    )
}

fn handle(b: &ResourceBroker, id: &str) -> ResourceHandle {
    b.resource(id).expect("registered resource")
}

/// Checks after a "quota never reached" group that it really measured the
/// grant path: no acquisition on any resource of `b` was denied.
fn never_denied(b: &ResourceBroker) {
    for st in ready(b.stats()) {
        assert_eq!(st.denied, 0, "{} was denied: the limit was reached", st.resource);
    }
}

fn group<'a>(c: &'a mut Criterion, name: &str, elements: u64) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(elements));
    g
}

fn free_one_key(c: &mut Criterion) {
    let b = broker();
    let opts = AcquireOptions::default();
    let tokens = opts.tokens(INPUT_TOKENS, OUTPUT_TOKENS);
    let mut g = group(c, "free_1key", 1);

    let gov = RateLimiter::direct(governor_free_quota());
    g.bench_function("governor_direct", |bn| bn.iter(|| black_box(gov.check()).is_ok()));

    // The backend's decision alone (clock read, CAS, grant counter), no
    // permit or acquisition value: what governor's check() compares to.
    let mem = MemoryBackend::new();
    let spec = std::sync::Arc::new(
        Limits::default()
            .requests_per_second(MAX_LIMIT)
            .gcra(None)
            .compile()
            .expect("valid"),
    );
    let raw = mem.attach("raw", spec).expect("attaches");
    let demand = Demand::default();
    g.bench_function("gcra_backend_decision", |bn| {
        bn.iter(|| matches!(black_box(mem.acquire_now(&raw, &demand)), Decision::Granted(_)))
    });

    let h = handle(&b, "gcra");
    g.bench_function("gcra_handle", |bn| bn.iter(|| acquire_handle(&h, opts)));
    g.bench_function("gcra_handle_check", |bn| bn.iter(|| check_handle(&h, opts)));
    g.bench_function("gcra_handle_async", |bn| {
        bn.iter(|| acquire_handle_async(&h, opts))
    });
    g.bench_function("gcra_lookup", |bn| {
        bn.iter(|| acquire_id(&b, black_box("gcra"), opts))
    });

    let h = handle(&b, "window");
    g.bench_function("window_handle", |bn| bn.iter(|| acquire_handle(&h, opts)));
    g.bench_function("window_handle_check", |bn| bn.iter(|| check_handle(&h, opts)));

    let h = handle(&b, "multi_window");
    g.bench_function("multi_window_handle", |bn| bn.iter(|| acquire_handle(&h, tokens)));
    let h = handle(&b, "multi_gcra");
    g.bench_function("multi_gcra_handle", |bn| bn.iter(|| acquire_handle(&h, tokens)));
    g.finish();
    assert!(gov.check().is_ok(), "governor's quota was reached");
    never_denied(&b);
}

fn free_many_keys(c: &mut Criterion) {
    let keys = keys();
    let (gcra, window) = keyed_brokers(&keys);
    let opts = AcquireOptions::default();
    let mut g = group(c, "free_1000keys", 1);

    let gov = RateLimiter::keyed(governor_free_quota());
    for k in &keys {
        let _ = gov.check_key(k);
    }
    let mut i = 0;
    g.bench_function("governor_keyed", |bn| {
        bn.iter(|| {
            i = (i + 1) % KEYS;
            black_box(gov.check_key(&keys[i])).is_ok()
        })
    });
    g.bench_function("gcra_lookup", |bn| {
        bn.iter(|| {
            i = (i + 1) % KEYS;
            acquire_id(&gcra, &keys[i], opts)
        })
    });
    g.bench_function("window_lookup", |bn| {
        bn.iter(|| {
            i = (i + 1) % KEYS;
            acquire_id(&window, &keys[i], opts)
        })
    });
    g.finish();
    assert!(
        keys.iter().all(|k| gov.check_key(k).is_ok()),
        "governor's quota was reached"
    );
    never_denied(&gcra);
    never_denied(&window);
}

fn denied_one_key(c: &mut Criterion) {
    let b = broker();
    let opts = AcquireOptions::default();
    let mut g = group(c, "denied_1key", 1);

    let gov = RateLimiter::direct(Quota::per_minute(NonZeroU32::new(1).expect("non-zero")));
    assert!(gov.check().is_ok(), "first check fits");
    assert!(gov.check().is_err(), "quota exhausted");
    g.bench_function("governor_direct", |bn| {
        bn.iter(|| black_box(gov.check()).is_err())
    });

    for (name, id) in [("gcra_handle", "denied_gcra"), ("window_handle", "denied_window")] {
        let h = handle(&b, id);
        assert!(acquire_handle(&h, opts), "first acquisition fits");
        assert!(!acquire_handle(&h, opts), "quota exhausted");
        g.bench_function(name, |bn| bn.iter(|| acquire_handle(&h, opts)));
        g.bench_function(format!("{name}_check"), |bn| bn.iter(|| check_handle(&h, opts)));
    }
    g.finish();
}

/// Runs `check(thread, i)` for `i in 0..iters` on each of two threads at once.
///
/// Both threads start together (a barrier, so spawning is not timed) and each
/// times its own loop (with the crate's monotonic clock, per the house rule
/// against `Instant::now`); the result is the longer of the two. Criterion divides
/// it by `iters`, so the reported **time is per check per thread**: the wall
/// time one thread needs for one check while the other thread does the same.
/// The groups set `Throughput::Elements(2)`, so the reported throughput is the
/// aggregate of both threads (checks per second in total).
fn two_threads<F>(iters: u64, check: F) -> Duration
where
    F: Fn(usize, u64) -> bool + Sync,
{
    let barrier = Barrier::new(2);
    let clock = MonotonicClock::new();
    std::thread::scope(|s| {
        let run = |t: usize| {
            let (barrier, check, clock) = (&barrier, &check, &clock);
            s.spawn(move || {
                barrier.wait();
                let start = clock.now_nanos();
                for i in 0..iters {
                    black_box(check(t, i));
                }
                Duration::from_nanos(clock.now_nanos() - start)
            })
        };
        let (a, b) = (run(0), run(1));
        let a = a.join().expect("bench thread");
        let b = b.join().expect("bench thread");
        a.max(b)
    })
}

fn two_threads_one_key(c: &mut Criterion) {
    let b = broker();
    let opts = AcquireOptions::default();
    let mut g = group(c, "2threads_1key", 2);

    let gov = RateLimiter::direct(governor_free_quota());
    g.bench_function("governor_direct", |bn| {
        bn.iter_custom(|iters| two_threads(iters, |_, _| gov.check().is_ok()))
    });
    let h = handle(&b, "gcra");
    g.bench_function("gcra_handle", |bn| {
        bn.iter_custom(|iters| two_threads(iters, |_, _| acquire_handle(&h, opts)))
    });
    g.finish();
    assert!(gov.check().is_ok(), "governor's quota was reached");
    never_denied(&b);
}

fn two_threads_many_keys(c: &mut Criterion) {
    let keys = keys();
    let (gcra, window) = keyed_brokers(&keys);
    let opts = AcquireOptions::default();
    // Thread 1 starts half-way through the keys, so the threads mostly touch
    // different keys of the same map, as distinct tenants would.
    let key = |t: usize, i: u64| (i as usize + t * KEYS / 2) % KEYS;
    let mut g = group(c, "2threads_1000keys", 2);

    let gov = RateLimiter::keyed(governor_free_quota());
    for k in &keys {
        let _ = gov.check_key(k);
    }
    g.bench_function("governor_keyed", |bn| {
        bn.iter_custom(|iters| two_threads(iters, |t, i| gov.check_key(&keys[key(t, i)]).is_ok()))
    });
    g.bench_function("gcra_lookup", |bn| {
        bn.iter_custom(|iters| two_threads(iters, |t, i| acquire_id(&gcra, &keys[key(t, i)], opts)))
    });
    g.bench_function("window_lookup", |bn| {
        bn.iter_custom(|iters| two_threads(iters, |t, i| acquire_id(&window, &keys[key(t, i)], opts)))
    });
    g.finish();
    assert!(
        keys.iter().all(|k| gov.check_key(k).is_ok()),
        "governor's quota was reached"
    );
    never_denied(&gcra);
    never_denied(&window);
}

fn enqueue_free(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let b = ResourceBroker::new();
    b.register(
        "q",
        ResourceConfig::new(Limits::default().requests_per_second(MAX_LIMIT)),
    )
    .expect("valid limits");
    let task = |_a: Attempt| async { Ok::<_, TaskError<()>>(()) };
    let attempt = Attempt {
        number: 1,
        usage: UsageReport::default(),
    };
    let mut g = group(c, "enqueue_free", 1);

    g.bench_function("baseline_task", |bn| {
        bn.to_async(&rt).iter(|| async {
            let out: Result<(), TaskError<()>> = task(attempt.clone()).await;
            black_box(out).is_ok()
        })
    });
    g.bench_function("try_acquire", |bn| {
        bn.to_async(&rt).iter(|| async {
            let a: Acquisition = b
                .try_acquire("q", AcquireOptions::default())
                .await
                .expect("registered");
            let allowed = a.allowed();
            drop(black_box(a));
            allowed
        })
    });
    g.bench_function("enqueue", |bn| {
        bn.to_async(&rt).iter(|| async {
            let r = b
                .enqueue(Request::new("q", task))
                .await
                .expect("capacity is free");
            black_box(r).value
        })
    });
    g.finish();
    never_denied(&b);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    targets = free_one_key, free_many_keys, denied_one_key, two_threads_one_key, two_threads_many_keys, enqueue_free
}
/// `criterion_main!`, with the machine named before and after the run.
fn main() {
    eprintln!("{}", pressure_testkit::machine("before"));
    benches();
    Criterion::default().configure_from_args().final_summary();
    eprintln!("{}", pressure_testkit::machine("after"));
}
