//! Wall-clock times as Anthropic's headers carry them: the HTTP `date`
//! (IMF-fixdate) and RFC 3339 reset times.

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// An IMF-fixdate (`Wed, 21 Oct 2015 07:28:00 GMT`) of Unix seconds.
pub(crate) fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (secs / 86_400) as i64;
    let (y, m, d) = civil_from_days(days);
    let rem = secs % 86_400;
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// An RFC 3339 UTC time with milliseconds (`2015-10-21T07:28:00.250Z`) of Unix milliseconds.
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    let secs = ms / 1_000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        ms % 1_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pressure_llm::provider::ratelimit::{parse_http_date, parse_rfc3339};

    #[test]
    fn dates_read_back_with_the_clients_parsers() {
        assert_eq!(http_date(1_445_412_480), "Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(rfc3339_ms(1_445_412_480_250), "2015-10-21T07:28:00.250Z");
        for secs in [0u64, 951_782_400, 1_709_210_096, 4_102_444_799] {
            assert_eq!(parse_http_date(&http_date(secs)), Some(secs as f64), "{secs}");
            let back = parse_rfc3339(&rfc3339_ms(secs * 1_000 + 500)).unwrap();
            assert!((back - (secs as f64 + 0.5)).abs() < 1e-6, "{secs}");
        }
    }
}
