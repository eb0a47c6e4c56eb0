//! Injectable time sources.
//!
//! Limiter arithmetic never reads the system clock itself: every backend is
//! handed a [`Clock`] so tests can drive time by hand ([`ManualClock`]) or with
//! tokio's paused time ([`TokioClock`]), while production uses the cheap
//! monotonic [`MonotonicClock`]. Time is a plain `u64` count of nanoseconds
//! since the clock's own origin; only differences are meaningful.
//!
//! The calendar dimensions (a UTC day, a UTC month) also need wall time:
//! [`Clock::unix_nanos_at`] maps the clock's time to Unix time. The
//! production clocks sample the system's wall time once, at creation, and
//! add the monotonic time elapsed since (so wall time never steps under a
//! running limiter); [`ManualClock::set_unix_nanos`] and [`ShiftedClock`]
//! let tests stand just before a day or month boundary and cross it.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A monotonic source of nanoseconds since an arbitrary origin.
///
/// Implementations must never go backwards: the window and GCRA arithmetic
/// rely on it.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Nanoseconds elapsed since this clock's origin.
    fn now_nanos(&self) -> u64;

    /// The UTC wall time (nanoseconds since the Unix epoch) of the instant
    /// this clock reads as `at`: the calendar dimensions' periods and resets
    /// are computed from it. A fixed offset for the production clocks; a
    /// change of it (a test moving wall time) re-dates every instant,
    /// earlier grants included.
    fn unix_nanos_at(&self, at: u64) -> u64;

    /// The UTC wall time now, nanoseconds since the Unix epoch.
    fn unix_nanos(&self) -> u64 {
        self.unix_nanos_at(self.now_nanos())
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn unix_nanos_at(&self, at: u64) -> u64 {
        (**self).unix_nanos_at(at)
    }
}

/// Origin offset of the monotonic clocks: 1 s keeps "0" free as a sentinel
/// for "never".
const ORIGIN_NS: u64 = 1_000_000_000;

/// The system's wall time now, in Unix nanoseconds: read once per clock, at
/// its creation (and by [`WallShift::stand_at`] in tests), never by limiter
/// arithmetic.
#[allow(clippy::disallowed_methods)]
fn system_unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, duration_to_nanos)
}

/// The production clock: a TSC-backed monotonic clock (`quanta`), a few
/// nanoseconds per read, so the hot path stays cheap.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
    /// Unix nanoseconds at the origin (sampled once, at creation).
    unix_origin: u64,
}

impl MonotonicClock {
    /// A clock whose origin is the moment of creation.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self {
            clock,
            origin,
            unix_origin: system_unix_nanos(),
        }
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
        self.clock.delta_as_nanos(self.origin, self.clock.raw()) + ORIGIN_NS
    }

    #[inline]
    fn unix_nanos_at(&self, at: u64) -> u64 {
        (self.unix_origin + at).saturating_sub(ORIGIN_NS)
    }
}

/// A clock that follows tokio's time, so `#[tokio::test(start_paused = true)]`
/// makes limiter tests deterministic: sleeps and the limiter see the same
/// virtual time.
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    /// Unix nanoseconds at the origin (the system's, sampled at creation).
    unix_origin: u64,
}

impl TokioClock {
    /// A clock whose origin is tokio's `Instant::now()` at creation.
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
            unix_origin: system_unix_nanos(),
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
        duration_to_nanos(d).saturating_add(ORIGIN_NS)
    }

    fn unix_nanos_at(&self, at: u64) -> u64 {
        (self.unix_origin + at).saturating_sub(ORIGIN_NS)
    }
}

/// A clock that only moves when told to; for unit and property tests of the
/// algorithms.
///
/// Its wall time is its time plus an offset (0 at creation: the clock's
/// time read as Unix nanoseconds); [`ManualClock::set_unix_nanos`] moves
/// the offset so a test stands at a chosen UTC instant, and
/// [`ManualClock::advance`] then moves both.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
    unix_offset: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `start` nanoseconds.
    pub fn new(start: u64) -> Self {
        Self {
            now: AtomicU64::new(start),
            unix_offset: AtomicI64::new(0),
        }
    }

    /// Makes the wall time now read `unix_nanos` (the clock's own time does
    /// not move); every instant is re-dated by the same amount.
    pub fn set_unix_nanos(&self, unix_nanos: u64) {
        let offset = i128::from(unix_nanos) - i128::from(self.now_nanos());
        self.unix_offset.store(
            offset.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
            Ordering::SeqCst,
        );
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

    fn unix_nanos_at(&self, at: u64) -> u64 {
        at.saturating_add_signed(self.unix_offset.load(Ordering::SeqCst))
    }
}

/// A shared offset added to a backend's UTC wall time, for tests (stand 1 s
/// before a month end, then cross it) and for a known clock skew. Zero by
/// default. Every clone moves the same offset; a [`ShiftedClock`] applies it
/// in memory, `pressure-redis` adds it to the server's `TIME` in its
/// scripts (the calendar period of a Redis fleet otherwise always comes
/// from the server).
#[derive(Debug, Clone, Default)]
pub struct WallShift(Arc<AtomicI64>);

impl WallShift {
    /// A shift of zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The offset, in nanoseconds.
    pub fn nanos(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Sets the offset, in nanoseconds.
    pub fn set_nanos(&self, nanos: i64) {
        self.0.store(nanos, Ordering::SeqCst);
    }

    /// Sets the offset so that the wall time of a clock that agrees with
    /// this machine's system clock reads `unix_nanos` now (to within the
    /// skew between that clock and this machine's).
    pub fn stand_at(&self, unix_nanos: u64) {
        let offset = i128::from(unix_nanos) - i128::from(system_unix_nanos());
        self.set_nanos(offset.clamp(i64::MIN.into(), i64::MAX.into()) as i64);
    }

    /// `unix_nanos` moved by the offset.
    #[inline]
    pub fn apply(&self, unix_nanos: u64) -> u64 {
        unix_nanos.saturating_add_signed(self.nanos())
    }
}

/// A clock whose wall time is `inner`'s moved by a [`WallShift`]; its own
/// (monotonic) time is `inner`'s.
#[derive(Debug, Clone)]
pub struct ShiftedClock<C> {
    inner: C,
    shift: WallShift,
}

impl<C: Clock> ShiftedClock<C> {
    /// `inner` with its wall time moved by `shift`.
    pub fn new(inner: C, shift: WallShift) -> Self {
        Self { inner, shift }
    }
}

impl<C: Clock> Clock for ShiftedClock<C> {
    fn now_nanos(&self) -> u64 {
        self.inner.now_nanos()
    }

    fn unix_nanos_at(&self, at: u64) -> u64 {
        self.shift.apply(self.inner.unix_nanos_at(at))
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

    #[test]
    fn wall_time_follows_the_clock_and_can_be_set_and_shifted() {
        let c = ManualClock::new(100);
        assert_eq!(c.unix_nanos(), 100);
        c.set_unix_nanos(1_000_000);
        c.advance(Duration::from_nanos(5));
        assert_eq!((c.now_nanos(), c.unix_nanos()), (105, 1_000_005));
        assert_eq!(c.unix_nanos_at(100), 1_000_000, "earlier instants re-dated alike");
        let shift = WallShift::new();
        let s = ShiftedClock::new(Arc::new(c), shift.clone());
        shift.set_nanos(-5);
        assert_eq!((s.now_nanos(), s.unix_nanos()), (105, 1_000_000));
        let m = MonotonicClock::new();
        let wall = system_unix_nanos();
        assert!(
            m.unix_nanos().abs_diff(wall) < 60_000_000_000,
            "anchored on the system's wall time"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let c = TokioClock::new();
        let a = c.now_nanos();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(c.now_nanos() - a, 3_000_000_000);
    }
}
