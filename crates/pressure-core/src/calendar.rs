//! Fixed UTC calendar periods (a day, a month) for the calendar dimensions
//! (`requestsPerDay`, `tokensPerDay`, `costMicroUsdPerDay`,
//! `costMicroUsdPerMonth`): which period an instant falls in and when the
//! next one starts.
//!
//! Pure arithmetic on Unix time (UTC, no leap seconds, as every Unix clock
//! counts), with the days-from-civil conversion of H. Hinnant's
//! `chrono`-compatible algorithms, so backends and callers ("spend, budget,
//! resets at") agree on every boundary without a date library.

const MS_PER_DAY: u64 = 86_400_000;

/// A fixed UTC calendar window: counts reset at its boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Calendar {
    /// A UTC day: resets at 00:00:00 UTC.
    Day,
    /// A UTC month: resets on the first of the month at 00:00:00 UTC.
    Month,
}

impl Calendar {
    /// The index of the period holding `unix_ms`: days since 1970-01-01 for
    /// [`Calendar::Day`], months since January 1970 for [`Calendar::Month`].
    /// Two instants are in the same period iff their indices are equal.
    pub fn period(self, unix_ms: u64) -> u64 {
        let day = unix_ms / MS_PER_DAY;
        match self {
            Calendar::Day => day,
            Calendar::Month => {
                let (y, m, _) = civil_from_days(day);
                (y - 1970) * 12 + (m - 1)
            }
        }
    }

    /// The first instant (Unix ms) of period `period` (see
    /// [`Calendar::period`]).
    pub fn period_start(self, period: u64) -> u64 {
        match self {
            Calendar::Day => period.saturating_mul(MS_PER_DAY),
            Calendar::Month => {
                let (y, m) = (1970 + period / 12, period % 12 + 1);
                days_from_civil(y, m, 1).saturating_mul(MS_PER_DAY)
            }
        }
    }

    /// The next boundary after `unix_ms`: the next UTC midnight
    /// ([`Calendar::Day`]) or first-of-the-month midnight
    /// ([`Calendar::Month`]), strictly later than `unix_ms`.
    pub fn next_reset(self, unix_ms: u64) -> u64 {
        self.period_start(self.period(unix_ms).saturating_add(1))
    }

    /// The JSON-facing name of the period (`day`, `month`).
    pub fn as_str(self) -> &'static str {
        match self {
            Calendar::Day => "day",
            Calendar::Month => "month",
        }
    }
}

/// Nanosecond forms for the backends: the period of `unix_ns`, and the
/// nanoseconds from `unix_ns` until the period ends (the exact wait of a
/// denial: boundaries are whole milliseconds).
pub(crate) fn period_and_wait_ns(calendar: Calendar, unix_ns: u64) -> (u64, u64) {
    let ms = unix_ns / 1_000_000;
    let reset_ns = calendar.next_reset(ms).saturating_mul(1_000_000);
    (calendar.period(ms), reset_ns.saturating_sub(unix_ns))
}

/// Days since 1970-01-01 of the civil date `y-m-d` (`m` in 1..=12), for
/// dates from 1970 on.
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    // Years start in March, so the leap day is the last of the year.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

/// The civil date `(year, month 1..=12, day 1..=31)` of `days` since
/// 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Unix ms of `y-m-d` 00:00 UTC.
    fn at(y: u64, m: u64, d: u64) -> u64 {
        days_from_civil(y, m, d) * MS_PER_DAY
    }

    #[test]
    fn known_dates() {
        assert_eq!(at(1970, 1, 1), 0);
        // 2000-03-01 and 2024-02-29 (leap days of a century and a plain leap year).
        assert_eq!(at(2000, 3, 1), 951_868_800_000);
        assert_eq!(at(2024, 2, 29), 1_709_164_800_000);
        assert_eq!(civil_from_days(at(2024, 2, 29) / MS_PER_DAY), (2024, 2, 29));
        assert_eq!(civil_from_days(at(2100, 3, 1) / MS_PER_DAY - 1), (2100, 2, 28));
    }

    #[test]
    fn month_ends_of_28_29_30_31_days() {
        for (y, m, days) in [(2027, 2, 28), (2028, 2, 29), (2026, 4, 30), (2026, 12, 31)] {
            let start = at(y, m, 1);
            let last_second = start + days * MS_PER_DAY - 1_000;
            assert_eq!(Calendar::Month.period(last_second), Calendar::Month.period(start));
            let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            assert_eq!(Calendar::Month.next_reset(last_second), at(ny, nm, 1), "{y}-{m}");
            assert_eq!(Calendar::Month.next_reset(start), at(ny, nm, 1));
            assert_eq!(Calendar::Day.next_reset(last_second), at(ny, nm, 1));
        }
        assert_eq!(
            period_and_wait_ns(Calendar::Day, (at(2026, 12, 31) + MS_PER_DAY - 1_000) * 1_000_000).1,
            1_000_000_000
        );
    }

    proptest! {
        /// The reset is later, is a boundary, and no boundary lies between.
        #[test]
        fn next_reset_is_the_next_boundary(ms in 0u64..8_000_000_000_000) {
            for c in [Calendar::Day, Calendar::Month] {
                let r = c.next_reset(ms);
                prop_assert!(r > ms);
                prop_assert_eq!(r % MS_PER_DAY, 0, "a UTC midnight");
                prop_assert_eq!(c.period(r), c.period(ms) + 1);
                prop_assert_eq!(c.period(r - 1), c.period(ms), "no boundary in between");
                prop_assert_eq!(c.period_start(c.period(r)), r);
                if c == Calendar::Month {
                    prop_assert_eq!(civil_from_days(r / MS_PER_DAY).2, 1, "the first of a month");
                }
            }
        }

        #[test]
        fn civil_round_trip(days in 0u64..3_000_000) {
            let (y, m, d) = civil_from_days(days);
            prop_assert!((1..=12).contains(&m) && (1..=31).contains(&d));
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
