//! `pressure gateway --share-cores`: a saturated server thread offers its
//! core to the other threads waiting for it.
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
//! With `--share-cores`, a server thread whose last poll for I/O found work
//! without waiting yields its core (`sched_yield`) the next time it runs out
//! of tasks, before it polls again: it leaves nothing half done there, and
//! a thread waiting for the core runs at once. A thread that slept in its
//! last poll gave the core up anyway and does not yield, so a server that
//! is not saturated makes no extra system call. That p99 fell to 0.9–4.3
//! ms.
//!
//! It is not the default: under saturation every party on the box then
//! wakes more often for fewer events, and the proxy's CPU per request rose
//! by 10–15 % (docs/benchmarks.md, "Issue 22, eighth round"). Alone on its
//! cores a server gains nothing from it.

use crate::stamp::Stamp;
use std::cell::Cell;
use std::time::Duration;

/// A poll for I/O that lasted this long slept: the core was free for
/// others meanwhile. A poll that finds events ready takes a few
/// microseconds.
const SLEPT: Duration = Duration::from_micros(20);

/// One server thread's record of its last poll for I/O.
#[derive(Debug)]
struct CoreShare {
    /// Whether the last poll found work without sleeping.
    busy: Cell<bool>,
    /// When the current poll began (read twice per park, so the cheap
    /// counter rather than the system clock).
    polled_at: Cell<Option<Stamp>>,
}

impl CoreShare {
    const fn new() -> Self {
        Self {
            busy: Cell::new(false),
            polled_at: Cell::new(None),
        }
    }

    /// The thread ran out of tasks: whether it should yield its core before
    /// it polls for I/O.
    fn should_yield(&self) -> bool {
        self.busy.get()
    }

    /// The thread starts polling for I/O at `at` (after any yield).
    fn polling(&self, at: Stamp) {
        self.polled_at.set(Some(at));
    }

    /// The thread's poll for I/O returned.
    fn polled(&self) {
        if let Some(at) = self.polled_at.take() {
            self.record(at.elapsed());
        }
    }

    /// The last poll took `took`.
    fn record(&self, took: Duration) {
        self.busy.set(took < SLEPT);
    }
}

thread_local! {
    static SHARE: CoreShare = const { CoreShare::new() };
}

/// A server runtime's `on_thread_park`: yields the core when the thread's
/// last poll found work without waiting.
pub(crate) fn on_park() {
    SHARE.with(|s| {
        if s.should_yield() {
            std::thread::yield_now();
        }
        s.polling(Stamp::now());
    });
}

/// A server runtime's `on_thread_unpark`.
pub(crate) fn on_unpark() {
    SHARE.with(CoreShare::polled);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs out of tasks; the poll for I/O takes `took`. Whether the thread
    /// yielded first.
    fn park(s: &CoreShare, took: Duration) -> bool {
        let yielded = s.should_yield();
        s.record(took);
        yielded
    }

    #[test]
    fn a_thread_whose_polls_find_work_at_once_yields_before_each_next_poll() {
        let s = CoreShare::new();
        let at_once = Duration::from_micros(3);
        let yields: Vec<bool> = (0..4).map(|_| park(&s, at_once)).collect();
        // The first poll has no last poll to go by.
        assert_eq!(yields, [false, true, true, true]);
    }

    #[test]
    fn a_thread_that_slept_in_its_last_poll_does_not_yield() {
        let s = CoreShare::new();
        assert!(!park(&s, Duration::from_millis(5)));
        assert!(!park(&s, SLEPT));
        // A busy poll, then one that slept, then busy ones again.
        assert!(!park(&s, Duration::from_micros(1)));
        assert!(park(&s, Duration::from_micros(500)));
        assert!(!park(&s, SLEPT - Duration::from_nanos(1)));
        assert!(park(&s, Duration::from_micros(1)));
    }

    #[test]
    fn a_poll_is_timed_from_its_start_and_counted_once() {
        let s = CoreShare::new();
        // An unpark without a park changes nothing.
        s.polled();
        assert!(!s.should_yield());
        s.polling(Stamp::now());
        std::thread::sleep(SLEPT * 5);
        s.polled();
        assert!(!s.should_yield(), "a poll that slept");
        s.record(Duration::from_micros(1));
        s.polled();
        assert!(s.should_yield(), "a second unpark must not count as a sleep");
    }
}
