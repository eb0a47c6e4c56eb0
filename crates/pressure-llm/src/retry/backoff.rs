//! Exponential backoff with full jitter, and the provider's `retry-after`.
//!
//! The wait before retry `n` (0 for the first retry) is drawn uniformly from
//! `[0, min(cap, base · 2ⁿ)]` — AWS's "full jitter", which spreads a fleet's
//! retries over the whole window instead of bunching them at its end. If the
//! provider sent `retry-after` / `retry-after-ms`, the wait is
//! `max(jittered, retry_after)`: never sooner than asked. A `retry-after`
//! longer than `max_retry_after` is not waited out at all — [`Backoff::delay`]
//! returns `None` and the retry is not made (the next level of the fallback
//! chain is a better use of the event's deadline than a minute of sleep, and
//! retrying earlier than asked would only earn another 429).
//!
//! Defaults: base 500 ms, cap 30 s, longest honoured `retry-after` 60 s.

use std::time::Duration;

use pressure_core::clock::duration_to_nanos;
use rand::{Rng, RngCore};

/// Backoff parameters; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    max_retry_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(
            Self::DEFAULT_BASE,
            Self::DEFAULT_CAP,
            Self::DEFAULT_MAX_RETRY_AFTER,
        )
    }
}

impl Backoff {
    /// Default base delay: 500 ms.
    pub const DEFAULT_BASE: Duration = Duration::from_millis(500);
    /// Default cap of the jittered delay: 30 s.
    pub const DEFAULT_CAP: Duration = Duration::from_secs(30);
    /// Default longest `retry-after` that is waited out: 60 s.
    pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

    /// Backoff with the given base, cap and longest honoured `retry-after`.
    pub const fn new(base: Duration, cap: Duration, max_retry_after: Duration) -> Self {
        Self {
            base,
            cap,
            max_retry_after,
        }
    }

    /// The base delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The cap of the jittered delay.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The longest `retry-after` that is waited out.
    pub const fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// The upper end of the jitter window before retry `retry` (0-based):
    /// `min(cap, base · 2^retry)`, without overflow.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u64.checked_shl(retry).unwrap_or(u64::MAX);
        let grown = duration_to_nanos(self.base).saturating_mul(factor);
        Duration::from_nanos(grown).min(self.cap)
    }

    /// A full-jitter sample for retry `retry`: uniform in `[0, ceiling(retry)]`.
    pub fn jittered<R: RngCore + ?Sized>(&self, retry: u32, rng: &mut R) -> Duration {
        let top = duration_to_nanos(self.ceiling(retry));
        Duration::from_nanos(rng.random_range(0..=top))
    }

    /// The wait before retry `retry` (0-based), given the provider's
    /// `retry_after`: `max(jittered, retry_after)`, or `None` if `retry_after`
    /// exceeds [`max_retry_after`](Self::max_retry_after) and the retry should
    /// not be made.
    pub fn delay<R: RngCore + ?Sized>(
        &self,
        retry: u32,
        retry_after: Option<Duration>,
        rng: &mut R,
    ) -> Option<Duration> {
        let floor = retry_after.unwrap_or(Duration::ZERO);
        if floor > self.max_retry_after {
            return None;
        }
        Some(self.jittered(retry, rng).max(floor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn ceiling_doubles_then_caps_and_never_overflows() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(0), Duration::from_millis(500));
        assert_eq!(b.ceiling(1), Duration::from_secs(1));
        assert_eq!(b.ceiling(5), Duration::from_secs(16));
        assert_eq!(b.ceiling(6), Duration::from_secs(30));
        assert_eq!(b.ceiling(64), Duration::from_secs(30));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn too_long_retry_after_is_not_waited_out() {
        let b = Backoff::default();
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            b.delay(0, Some(Duration::from_secs(60)), &mut rng),
            Some(Duration::from_secs(60))
        );
        assert_eq!(b.delay(0, Some(Duration::from_millis(60_001)), &mut rng), None);
    }
}
