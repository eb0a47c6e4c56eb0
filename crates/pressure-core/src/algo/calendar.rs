//! The count of one calendar dimension (`requestsPerDay`, ...): the units
//! admitted in one fixed UTC period, tagged with that period so a count of
//! a period that has ended reads as zero and is replaced by the next one's.
//!
//! Pure arithmetic on Unix nanoseconds handed in by the backend (from its
//! injected clock), like the window and GCRA modules.

use crate::calendar::{period_and_wait_ns, Calendar};
use crate::units::UnitsDelta;

/// Units counted in `period` (an index of [`Calendar::period`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CalendarCount {
    period: u64,
    used: u64,
}

impl CalendarCount {
    /// Units counted in the period of `unix_ns` (zero once it has ended).
    pub(crate) fn used(&self, calendar: Calendar, unix_ns: u64) -> u64 {
        let (period, _) = period_and_wait_ns(calendar, unix_ns);
        self.used_in(period)
    }

    fn used_in(&self, period: u64) -> u64 {
        if self.period == period {
            self.used
        } else {
            0
        }
    }

    /// Whether `units` more fit under `limit` in the period of `unix_ns`;
    /// else the nanoseconds until the period ends (the exact wait: nothing
    /// leaves a calendar count before its reset).
    pub(crate) fn check(&self, calendar: Calendar, unix_ns: u64, units: u64, limit: u64) -> Result<(), u64> {
        let (period, wait) = period_and_wait_ns(calendar, unix_ns);
        if units == 0 || self.used_in(period).saturating_add(units) <= limit {
            Ok(())
        } else {
            Err(wait.max(1))
        }
    }

    /// Counts `units` in the period of `unix_ns` (after a passing
    /// [`CalendarCount::check`]); a new period starts from zero.
    pub(crate) fn commit(&mut self, calendar: Calendar, unix_ns: u64, units: u64) {
        if units == 0 {
            return;
        }
        let (period, _) = period_and_wait_ns(calendar, unix_ns);
        self.used = self.used_in(period).saturating_add(units);
        self.period = period;
    }

    /// Corrects the count by `delta` for a grant made at `granted_unix_ns`:
    /// only while its period is still the one counted (a grant of an ended
    /// period never touches the next one's count; a count of an earlier
    /// period, left by a grant of nothing, is zero in the grant's). Never
    /// below zero; an addition saturates at `u64::MAX`, and a count pinned
    /// there has lost its exact figure, so it stays pinned for the period
    /// (a refund cannot tell how much of it is still held).
    pub(crate) fn adjust(&mut self, calendar: Calendar, granted_unix_ns: u64, delta: UnitsDelta) {
        let (period, _) = period_and_wait_ns(calendar, granted_unix_ns);
        if self.period < period {
            self.period = period;
            self.used = 0;
        }
        if self.period == period && self.used != u64::MAX {
            self.used = delta.apply(self.used);
        }
    }

    /// Whether nothing is counted in the period of `unix_ns`.
    pub(crate) fn is_empty(&self, calendar: Calendar, unix_ns: u64) -> bool {
        self.used(calendar, unix_ns) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400 * 1_000_000_000;

    #[test]
    fn counts_per_period_and_waits_until_the_reset() {
        let mut c = CalendarCount::default();
        let t = 20_000 * DAY - 1_000_000_000; // 1 s before a midnight
        assert_eq!(c.check(Calendar::Day, t, 3, 3), Ok(()));
        c.commit(Calendar::Day, t, 3);
        assert_eq!(c.check(Calendar::Day, t, 1, 3), Err(1_000_000_000));
        assert_eq!(
            c.check(Calendar::Day, t, 0, 3),
            Ok(()),
            "no units, nothing to refuse"
        );
        // Reconcile down frees, up takes more; never below zero.
        c.adjust(Calendar::Day, t, UnitsDelta::Down(2));
        assert_eq!(c.used(Calendar::Day, t), 1);
        c.adjust(Calendar::Day, t, UnitsDelta::Down(5));
        assert_eq!(c.used(Calendar::Day, t), 0);
        c.adjust(Calendar::Day, t, UnitsDelta::Up(3));
        // The next day starts from zero; a reconcile of yesterday's grant
        // does not touch it.
        let next = t + 2_000_000_000;
        assert_eq!(c.used(Calendar::Day, next), 0);
        c.commit(Calendar::Day, next, 2);
        c.adjust(Calendar::Day, t, UnitsDelta::Up(100));
        assert_eq!(c.used(Calendar::Day, next), 2);
        assert!(!c.is_empty(Calendar::Day, next));
        assert!(c.is_empty(Calendar::Day, next + DAY));
    }
}
