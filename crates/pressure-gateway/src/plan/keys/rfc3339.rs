//! A key's `expiresAt`: an RFC 3339 date-time
//! (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`), read to Unix milliseconds
//! and written back in UTC with milliseconds.

use crate::settings::ConfigError;

/// The problem of an unreadable `expiresAt`.
fn unreadable() -> ConfigError {
    ConfigError::new(
        "expiresAt",
        "must be an RFC 3339 date-time after 1970, e.g. 2030-01-31T12:00:00Z",
    )
}

/// The `n` ASCII digits of `s` at `at`, as a number.
fn digits(s: &[u8], at: usize, n: usize) -> Option<u32> {
    let part = s.get(at..at + n)?;
    part.iter().try_fold(0u32, |acc, b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

/// `text` as Unix milliseconds (a fraction beyond them is cut).
pub(crate) fn parse_ms(text: &str) -> Result<u64, ConfigError> {
    parse(text.as_bytes()).ok_or_else(unreadable)
}

fn parse(s: &[u8]) -> Option<u64> {
    let sep = |at: usize, c: &[u8]| s.get(at).is_some_and(|b| c.contains(b));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let year = i32::try_from(digits(s, 0, 4)?).ok()?;
    let month = u8::try_from(digits(s, 5, 2)?).ok()?;
    let day = u8::try_from(digits(s, 8, 2)?).ok()?;
    let (h, m, sec) = (digits(s, 11, 2)?, digits(s, 14, 2)?, digits(s, 17, 2)?);
    let mut at = 19;
    let mut nanos = 0u32;
    if s.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while s.get(at).is_some_and(u8::is_ascii_digit) {
            if at - start < 9 {
                nanos = nanos * 10 + u32::from(s[at] - b'0');
            }
            at += 1;
        }
        let n = at - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            nanos *= 10;
        }
    }
    let offset_secs: i32 = match s.get(at..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (digits(s, at + 1, 2)?, digits(s, at + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let secs = i32::try_from(oh * 3600 + om * 60).ok()?;
            if *sign == b'-' {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    let date = time::Date::from_calendar_date(year, time::Month::try_from(month).ok()?, day).ok()?;
    let clock = time::Time::from_hms_nano(
        u8::try_from(h).ok()?,
        u8::try_from(m).ok()?,
        u8::try_from(sec).ok()?,
        nanos,
    )
    .ok()?;
    let offset = time::UtcOffset::from_whole_seconds(offset_secs).ok()?;
    let instant = time::PrimitiveDateTime::new(date, clock).assume_offset(offset);
    u64::try_from(instant.unix_timestamp_nanos() / 1_000_000).ok()
}

/// `ms` (Unix milliseconds) as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn format_ms(ms: u64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rfc3339_and_writes_utc_milliseconds() {
        assert_eq!(parse_ms("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_ms("1970-01-01T00:00:01.5Z").unwrap(), 1_500);
        assert_eq!(parse_ms("1970-01-01t01:00:00+01:00").unwrap(), 0);
        assert_eq!(parse_ms("1970-01-01T00:00:00-00:30").unwrap(), 1_800_000);
        assert_eq!(
            parse_ms("2030-01-31T12:00:00.123456789Z").unwrap(),
            1_896_091_200_123
        );
        assert_eq!(format_ms(1_896_091_200_123), "2030-01-31T12:00:00.123Z");
        for bad in [
            "",
            "2030-01-31",
            "2030-01-31T12:00:00",
            "2030-02-30T12:00:00Z",
            "2030-01-31T24:00:00Z",
            "2030-01-31T12:00:00.Z",
            "2030-01-31T12:00:00+25:00",
            "1969-12-31T23:59:59Z",
            "2030-01-31T12:00:00Zjunk",
            "２０３０-01-31T12:00:00Z",
        ] {
            assert!(parse_ms(bad).is_err(), "{bad:?}");
        }
    }
}
