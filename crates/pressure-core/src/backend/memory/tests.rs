//! The memory backend's tests across layouts: the lock-free words under
//! threads, a denial on one dimension, a stale clock read, the state's
//! size by layout, a booking's delay.

use super::locked::DimState;
use super::*;
use crate::limits::Dimension;
use crate::striped::Tally;
use std::sync::atomic::AtomicU64;

/// A caller whose clock read is older than a time the locked state was
/// already counted at is counted at that time: the window let go of
/// units at an exact time (its last admission + W), and counting the
/// late caller at its own reading would put three grants of a limit of
/// two into one window.
#[test]
fn a_stale_clock_read_is_counted_at_the_states_time() {
    let spec = Limits::default().requests_per_minute(2).compile().unwrap();
    let w = spec.rates[0].window_ns;
    let mut st = LockedState::new(Arc::new(spec), Arc::new(MonotonicClock::new()));
    let one = Demand::default();
    let granted_at = |q: CompactDecision| match q {
        CompactDecision::Granted { at_ns } => Some(at_ns),
        _ => None,
    };
    assert_eq!(granted_at(st.acquire_compact(20, &one)), Some(20));
    assert_eq!(granted_at(st.acquire_compact(20, &one)), Some(20));
    assert_eq!(st.usage(20 + w).dimensions[0].1, 0, "both left at last + W");
    // Read its clock just before that, got the lock just after.
    let stale = 20 + w - 1;
    assert_eq!(granted_at(st.acquire_compact(stale, &one)), Some(20 + w));
}
use crate::clock::ManualClock;
use crate::limits::Limits;
use futures::FutureExt;

fn backend() -> (MemoryBackend, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    (MemoryBackend::with_clock(clock.clone()), clock)
}

fn now<T>(f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().expect("memory backend is synchronous")
}

#[test]
fn denial_on_one_dimension_consumes_nothing_on_others() {
    let (b, _) = backend();
    let spec = Arc::new(
        Limits::default()
            .requests_per_minute(100)
            .tokens_per_minute(1_000)
            .max_concurrent_requests(10)
            .compile()
            .unwrap(),
    );
    let h = b.attach("r", spec).unwrap();
    let big = Demand {
        input_tokens: 900,
        ..Demand::default()
    };
    assert!(matches!(now(b.acquire(&h, &big)).unwrap(), Decision::Granted(_)));
    let too_much = Demand {
        input_tokens: 200,
        ..Demand::default()
    };
    let d = now(b.acquire(&h, &too_much)).unwrap();
    assert!(matches!(
        d,
        Decision::Denied(Denial {
            dimension: Dimension::TokensPerMinute,
            ..
        })
    ));
    let u = now(b.usage(&h)).unwrap();
    assert_eq!(
        u.dimensions,
        vec![
            (Dimension::RequestsPerMinute, 1),
            (Dimension::TokensPerMinute, 900)
        ]
    );
    assert_eq!(u.leases, 1);
}

/// Threads racing on the lock-free layouts (`gcra` word, `window`
/// budget word) at one instant: exactly the limit is admitted, and the
/// striped counts and the usage are exact.
#[test]
fn lock_free_layouts_count_exactly_under_threads() {
    const LIMIT: u64 = 5_000;
    const THREADS: u64 = 4;
    const EACH: u64 = 3_000;
    for limits in [
        Limits::default().requests_per_minute(LIMIT),
        Limits::default().requests_per_minute(LIMIT).gcra(None),
    ] {
        let (b, _) = backend();
        let h = b.attach("r", Arc::new(limits.compile().unwrap())).unwrap();
        let granted: usize = std::thread::scope(|s| {
            let run = || {
                s.spawn(|| {
                    (0..EACH)
                        .filter(|_| matches!(b.acquire_now(&h, &Demand::default()), Decision::Granted(_)))
                        .count()
                })
            };
            let threads: Vec<_> = (0..THREADS).map(|_| run()).collect();
            threads.into_iter().map(|t| t.join().expect("thread")).sum()
        });
        assert_eq!(u64::try_from(granted).unwrap(), LIMIT, "{limits:?}");
        let c = b.counts(&h);
        assert_eq!(
            (c.allowed, c.denied),
            (LIMIT, THREADS * EACH - LIMIT),
            "{limits:?}"
        );
        let u = now(b.usage(&h)).unwrap();
        assert_eq!(
            u.dimensions,
            vec![(Dimension::RequestsPerMinute, LIMIT)],
            "{limits:?}"
        );
    }
}

/// Threads acquiring on the lock-free `window` while another moves the
/// clock across many sub-windows and windows: no interval of the
/// window's length ever holds more than the limit (by the grants' own
/// times), and the counts are exact.
#[test]
fn lock_free_window_never_over_admits_while_time_moves() {
    const LIMIT: u64 = 200;
    let (b, clock) = backend();
    let spec = Limits::default().requests_per_second(LIMIT).compile().unwrap();
    let (w, g) = (spec.rates[0].window_ns, spec.rates[0].sub_window_ns);
    let h = b.attach("r", Arc::new(spec)).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let tries = AtomicU64::new(0);
    let (mut times, attempts) = std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            for i in 0..1_500u64 {
                // Each step waits for a few acquisitions, so time and
                // traffic interleave however the threads are scheduled.
                let seen = tries.load(Ordering::SeqCst);
                while tries.load(Ordering::SeqCst) < seen + 10 {
                    std::thread::yield_now();
                }
                clock.advance(Duration::from_nanos((i * 7_919) % (g / 2)));
            }
            done.store(true, Ordering::SeqCst);
        });
        let run = || {
            s.spawn(|| {
                let (mut at, mut n) = (Vec::new(), 0u64);
                while !done.load(Ordering::SeqCst) {
                    n += 1;
                    tries.fetch_add(1, Ordering::SeqCst);
                    if let Decision::Granted(gr) = b.acquire_now(&h, &Demand::default()) {
                        at.push(gr.at_ns);
                    }
                }
                (at, n)
            })
        };
        let threads: Vec<_> = (0..3).map(|_| run()).collect();
        ticker.join().expect("ticker");
        threads.into_iter().map(|t| t.join().expect("thread")).fold(
            (Vec::new(), 0),
            |(mut all, n), (at, m)| {
                all.extend(at);
                (all, n + m)
            },
        )
    });
    times.sort_unstable();
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= w {
            lo += 1;
        }
        assert!(
            u64::try_from(hi - lo + 1).unwrap() <= LIMIT,
            "{} grants within {w} ns",
            hi - lo + 1
        );
    }
    let c = b.counts(&h);
    assert_eq!(c.allowed, u64::try_from(times.len()).unwrap());
    assert_eq!(c.allowed + c.denied, attempts);
    assert!(
        c.allowed > LIMIT,
        "time moved over several windows: {}",
        c.allowed
    );
}

/// What a resource's state weighs, by layout: the handle is a tag and a
/// pointer, each state only what its layout needs (cold counters). A
/// regression fails here; `--nocapture` prints the table.
#[test]
fn states_are_sized_by_their_layout() {
    use std::mem::size_of;
    println!(
        "size_of: MemoryHandle {}, Fast {}, FastWindow {}, LockedState {}, WindowState {}, RateSpec {}, Tally {}",
        size_of::<MemoryHandle>(),
        size_of::<Fast>(),
        size_of::<FastWindow>(),
        size_of::<LockedState>(),
        size_of::<WindowState>(),
        size_of::<RateSpec>(),
        size_of::<Tally>(),
    );
    assert!(size_of::<MemoryHandle>() <= 16);
    // A bucket's precomputed rate fits beside its TAT in the space a
    // window's state takes anyway.
    assert!(size_of::<DimState>() <= size_of::<WindowState>());
    assert!(size_of::<Fast>() <= 128);
    assert!(size_of::<FastWindow>() <= 224);
}

#[test]
fn gcra_booking_returns_the_exact_delay() {
    let (b, _) = backend();
    let spec = Arc::new(
        Limits::default()
            .requests_per_second(10)
            .gcra(Some(1))
            .compile()
            .unwrap(),
    );
    let h = b.attach("r", spec).unwrap();
    let book = Demand {
        book_within_ns: 1_000_000_000,
        ..Demand::default()
    };
    let delays: Vec<_> = (0..4)
        .map(|_| match now(b.acquire(&h, &book)).unwrap() {
            Decision::Granted(g) => g.delay(),
            Decision::Denied(d) => panic!("denied {d:?}"),
        })
        .collect();
    let ms = |n| Duration::from_millis(n);
    assert_eq!(delays, vec![ms(0), ms(100), ms(200), ms(300)]);
}
