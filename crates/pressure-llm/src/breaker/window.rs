//! The time-based sliding window of a closed breaker (resilience4j's
//! `TIME_BASED` window).
//!
//! Time is cut into buckets of equal width; bucket `e` covers the clock's
//! nanoseconds `[e·w, (e+1)·w)`. A ring of `n` buckets keeps the counts of
//! the last `n` buckets and running totals over them. Moving to a newer
//! bucket subtracts the buckets that fall out of the ring from the totals, so
//! recording is O(1) amortised (a jump forward clears at most `n` buckets)
//! and reading the totals is O(1). A call is counted while the current
//! bucket is before `e + n`, i.e. it is forgotten between `(n-1)·w` and
//! `n·w` after it was recorded.

/// Call counts: all calls, failed calls, slow calls (failed or not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Calls recorded.
    pub(crate) calls: u64,
    /// Of which failed.
    pub(crate) failures: u64,
    /// Of which slow.
    pub(crate) slow: u64,
}

impl Counts {
    /// Adds one call.
    pub(crate) fn add(&mut self, failed: bool, slow: bool) {
        self.calls += 1;
        self.failures += u64::from(failed);
        self.slow += u64::from(slow);
    }

    fn sub(&mut self, other: Counts) {
        self.calls -= other.calls;
        self.failures -= other.failures;
        self.slow -= other.slow;
    }

    /// `failures / calls`, 0 without calls.
    pub(crate) fn failure_rate(&self) -> f64 {
        ratio(self.failures, self.calls)
    }

    /// `slow / calls`, 0 without calls.
    pub(crate) fn slow_call_rate(&self) -> f64 {
        ratio(self.slow, self.calls)
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Sliding window of call counts in time buckets.
#[derive(Debug)]
pub(crate) struct SlidingWindow {
    bucket_nanos: u64,
    ring: Vec<Counts>,
    /// Bucket index of the newest bucket seen.
    head: u64,
    totals: Counts,
}

impl SlidingWindow {
    /// A window of `buckets` buckets `bucket_ms` wide, empty, with the newest
    /// bucket at `now` nanoseconds.
    pub(crate) fn new(bucket_ms: u64, buckets: u64, now: u64) -> Self {
        let bucket_nanos = bucket_ms.max(1).saturating_mul(1_000_000);
        let n = usize::try_from(buckets.max(1)).unwrap_or(usize::MAX);
        Self {
            bucket_nanos,
            ring: vec![Counts::default(); n],
            head: now / bucket_nanos,
            totals: Counts::default(),
        }
    }

    fn len(&self) -> u64 {
        u64::try_from(self.ring.len()).unwrap_or(u64::MAX)
    }

    fn slot(&self, bucket: u64) -> usize {
        // The remainder is below ring.len(), so it fits in usize.
        (bucket % self.len()) as usize
    }

    /// Forgets everything and restarts at `now`.
    pub(crate) fn reset(&mut self, now: u64) {
        self.ring.iter_mut().for_each(|c| *c = Counts::default());
        self.totals = Counts::default();
        self.head = now / self.bucket_nanos;
    }

    /// Moves the newest bucket to the one holding `now`, dropping the
    /// buckets that leave the window.
    pub(crate) fn advance(&mut self, now: u64) {
        let bucket = now / self.bucket_nanos;
        if bucket <= self.head {
            return;
        }
        let steps = bucket - self.head;
        if steps >= self.len() {
            self.ring.iter_mut().for_each(|c| *c = Counts::default());
            self.totals = Counts::default();
        } else {
            for b in self.head + 1..=bucket {
                let slot = self.slot(b);
                let old = std::mem::take(&mut self.ring[slot]);
                self.totals.sub(old);
            }
        }
        self.head = bucket;
    }

    /// Records one call that ended at `now`. A call older than the window
    /// (possible only if a caller read the clock long before taking the
    /// lock) is dropped.
    pub(crate) fn record(&mut self, now: u64, failed: bool, slow: bool) {
        self.advance(now);
        let bucket = now / self.bucket_nanos;
        if self.head - bucket >= self.len() {
            return;
        }
        let slot = self.slot(bucket);
        self.ring[slot].add(failed, slow);
        self.totals.add(failed, slow);
    }

    /// The totals over the window as of the last `advance`/`record`.
    pub(crate) fn totals(&self) -> Counts {
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn counts_within_window_and_forgets_after() {
        // 10 buckets of 100 ms = 1 s window.
        let mut w = SlidingWindow::new(100, 10, 0);
        w.record(0, true, false);
        w.record(50 * MS, false, true);
        assert_eq!(
            w.totals(),
            Counts {
                calls: 2,
                failures: 1,
                slow: 1
            }
        );
        w.advance(950 * MS);
        assert_eq!(w.totals().calls, 2);
        w.advance(1_000 * MS);
        assert_eq!(w.totals(), Counts::default());
    }

    #[test]
    fn partial_expiry_and_big_jumps() {
        let mut w = SlidingWindow::new(100, 10, 0);
        for i in 0..20 {
            w.record(i * 100 * MS, i % 2 == 0, false);
        }
        // Buckets 10..=19 remain.
        assert_eq!(
            w.totals(),
            Counts {
                calls: 10,
                failures: 5,
                slow: 0
            }
        );
        w.advance(2_450 * MS); // bucket 24: 15..=19 remain
        assert_eq!(w.totals().calls, 5);
        w.advance(1_000_000 * MS);
        assert_eq!(w.totals(), Counts::default());
        w.record(1_000_000 * MS, true, true);
        assert_eq!(
            w.totals(),
            Counts {
                calls: 1,
                failures: 1,
                slow: 1
            }
        );
    }

    #[test]
    fn late_records_land_in_their_bucket_or_are_dropped() {
        let mut w = SlidingWindow::new(100, 10, 0);
        w.advance(1_500 * MS); // head = 15
        w.record(500 * MS, true, false); // bucket 5 < 15 - 10 + 1: dropped
        assert_eq!(w.totals().calls, 0);
        w.record(1_200 * MS, true, false); // bucket 12: kept
        assert_eq!(w.totals().calls, 1);
        w.advance(2_200 * MS); // bucket 22: 12 leaves
        assert_eq!(w.totals().calls, 0);
    }

    #[test]
    fn reset_clears() {
        let mut w = SlidingWindow::new(1_000, 30, 0);
        w.record(5 * MS, true, true);
        w.reset(10 * MS);
        assert_eq!(w.totals(), Counts::default());
    }
}
