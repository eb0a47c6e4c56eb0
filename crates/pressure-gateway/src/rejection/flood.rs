//! The plain 429 under a flood: the measured twin of the general renderer
//! (`render.rs`). What the gateway does most per request when a limit is
//! exhausted is answer it, so this path skips the [`Description`] and the
//! JSON tree and keeps its parts from one 429 to the next; the callgrind
//! bench (`benches/callgrind-gateway.sh`) counts its instructions per 429,
//! and the unit tests (here and in `tests.rs`) prove it answers the very
//! bytes, status and headers the general renderer would.
//!
//! A plain 429 (a rate limit, not a spent budget) outside the LLM
//! dialects is made of its dialect, resource, dimension, that dimension's
//! `(quota, window)` and the whole seconds to wait — the head entirely,
//! the gateway dialect's body all but its exact milliseconds. A flood's
//! 429s share all of these for a second at a time, so each server thread
//! keeps the last one's: its head (cloned: two allocations and reference
//! counts, where writing it hashes four names and formats two fields) and
//! its body up to the milliseconds (the rest is one number and a suffix).
//! Anything different makes them anew.
//!
//! [`Description`]: super::Description

use super::{retry_after_secs, Dialect, RateLimited};
use http::HeaderMap;
use std::borrow::Cow;
use std::cell::RefCell;
use std::time::Duration;

/// The gateway dialect's 429 body before its wait in milliseconds.
const PARTS: [&str; 6] = [
    r#"{"error":{"dimension":""#,
    r#"","message":""#,
    ": ",
    " exhausted; retry in ",
    r#" s","resource":""#,
    r#"","retryAfterMs":"#,
];

/// And after it.
const SUFFIX: &str = r#","type":"rate_limited"}}"#;

/// The gateway dialect's 429 body, written straight into one buffer. Byte
/// for byte what the general renderer's `gateway_body` gives (keys
/// sorted, compact), which a unit test checks.
pub(super) fn rate_limited_body(r: &RateLimited) -> String {
    finish(&prefix(r, retry_after_secs(r.wait)), r.wait)
}

/// The body up to its milliseconds.
fn prefix(r: &RateLimited, secs: u64) -> String {
    // A dimension's name is a camel-case word: nothing to escape.
    let dim = r.dimension.as_str();
    let resource = json_escaped(&r.resource);
    let mut secs_text = itoa::Buffer::new();
    let secs = secs_text.format(secs);
    let fixed: usize = PARTS.iter().map(|p| p.len()).sum();
    let mut out = String::with_capacity(fixed + 2 * (dim.len() + resource.len()) + secs.len());
    for (part, field) in PARTS.iter().zip([dim, &resource, dim, secs, &resource, ""]) {
        out.push_str(part);
        out.push_str(field);
    }
    out
}

/// `prefix`, the wait in whole milliseconds and the suffix, sized exactly
/// (the full buffer becomes `Bytes` without a reallocation).
fn finish(prefix: &str, wait: Duration) -> String {
    let mut ms = itoa::Buffer::new();
    let ms = ms.format(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    let mut out = String::with_capacity(prefix.len() + ms.len() + SUFFIX.len());
    out.push_str(prefix);
    out.push_str(ms);
    out.push_str(SUFFIX);
    out
}

/// `s` JSON-escaped (without quotes): as is when nothing needs escaping
/// (every resource id the config allows), else as `serde_json` escapes it.
fn json_escaped(s: &str) -> Cow<'_, str> {
    // Without an early exit the compiler checks many bytes at a time.
    let needs_escape = s
        .bytes()
        .fold(false, |seen, b| seen | (b == b'"') | (b == b'\\') | (b < 0x20));
    if !needs_escape {
        return Cow::Borrowed(s);
    }
    let quoted = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned());
    Cow::Owned(quoted[1..quoted.len() - 1].to_owned())
}

/// The last plain 429's parts, and what they were made of.
struct Flood {
    dialect: Dialect,
    resource: Box<str>,
    dimension: pressure_core::Dimension,
    policy: Option<(u64, u64)>,
    secs: u64,
    head: HeaderMap,
    /// The gateway dialect's body up to its milliseconds.
    prefix: Option<Box<str>>,
}

impl Flood {
    fn is_for(&self, r: &RateLimited, dialect: Dialect, secs: u64) -> bool {
        self.secs == secs
            && self.dimension == r.dimension
            && self.policy == r.policy
            && self.dialect == dialect
            && *self.resource == *r.resource
    }
}

thread_local! {
    /// Per server thread.
    static LAST: RefCell<Option<Flood>> = const { RefCell::new(None) };
}

/// The head and the body of the plain 429 `r` in `dialect` (not OpenAI's):
/// the last one's parts when it was made of the same, else made anew, the
/// head by `write_head` and a body other than the gateway dialect's by
/// `body`.
pub(super) fn parts(
    r: &RateLimited,
    dialect: Dialect,
    write_head: impl FnOnce(&mut HeaderMap),
    body: impl FnOnce() -> String,
) -> (HeaderMap, String) {
    let secs = retry_after_secs(r.wait);
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        let flood = match &mut *last {
            Some(flood) if flood.is_for(r, dialect, secs) => flood,
            slot => {
                let mut head = HeaderMap::new();
                write_head(&mut head);
                slot.insert(Flood {
                    dialect,
                    resource: r.resource.as_str().into(),
                    dimension: r.dimension,
                    policy: r.policy,
                    secs,
                    head,
                    prefix: (dialect == Dialect::Gateway).then(|| prefix(r, secs).into_boxed_str()),
                })
            }
        };
        let body = match &flood.prefix {
            Some(prefix) => finish(prefix, r.wait),
            None => body(),
        };
        (flood.head.clone(), body)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Layer;
    use crate::rejection::{render, Rejection};
    use pressure_core::Dimension;

    fn limited(resource: &str, wait_ms: u64) -> RateLimited {
        RateLimited {
            resource: resource.into(),
            layer: Layer::PreAuth,
            dimension: Dimension::RequestsPerSecond,
            wait: Duration::from_millis(wait_ms),
            policy: Some((5, 1)),
            namespace_id: None,
            budget: None,
        }
    }

    /// What the general renderer answers with, made without the kept
    /// parts.
    fn made(r: &RateLimited, dialect: Dialect) -> (HeaderMap, String) {
        let rejection = Rejection::RateLimited(Box::new(r.clone()));
        let d = rejection.describe();
        let mut head = HeaderMap::new();
        render::write_head(&d, dialect, &mut head);
        (head, render::body(&d, dialect))
    }

    #[test]
    fn kept_parts_give_what_making_them_gives() {
        // Each step keeps or replaces the last parts: the same second
        // (kept, only the milliseconds differ), another second, another
        // resource (one to escape), another dialect, and back.
        let steps = [
            ("gateway:route:a", 1_400, Dialect::Gateway),
            ("gateway:route:a", 1_100, Dialect::Gateway),
            ("gateway:route:a", 900, Dialect::Gateway),
            ("gateway:route:\"b\"", 900, Dialect::Gateway),
            ("gateway:route:\"b\"", 900, Dialect::Decision),
            ("gateway:route:\"b\"", 800, Dialect::Decision),
            ("gateway:route:a", 700, Dialect::Gateway),
        ];
        for (resource, wait_ms, dialect) in steps {
            let r = limited(resource, wait_ms);
            let rejection = Rejection::RateLimited(Box::new(r.clone()));
            let (head, body) = parts(
                &r,
                dialect,
                |h| render::write_head(&rejection.describe(), dialect, h),
                || rejection.body(dialect),
            );
            let (want_head, want_body) = made(&r, dialect);
            assert_eq!(head, want_head, "{resource} {wait_ms} {dialect:?}");
            assert_eq!(body, want_body, "{resource} {wait_ms} {dialect:?}");
        }
    }
}
