//! The local rate a lease is sized by: eligible decisions counted per lease
//! TTL, this period and the last. Pure arithmetic on times it is given,
//! so tests drive it without a clock.

/// Decisions per TTL period, this one and the one before.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Rate {
    start_ns: u64,
    cur: u64,
    prev: u64,
}

impl Rate {
    /// Counts one decision at `now_ns`, with periods of `period_ns`.
    pub(crate) fn tick(&mut self, now_ns: u64, period_ns: u64) {
        let elapsed = now_ns.saturating_sub(self.start_ns);
        if elapsed >= period_ns {
            // A gap of more than a period: the last full one saw nothing.
            self.prev = if elapsed < period_ns.saturating_mul(2) {
                self.cur
            } else {
                0
            };
            self.cur = 0;
            self.start_ns = now_ns;
        }
        self.cur += 1;
    }

    /// Decisions per period lately: the larger of the last full period and
    /// the current one so far (a burst warms up within its first period).
    pub(crate) fn per_period(&self) -> u64 {
        self.prev.max(self.cur)
    }
}

#[cfg(test)]
mod tests {
    use super::Rate;

    const P: u64 = 1_000;

    #[test]
    fn counts_this_and_the_last_period_and_forgets_gaps() {
        let mut r = Rate::default();
        for t in 0..10 {
            r.tick(t * 50, P);
        }
        assert_eq!(r.per_period(), 10);
        r.tick(P + 1, P);
        assert_eq!(r.per_period(), 10, "the last full period still counts");
        r.tick(3 * P + 10, P);
        assert_eq!(r.per_period(), 1, "a silent period resets the rate");
        let mut slow = Rate::default();
        for t in 0..20 {
            slow.tick(t * 600, P);
        }
        assert!(slow.per_period() <= 2, "{}", slow.per_period());
    }
}
