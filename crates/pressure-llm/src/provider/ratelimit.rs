//! Rate-limit hints from a provider's response headers.
//!
//! OpenAI sends `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` with
//! resets as Go-style durations (`1s`, `6m0s`, `20ms`); Anthropic sends
//! `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
//! with resets as RFC 3339 timestamps, turned into a duration against the
//! response's own `date` header (no local wall clock is read; without a
//! `date` header the reset is ignored). The limiter uses the hints to tighten
//! itself before the provider answers 429.

use std::time::Duration;

use crate::taxonomy;

/// What the provider said about its remaining quota. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitHints {
    /// Requests per window allowed.
    pub limit_requests: Option<u64>,
    /// Tokens per window allowed.
    pub limit_tokens: Option<u64>,
    /// Requests left in the current window.
    pub remaining_requests: Option<u64>,
    /// Tokens left in the current window.
    pub remaining_tokens: Option<u64>,
    /// Input tokens left (Anthropic).
    pub remaining_input_tokens: Option<u64>,
    /// Output tokens left (Anthropic).
    pub remaining_output_tokens: Option<u64>,
    /// Until the request window resets.
    pub reset_requests: Option<Duration>,
    /// Until the token window resets (Anthropic without
    /// `anthropic-ratelimit-tokens-reset`: the later of its input and output
    /// token resets).
    pub reset_tokens: Option<Duration>,
    /// `retry-after-ms` / `retry-after`.
    pub retry_after: Option<Duration>,
}

impl RateLimitHints {
    /// [`from_pairs`](Self::from_pairs) of a response's headers; the pairs
    /// are built only when some header name is a hint's.
    pub(crate) fn from_header_map(headers: &http::HeaderMap) -> Self {
        if !headers.keys().any(|k| is_hint_name(k.as_str())) {
            return Self::default();
        }
        Self::from_pairs(&header_pairs(headers))
    }

    /// Parses the hints from header (name, value) pairs; names match
    /// case-insensitively, unparsable values are ignored.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(headers: &[(K, V)]) -> Self {
        // Most answers carry no hint at all (a self-hosted model, a mock):
        // one cheap look at the names before some sixteen searches and a
        // date parse.
        if !headers.iter().any(|(k, _)| is_hint_name(k.as_ref().trim())) {
            return Self::default();
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.as_ref().trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_ref().trim())
        };
        let num = |name: &str| find(name).and_then(|v| v.parse::<u64>().ok());
        let date = find("date").and_then(parse_http_date);
        let anthropic_reset = |name: &str| {
            let reset = find(name).and_then(parse_rfc3339)?;
            let now = date?;
            Some(Duration::try_from_secs_f64((reset - now).max(0.0)).unwrap_or_default())
        };
        let ogo = |name: &str| find(name).and_then(parse_go_duration);
        Self {
            limit_requests: num("x-ratelimit-limit-requests")
                .or_else(|| num("anthropic-ratelimit-requests-limit")),
            limit_tokens: num("x-ratelimit-limit-tokens").or_else(|| num("anthropic-ratelimit-tokens-limit")),
            remaining_requests: num("x-ratelimit-remaining-requests")
                .or_else(|| num("anthropic-ratelimit-requests-remaining")),
            remaining_tokens: num("x-ratelimit-remaining-tokens")
                .or_else(|| num("anthropic-ratelimit-tokens-remaining")),
            remaining_input_tokens: num("anthropic-ratelimit-input-tokens-remaining"),
            remaining_output_tokens: num("anthropic-ratelimit-output-tokens-remaining"),
            reset_requests: ogo("x-ratelimit-reset-requests")
                .or_else(|| anthropic_reset("anthropic-ratelimit-requests-reset")),
            reset_tokens: ogo("x-ratelimit-reset-tokens")
                .or_else(|| anthropic_reset("anthropic-ratelimit-tokens-reset"))
                .or_else(|| {
                    // Only the per-direction windows: the later reset frees both.
                    let input = anthropic_reset("anthropic-ratelimit-input-tokens-reset");
                    let output = anthropic_reset("anthropic-ratelimit-output-tokens-reset");
                    input.max(output)
                }),
            retry_after: taxonomy::retry_after(headers),
        }
    }

    /// True when no hint was found.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Whether `name` is one of the headers [`RateLimitHints::from_pairs`]
/// reads a hint from (any case).
fn is_hint_name(name: &str) -> bool {
    let starts = |prefix: &str| {
        name.get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    starts("x-ratelimit-") || starts("anthropic-ratelimit-") || starts("retry-after")
}

/// Parses a Go-style duration as OpenAI sends it: `1s`, `6m0s`, `20ms`,
/// `1h2m3.5s`, `0.5s`. Units: `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix seconds of a calendar date and time, with range checks.
fn unix_seconds(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: f64) -> Option<f64> {
    let ok = (1..=12).contains(&mo)
        && (1..=31).contains(&d)
        && (0..=23).contains(&h)
        && (0..=59).contains(&mi)
        && (0.0..61.0).contains(&s);
    ok.then(|| (days_from_civil(y, mo, d) * 86_400 + h * 3_600 + mi * 60) as f64 + s)
}

/// Parses a simple RFC 3339 timestamp (`2024-05-01T12:00:30Z`,
/// `2024-05-01T12:00:30.5+02:00`) to Unix seconds; anything else is `None`.
pub fn parse_rfc3339(s: &str) -> Option<f64> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let int = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok());
    let (y, mo, d, h, mi) = (int(0..4)?, int(5..7)?, int(8..10)?, int(11..13)?, int(14..16)?);
    let tail = s.get(17..)?;
    let tz_at = tail.find(['Z', 'z', '+', '-'])?;
    let sec: f64 = tail[..tz_at].parse().ok()?;
    let tz = &tail[tz_at..];
    let offset = match tz {
        "Z" | "z" => 0,
        _ => {
            let tb = tz.as_bytes();
            if tb.len() != 6 || tb[3] != b':' {
                return None;
            }
            let sign = if tb[0] == b'-' { -1 } else { 1 };
            let oh: i64 = tz.get(1..3)?.parse().ok()?;
            let om: i64 = tz.get(4..6)?.parse().ok()?;
            sign * (oh * 3_600 + om * 60)
        }
    };
    Some(unix_seconds(y, mo, d, h, mi, sec)? - offset as f64)
}

/// Parses an HTTP `date` header in IMF-fixdate form
/// (`Wed, 21 Oct 2015 07:28:00 GMT`) to Unix seconds.
pub fn parse_http_date(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let _weekday = it.next()?;
    let d: i64 = it.next()?.parse().ok()?;
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mon = it.next()?;
    let mo = i64::try_from(months.iter().position(|m| m.eq_ignore_ascii_case(mon))?).ok()? + 1;
    let y: i64 = it.next()?.parse().ok()?;
    let mut hms = it.next()?.split(':');
    let h: i64 = hms.next()?.parse().ok()?;
    let mi: i64 = hms.next()?.parse().ok()?;
    let sec: f64 = hms.next()?.parse().ok()?;
    if it.next()? != "GMT" {
        return None;
    }
    unix_seconds(y, mo, d, h, mi, sec)
}

/// Header (name, value) pairs, for [`crate::taxonomy::classify`] and the hints; values that are
/// not UTF-8 are skipped. Built only when an answer is classified.
pub(crate) fn header_pairs(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hint_names_are_found_in_any_case_and_others_ignored() {
        let none = [
            ("date", "Wed, 21 Oct 2015 07:28:00 GMT"),
            ("content-type", "application/json"),
        ];
        assert!(RateLimitHints::from_pairs(&none).is_empty());
        let mixed = [("content-type", "x"), (" X-RateLimit-Remaining-Requests", "7")];
        assert_eq!(RateLimitHints::from_pairs(&mixed).remaining_requests, Some(7));
        let retry = [("Retry-After", "2")];
        assert_eq!(
            RateLimitHints::from_pairs(&retry).retry_after,
            Some(Duration::from_secs(2))
        );
        assert!(
            !is_hint_name("x-ratelimit"),
            "a prefix of the prefix is not a hint"
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(
            parse_go_duration("1h2m3.5s"),
            Some(Duration::from_millis(3_723_500))
        );
        assert_eq!(parse_go_duration("abc"), None);
        assert_eq!(parse_go_duration("5x"), None);
    }

    #[test]
    fn dates() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(1_445_412_480.0)
        );
        assert_eq!(parse_rfc3339("2015-10-21T07:28:00Z"), Some(1_445_412_480.0));
        assert_eq!(parse_rfc3339("2015-10-21T09:28:00+02:00"), Some(1_445_412_480.0));
        assert_eq!(parse_rfc3339("tomorrow"), None);
    }
}
