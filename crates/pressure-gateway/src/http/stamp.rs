//! The clock the gateway stamps its requests and sockets with: `quanta`'s
//! counter (the TSC where the CPU keeps a steady one), the broker's clock
//! too. A stamp is the counter read raw, scaled to time only when two are
//! subtracted: a dozen instructions, where the system clock and `Instant`
//! arithmetic take a hundred, at every socket read and write and twice per
//! request. Tokio's timers keep their own clock; what is timed against a
//! stamp sleeps relative to now, so the two never have to agree on an
//! instant.

use std::sync::LazyLock;
use std::time::Duration;

/// One clock for the process (its calibration is global to `quanta`, done
/// once when the first clock is made).
static CLOCK: LazyLock<quanta::Clock> = LazyLock::new(quanta::Clock::new);

/// A moment, as the counter read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp(u64);

impl Stamp {
    /// Now.
    #[inline]
    pub(crate) fn now() -> Self {
        Self(CLOCK.raw())
    }

    /// The time since `self` (zero if the counter reads earlier, as it may
    /// across cores).
    #[inline]
    pub(crate) fn elapsed(self) -> Duration {
        Duration::from_nanos(self.elapsed_nanos())
    }

    /// Whole milliseconds since `self`.
    #[inline]
    pub(crate) fn elapsed_ms(self) -> u64 {
        self.elapsed_nanos() / 1_000_000
    }

    fn elapsed_nanos(self) -> u64 {
        CLOCK.delta_as_nanos(self.0, CLOCK.raw())
    }

    /// The counter's raw reading, for code that compares many readings
    /// against a fixed span without scaling each one (see [`ticks`]).
    #[inline]
    pub(crate) fn raw(self) -> u64 {
        self.0
    }
}

/// How many counter ticks `span` lasts (at least 1 for a non-zero span):
/// a span to compare differences of [`Stamp::raw`] readings with.
pub(crate) fn ticks(span: Duration) -> u64 {
    /// Nanoseconds in [`PROBE`] ticks, once per process.
    static PROBE_NS: LazyLock<u64> = LazyLock::new(|| CLOCK.delta_as_nanos(0, PROBE).max(1));
    const PROBE: u64 = 1 << 32;
    if span.is_zero() {
        return 0;
    }
    let t = span.as_nanos().saturating_mul(u128::from(PROBE)) / u128::from(*PROBE_NS);
    u64::try_from(t).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_follow_the_system_clock() {
        let (stamp, started) = (Stamp::now(), tokio::time::Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (ours, system) = (stamp.elapsed(), started.elapsed());
        assert!(ours >= Duration::from_millis(19), "{ours:?}");
        // Read after ours: the system's can only be longer, give or take
        // the calibration's error.
        assert!(
            ours <= system + Duration::from_millis(2),
            "{ours:?} vs {system:?}"
        );
        assert!(stamp.elapsed_ms() >= 19);
        assert!(Stamp::now() >= stamp);
    }

    #[test]
    fn ticks_measure_spans_of_raw_readings() {
        assert_eq!(ticks(Duration::ZERO), 0);
        assert!(ticks(Duration::from_nanos(1)) >= 1);
        // Whatever the counter's rate (the TSC, the monotonic clock's
        // nanoseconds, an ARM timer's tens of MHz), a millisecond is many
        // ticks and ten are ten times as many.
        let ms = ticks(Duration::from_millis(1));
        assert!(ms >= 1_000, "{ms}");
        let ten = ticks(Duration::from_millis(10));
        assert!(ten.abs_diff(10 * ms) <= 10, "{ten} vs {ms}");
        let a = Stamp::now();
        std::thread::sleep(Duration::from_millis(2));
        let passed = Stamp::now().raw().saturating_sub(a.raw());
        assert!(passed >= 2 * ms - ms / 100, "{passed} ticks, {ms} per ms");
    }
}
