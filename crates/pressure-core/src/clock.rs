//! Injectable time sources.
//!
//! Limiter arithmetic never reads the system clock itself: every backend is
//! handed a [`Clock`] so tests can drive time by hand ([`ManualClock`]) or with
//! tokio's paused time ([`TokioClock`]), while production uses the cheap
//! monotonic [`MonotonicClock`]. Time is a plain `u64` count of nanoseconds
//! since the clock's own origin; only differences are meaningful.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A monotonic source of nanoseconds since an arbitrary origin.
///
/// Implementations must never go backwards: the window and GCRA arithmetic
/// rely on it.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Nanoseconds elapsed since this clock's origin.
    fn now_nanos(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

/// The production clock: a TSC-backed monotonic clock (`quanta`), a few
/// nanoseconds per read, so the hot path stays cheap.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
}

impl MonotonicClock {
    /// A clock whose origin is the moment of creation.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Origin offset of 1 s keeps "0" free as a sentinel for "never".
        self.clock.delta_as_nanos(self.origin, self.clock.raw()) + 1_000_000_000
    }
}

/// A clock that follows tokio's time, so `#[tokio::test(start_paused = true)]`
/// makes limiter tests deterministic: sleeps and the limiter see the same
/// virtual time.
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is tokio's `Instant::now()` at creation.
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_nanos(&self) -> u64 {
        let d = tokio::time::Instant::now().saturating_duration_since(self.origin);
        duration_to_nanos(d).saturating_add(1_000_000_000)
    }
}

/// A clock that only moves when told to; for unit and property tests of the
/// algorithms.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `start` nanoseconds.
    pub fn new(start: u64) -> Self {
        Self {
            now: AtomicU64::new(start),
        }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(duration_to_nanos(d), Ordering::SeqCst);
    }

    /// Sets the clock to `nanos`; never moves it backwards.
    pub fn set(&self, nanos: u64) {
        self.now.fetch_max(nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_nanos(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// Saturating conversion of a duration to nanoseconds.
#[inline]
pub fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Saturating conversion of a duration to whole milliseconds (for configs,
/// logs and JSON).
#[inline]
pub fn duration_to_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_moves_forward() {
        let c = MonotonicClock::new();
        let a = c.now_nanos();
        std::thread::sleep(Duration::from_millis(2));
        let b = c.now_nanos();
        assert!(b >= a + 1_000_000, "{a} -> {b}");
    }

    #[test]
    fn manual_clock_never_goes_back() {
        let c = ManualClock::new(100);
        c.set(50);
        assert_eq!(c.now_nanos(), 100);
        c.advance(Duration::from_nanos(5));
        assert_eq!(c.now_nanos(), 105);
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let c = TokioClock::new();
        let a = c.now_nanos();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(c.now_nanos() - a, 3_000_000_000);
    }
}
