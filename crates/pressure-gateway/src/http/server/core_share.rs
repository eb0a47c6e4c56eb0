//! A saturated server thread offers its core to the other threads waiting
//! for it: every millisecond by default, each time it runs out of tasks
//! with `pressure gateway --share-cores`.
//!
//! A busy server thread rarely sleeps: each time it runs out of tasks, the
//! next requests are already waiting in the kernel, so its poll for I/O
//! returns at once and it goes on without giving up its core. A thread
//! that shares the core (the client on a shared machine, an upstream, a
//! sidecar) then runs only when the kernel preempts the server at a
//! scheduler tick (4 ms at 250 Hz), and the requests that thread was about
//! to send, or the answers it was about to read, wait it out: on a 2-core
//! machine shared with its client, the 429 path's p99 was 8 ms (two ticks)
//! against a 0.2 ms median.
//!
//! So a server thread whose polls have found work without waiting for a
//! while yields its core (`sched_yield`) the next time it runs out of
//! tasks, before it polls again: it leaves nothing half done there, and a
//! thread waiting for the core runs at once. How long "a while" is, is the
//! thread's *pace*: [`PACE`] by default, at most a thousand yields a second
//! on a saturated thread (a yield with nobody waiting returns at once, a
//! microsecond); zero with `--share-cores`, a yield each time it runs out
//! of tasks, which cost 10–15 % more CPU per request under saturation
//! (docs/benchmarks.md, "Issue 22, eighth round"). A thread that slept in
//! a poll gave the core up anyway: it starts counting again, and a server
//! that is not saturated makes no extra system call.

use crate::http::stamp::{ticks, Stamp};
use std::cell::Cell;
use std::time::Duration;

/// How long a saturated server thread keeps its core, by default, before
/// it offers it (below the scheduler's 4 ms tick at 250 Hz, and the time
/// slice of a task that shares the core).
pub(crate) const PACE: Duration = Duration::from_millis(1);

/// A poll for I/O that lasted this long slept: the core was free for
/// others meanwhile. A poll that finds events ready takes a few
/// microseconds.
const SLEPT: Duration = Duration::from_micros(20);

/// One server thread's record of its polls for I/O, in raw readings of the
/// gateway's counter ([`Stamp::raw`]: two reads per park, nothing scaled).
#[derive(Debug)]
struct CoreShare {
    /// When the current poll began.
    polled_at: Cell<Option<u64>>,
    /// Since when every poll found work without sleeping (the first such
    /// poll's end, or the last yield); `None` while the last poll slept.
    busy_since: Cell<Option<u64>>,
}

impl CoreShare {
    const fn new() -> Self {
        Self {
            polled_at: Cell::new(None),
            busy_since: Cell::new(None),
        }
    }

    /// The thread ran out of tasks at `now`: whether it should yield its
    /// core before it polls for I/O, at `pace` (ticks). The poll starts at
    /// `now` (a yield takes a microsecond).
    fn parking(&self, now: u64, pace: u64) -> bool {
        self.polled_at.set(Some(now));
        let due = self
            .busy_since
            .get()
            .is_some_and(|since| now.saturating_sub(since) >= pace);
        if due {
            self.busy_since.set(Some(now));
        }
        due
    }

    /// The thread's poll for I/O returned at `now`; a poll of `slept`
    /// ticks or more slept.
    fn polled(&self, now: u64, slept: u64) {
        let Some(at) = self.polled_at.take() else {
            return;
        };
        if now.saturating_sub(at) >= slept {
            self.busy_since.set(None);
        } else if self.busy_since.get().is_none() {
            self.busy_since.set(Some(now));
        }
    }
}

thread_local! {
    static SHARE: CoreShare = const { CoreShare::new() };
}

/// A server thread's `on_thread_park` and `on_thread_unpark` hooks at
/// `pace`: the thread yields its core when its polls have found work at
/// once for `pace`.
pub(crate) fn hooks(
    pace: Duration,
) -> (
    impl Fn() + Send + Sync + 'static,
    impl Fn() + Send + Sync + 'static,
) {
    let pace = ticks(pace);
    let slept = ticks(SLEPT);
    let park = move || {
        if SHARE.with(|s| s.parking(Stamp::now().raw(), pace)) {
            std::thread::yield_now();
        }
    };
    let unpark = move || SHARE.with(|s| s.polled(Stamp::now().raw(), slept));
    (park, unpark)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The tests count in nanoseconds (one tick each).
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const PACE_NS: u64 = PACE.as_nanos() as u64;
    const SLEPT_NS: u64 = SLEPT.as_nanos() as u64;

    /// Runs out of tasks at `at`; the poll for I/O takes `took`. Whether
    /// the thread yielded first.
    fn park(s: &CoreShare, at: u64, took: u64, pace: u64) -> bool {
        let yielded = s.parking(at, pace);
        s.polled(at + took, SLEPT_NS);
        yielded
    }

    #[test]
    fn at_pace_zero_a_thread_whose_polls_find_work_at_once_yields_before_each_next_poll() {
        let s = CoreShare::new();
        let yields: Vec<bool> = (0..4).map(|i| park(&s, i * 10 * US, 3 * US, 0)).collect();
        // The first poll has no last poll to go by.
        assert_eq!(yields, [false, true, true, true]);
    }

    #[test]
    fn a_saturated_thread_yields_once_per_pace() {
        let s = CoreShare::new();
        // Runs out of tasks every 50 µs for 10 ms, every poll finding work
        // at once: the first poll ends at 3 µs, so yields at 1.05 ms, then
        // every 1 ms after the last one.
        let yielded_at: Vec<u64> = (0..200)
            .map(|i| i * 50 * US)
            .filter(|&at| park(&s, at, 3 * US, PACE_NS))
            .collect();
        let want: Vec<u64> = (1..=9).map(|k| k * MS + 50 * US).collect();
        assert_eq!(yielded_at, want);
    }

    #[test]
    fn a_thread_that_sleeps_in_a_poll_starts_counting_again() {
        let s = CoreShare::new();
        assert!(!park(&s, 0, 3 * US, PACE_NS));
        assert!(!park(&s, 900 * US, 3 * US, PACE_NS));
        // Slept: no yield at 1.1 ms, the count starts at the next busy poll.
        assert!(!park(&s, 950 * US, 5 * MS, PACE_NS));
        assert!(!park(&s, 6 * MS, 3 * US, PACE_NS));
        assert!(!park(&s, 6 * MS + 990 * US, 3 * US, PACE_NS));
        assert!(park(&s, 7 * MS + 10 * US, 3 * US, PACE_NS));
        // A poll just under the threshold is busy, one at it slept.
        let s = CoreShare::new();
        assert!(!park(&s, 0, SLEPT_NS - 1, 0));
        assert!(park(&s, 100 * US, SLEPT_NS, 0));
        assert!(!park(&s, 200 * US, 3 * US, 0));
    }

    #[test]
    fn an_unpark_without_a_park_changes_nothing() {
        let s = CoreShare::new();
        s.polled(MS, SLEPT_NS);
        assert!(!s.parking(2 * MS, 0));
        s.polled(2 * MS + US, SLEPT_NS);
        // A second unpark must not count as a poll, or as a sleep.
        s.polled(10 * MS, SLEPT_NS);
        assert!(s.parking(10 * MS, 0));
    }

    #[test]
    fn the_hooks_time_each_poll_on_their_thread() {
        // On a thread of its own, whose record starts empty.
        std::thread::spawn(|| {
            let (park, unpark) = hooks(PACE);
            park();
            assert!(SHARE.with(|s| s.polled_at.get()).is_some(), "a poll began");
            std::thread::sleep(SLEPT * 5);
            unpark();
            assert_eq!(
                SHARE.with(|s| (s.polled_at.get(), s.busy_since.get())),
                (None, None),
                "a poll that slept"
            );
            park();
            unpark();
            assert!(SHARE.with(|s| s.polled_at.get()).is_none(), "the poll ended");
        })
        .join()
        .expect("the hooks' thread");
    }
}
