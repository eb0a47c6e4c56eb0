//! Instruction counts of one admission decision, for `valgrind --tool=callgrind`.
//!
//! Not a timing benchmark: `benches/callgrind-core.sh` (at the repository
//! root) runs this binary under callgrind once per case with `N` = 100 000
//! and once with 200 000, collecting only inside [`measured`] (whose name is
//! the script's `--toggle-collect`), and reports
//! `(instr(200k) − instr(100k)) / 100k`: instructions per check, with setup,
//! warm-up and every one-time cost cancelled out. Instruction counts do not
//! move with the machine's speed, so they compare between commits and next to
//! governor in the same build.
//!
//! ```text
//! instructions <case> <n>      # run one case n times
//! instructions --list          # the case names
//! instructions --paired [case ...]   # ns per check, paired with governor
//! ```
//!
//! Run without valgrind it prints the case and n and does the same work (a
//! smoke test: `cargo bench -p pressure-core --bench instructions` runs every
//! case briefly). The cases are the rows of `benches/acquire.rs`, with the
//! same resources and the same quotas; every granted permit is dropped
//! inside the loop, as a real caller's would be.

#![allow(missing_docs)]

use futures::FutureExt;
use governor::{Quota, RateLimiter};
use pressure_core::{
    AcquireOptions, Backend, Decision, Demand, Limits, LocalBackend, MemoryBackend, ResourceBroker,
    ResourceHandle, MAX_LIMIT,
};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;

const KEYS: usize = 1_000;
const INPUT_TOKENS: u64 = 100;
const OUTPUT_TOKENS: u64 = 200;

/// Every case: (name, what it measures).
const CASES: &[(&str, &str)] = &[
    ("governor_direct", "governor direct check(), quota never reached"),
    (
        "governor_direct_denied",
        "governor direct check(), every call denied",
    ),
    ("governor_keyed", "governor keyed check_key(), 1,000 keys in turn"),
    (
        "governor_three",
        "rpm + tpm + concurrency from governor's parts: two direct limiters, an owned tokio semaphore permit",
    ),
    (
        "gcra_backend_decision",
        "MemoryBackend::acquire_now alone, 1 gcra key",
    ),
    ("gcra_handle", "gcra, handle, try_acquire_now"),
    ("gcra_handle_check", "gcra, handle, check_now (yes/no, no permit)"),
    ("gcra_handle_async", "gcra, handle, async try_acquire polled once"),
    ("gcra_lookup", "gcra, id lookup, try_acquire_now"),
    ("window_handle", "window, handle, try_acquire_now"),
    (
        "window_handle_check",
        "window, handle, check_now (yes/no, no permit)",
    ),
    (
        "multi_window_handle",
        "rpm + tpm + concurrency, window, handle, tokens",
    ),
    (
        "multi_gcra_handle",
        "rpm + tpm + concurrency, gcra, handle, tokens",
    ),
    ("denied_gcra_handle", "gcra, handle, every call denied"),
    ("denied_window_handle", "window, handle, every call denied"),
    (
        "denied_gcra_handle_check",
        "gcra, handle, check_now, every call denied",
    ),
    (
        "denied_window_handle_check",
        "window, handle, check_now, every call denied",
    ),
    ("gcra_lookup_1000", "gcra, id lookup, 1,000 keys in turn"),
    ("window_lookup_1000", "window, id lookup, 1,000 keys in turn"),
];

/// One case, ready to run: a closure doing one check.
type Check<'a> = Box<dyn FnMut(usize) -> bool + 'a>;

/// The loop callgrind counts (`--toggle-collect=*measured*`). Not inlined,
/// so its symbol exists; the per-iteration call through `check` costs the
/// same few instructions in every case, governor's included.
#[inline(never)]
fn measured(n: usize, check: &mut Check<'_>) -> usize {
    let mut ok = 0;
    for i in 0..n {
        ok += usize::from(check(black_box(i)));
    }
    ok
}

fn governor_free_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero"))
}

fn handle(b: &ResourceBroker, id: &str) -> ResourceHandle {
    b.resource(id).expect("registered resource")
}

#[inline(always)]
fn acquire_handle(h: &ResourceHandle, opts: AcquireOptions) -> bool {
    let a = h.try_acquire_now(opts).expect("registered resource");
    let allowed = a.allowed();
    drop(black_box(a));
    allowed
}

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("tenant-{i:04}")).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--list") {
        for (name, what) in CASES {
            println!("{name}\t{what}");
        }
        return;
    }
    if args.first().map(String::as_str) == Some("--paired") {
        let named: Vec<&str> = args[1..].iter().map(String::as_str).collect();
        let all: Vec<&str> = CASES
            .iter()
            .map(|(c, _)| *c)
            .filter(|c| !c.starts_with("governor_"))
            .collect();
        paired(if named.is_empty() { &all } else { &named });
        return;
    }
    // `cargo bench` passes `--bench`: run every case a little as a smoke test.
    let named = args.iter().find(|a| !a.starts_with('-')).cloned();
    let n: usize = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000);
    let cases: Vec<&str> = match &named {
        Some(c) => vec![c.as_str()],
        None => CASES.iter().map(|(c, _)| *c).collect(),
    };
    for case in cases {
        let (expect_allowed, ok) = run(case, n);
        let want = if expect_allowed { n } else { 0 };
        assert_eq!(ok, want, "{case}: {ok} of {n} allowed, expected {want}");
        println!("{case} {n}");
    }
}

/// Runs `case` `n` times after a warm-up; (whether every check should be
/// allowed, how many were).
fn run(case: &str, n: usize) -> (bool, usize) {
    with_case(case, |allowed, check| {
        let warm = warm_up(2 * KEYS, check);
        assert!(allowed || warm == 0, "{case}: a denied case allowed {warm}");
        (allowed, measured(n, check))
    })
}

/// The governor cases a pressure case is compared with: the issue's
/// reference (one key), and for three dimensions also what a governor user
/// would build for them.
fn references(case: &str) -> &'static [&'static str] {
    if case.starts_with("denied_") {
        &["governor_direct_denied"]
    } else if case.ends_with("_1000") {
        &["governor_keyed"]
    } else if case.starts_with("multi_") {
        &["governor_direct", "governor_three"]
    } else {
        &["governor_direct"]
    }
}

/// Paired timing (`--paired`): the case and its governor reference run in
/// alternating blocks of `BLOCK` checks, `ROUNDS` times, so both see the
/// same machine speed however it drifts (on a shared machine it moves 2–4×
/// between phases of a longer run). Prints the medians of each and the
/// median of the per-round ratios.
fn paired(cases: &[&str]) {
    const BLOCK: usize = 200_000;
    const ROUNDS: usize = 41;
    let clock = pressure_core::clock::MonotonicClock::new();
    use pressure_core::clock::Clock;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("| case | pressure ns | governor ns | ratio (median of {ROUNDS} paired rounds) |");
    println!("|---|---:|---:|---:|");
    for (case, reference) in cases
        .iter()
        .flat_map(|c| references(c).iter().map(move |r| (*c, *r)))
    {
        with_case(case, |_, ours| {
            with_case(reference, |_, theirs| {
                warm_up(BLOCK, ours);
                warm_up(BLOCK, theirs);
                let time = |check: &mut Check<'_>| {
                    let start = clock.now_nanos();
                    black_box(warm_up(BLOCK, check));
                    (clock.now_nanos() - start) as f64 / BLOCK as f64
                };
                let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
                for round in 0..ROUNDS {
                    let (x, y) = if round % 2 == 0 {
                        let x = time(ours);
                        (x, time(theirs))
                    } else {
                        let y = time(theirs);
                        (time(ours), y)
                    };
                    a.push(x);
                    b.push(y);
                    r.push(x / y);
                }
                println!(
                    "| {case} | {:.1} | {:.1} ({reference}) | {:.2}× |",
                    median(&mut a),
                    median(&mut b),
                    median(&mut r)
                );
            })
        });
    }
}

/// Builds `case` and hands its check to `f`; (whether every check of the
/// case should be allowed, the check).
fn with_case<R>(case: &str, f: impl FnOnce(bool, &mut Check<'_>) -> R) -> R {
    let opts = AcquireOptions::default();
    let tokens = opts.tokens(INPUT_TOKENS, OUTPUT_TOKENS);
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
    let keys = keys();
    let keyed = |limits: Limits| {
        let kb = ResourceBroker::new();
        for k in &keys {
            kb.register_limit(k.as_str(), limits.clone())
                .expect("valid limits");
        }
        kb
    };

    // Holders of whatever a case borrows, declared before the closures.
    let gov_free = RateLimiter::direct(governor_free_quota());
    let gov_denied = RateLimiter::direct(Quota::per_minute(NonZeroU32::new(1).expect("non-zero")));
    let gov_keyed = RateLimiter::keyed(governor_free_quota());
    // Three dimensions from governor's parts (none reached in a run): a
    // request rate, a token rate charged `INPUT_TOKENS + OUTPUT_TOKENS` per
    // check, and a semaphore for concurrency whose permit, like ours, owns
    // its reference. Not all-or-nothing: a refusal by the token limiter
    // leaves the request counted.
    let gov_rpm = RateLimiter::direct(Quota::per_minute(NonZeroU32::MAX));
    let gov_tpm = RateLimiter::direct(Quota::per_minute(NonZeroU32::MAX));
    let token_cells = NonZeroU32::new((INPUT_TOKENS + OUTPUT_TOKENS) as u32).expect("non-zero");
    let gov_sem = Arc::new(tokio::sync::Semaphore::new(tokio::sync::Semaphore::MAX_PERMITS));
    let mem = MemoryBackend::new();
    let raw = mem
        .attach(
            "raw",
            Arc::new(
                Limits::default()
                    .requests_per_second(MAX_LIMIT)
                    .gcra(None)
                    .compile()
                    .expect("valid"),
            ),
        )
        .expect("attaches");
    let demand = Demand::default();
    let keyed_broker = match case {
        "gcra_lookup_1000" => Some(keyed(Limits::default().requests_per_second(MAX_LIMIT).gcra(None))),
        "window_lookup_1000" => Some(keyed(Limits::default().requests_per_second(MAX_LIMIT))),
        _ => None,
    };

    let (allowed, mut check): (bool, Check<'_>) = match case {
        "governor_direct" => (true, Box::new(|_| black_box(gov_free.check()).is_ok())),
        "governor_direct_denied" => {
            assert!(gov_denied.check().is_ok(), "first check fits");
            (false, Box::new(|_| black_box(gov_denied.check()).is_ok()))
        }
        "governor_keyed" => (
            true,
            Box::new(|i| black_box(gov_keyed.check_key(&keys[i % KEYS])).is_ok()),
        ),
        "governor_three" => (
            true,
            Box::new(|_| {
                if gov_rpm.check().is_err() || !matches!(gov_tpm.check_n(token_cells), Ok(Ok(()))) {
                    return false;
                }
                let permit = Arc::clone(&gov_sem).try_acquire_owned();
                let ok = permit.is_ok();
                drop(black_box(permit));
                ok
            }),
        ),
        "gcra_backend_decision" => (
            true,
            Box::new(|_| matches!(black_box(mem.acquire_now(&raw, &demand)), Decision::Granted(_))),
        ),
        "gcra_handle" => {
            let h = handle(&b, "gcra");
            (true, Box::new(move |_| acquire_handle(&h, opts)))
        }
        "gcra_handle_check" | "window_handle_check" => {
            let h = handle(&b, case.trim_end_matches("_handle_check"));
            (
                true,
                Box::new(move |_| black_box(h.check_now(opts).expect("registered")).is_ok()),
            )
        }
        "denied_gcra_handle_check" | "denied_window_handle_check" => {
            let id = case.trim_end_matches("_handle_check");
            let h = handle(&b, id);
            assert!(acquire_handle(&h, opts), "first acquisition fits");
            (
                false,
                Box::new(move |_| black_box(h.check_now(opts).expect("registered")).is_ok()),
            )
        }
        "gcra_handle_async" => {
            let h = handle(&b, "gcra");
            (
                true,
                Box::new(move |_| {
                    let a = h
                        .try_acquire(opts)
                        .now_or_never()
                        .expect("the memory backend completes at once")
                        .expect("registered resource");
                    let allowed = a.allowed();
                    drop(black_box(a));
                    allowed
                }),
            )
        }
        "gcra_lookup" => (
            true,
            Box::new(|_| {
                let a = b
                    .try_acquire_now(black_box("gcra"), opts)
                    .expect("registered resource");
                let allowed = a.allowed();
                drop(black_box(a));
                allowed
            }),
        ),
        "window_handle" => {
            let h = handle(&b, "window");
            (true, Box::new(move |_| acquire_handle(&h, opts)))
        }
        "multi_window_handle" => {
            let h = handle(&b, "multi_window");
            (true, Box::new(move |_| acquire_handle(&h, tokens)))
        }
        "multi_gcra_handle" => {
            let h = handle(&b, "multi_gcra");
            (true, Box::new(move |_| acquire_handle(&h, tokens)))
        }
        "denied_gcra_handle" | "denied_window_handle" => {
            let id = if case == "denied_gcra_handle" {
                "denied_gcra"
            } else {
                "denied_window"
            };
            let h = handle(&b, id);
            assert!(acquire_handle(&h, opts), "first acquisition fits");
            (false, Box::new(move |_| acquire_handle(&h, opts)))
        }
        "gcra_lookup_1000" | "window_lookup_1000" => {
            let kb = keyed_broker.as_ref().expect("built above");
            (
                true,
                Box::new(move |i| {
                    let a = kb
                        .try_acquire_now(&keys[i % KEYS], opts)
                        .expect("registered resource");
                    let allowed = a.allowed();
                    drop(black_box(a));
                    allowed
                }),
            )
        }
        other => panic!("unknown case {other:?} (see --list)"),
    };
    // The caller warms up outside the counted function: first-use
    // allocations (window sub-windows, lease slots, the keyed maps' entries)
    // happen there.
    f(allowed, &mut check)
}

/// The warm-up loop: the same work as [`measured`] under another name, so
/// callgrind does not count it.
#[inline(never)]
fn warm_up(n: usize, check: &mut Check<'_>) -> usize {
    let mut ok = 0;
    for i in 0..n {
        ok += usize::from(check(black_box(i)));
    }
    ok
}
