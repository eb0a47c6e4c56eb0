//! A listener's own shared secret: the admin listener's token
//! (`gateway.admin.tokenEnv`) and the decision listener's service token
//! (`gateway.decisions.tokenEnv`). Each listener answers a refusal in its
//! own words (`crate::admin::AdminError::Token`,
//! `crate::rejection::Rejection::ServiceToken`); the check is the same.

use http::{header, HeaderMap};

/// A token that is not the expected one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WrongToken {
    /// Whether a token was given at all.
    pub(crate) given: bool,
}

/// Whether `given` is `expected` (always, when none is expected).
pub(crate) fn check(expected: Option<&str>, given: Option<&[u8]>) -> Result<(), WrongToken> {
    let Some(expected) = expected else {
        return Ok(());
    };
    match given {
        Some(g) if constant_time_eq(expected.as_bytes(), g) => Ok(()),
        Some(_) => Err(WrongToken { given: true }),
        None => Err(WrongToken { given: false }),
    }
}

/// The credentials of an `Authorization: Bearer ...` header (the scheme is
/// case-insensitive), if there is exactly one such header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let value = value.as_bytes();
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Compares in a time that depends on the lengths only, not on where the
/// first differing byte is.
fn constant_time_eq(expected: &[u8], given: &[u8]) -> bool {
    let mut diff = u8::from(expected.len() != given.len());
    for (i, &e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!e);
        diff |= e ^ g;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn compares_exactly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"secret", b"secre"));
        assert!(!constant_time_eq(b"secret", b""));
    }

    #[test]
    fn checks_the_token() {
        assert_eq!(check(None, None), Ok(()));
        assert_eq!(check(Some("t"), Some(b"t")), Ok(()));
        assert_eq!(check(Some("t"), Some(b"u")), Err(WrongToken { given: true }));
        assert_eq!(check(Some("t"), None), Err(WrongToken { given: false }));
    }

    #[test]
    fn parses_bearer() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  abc "));
        assert_eq!(bearer(&h), Some(&b"abc"[..]));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer"));
        assert_eq!(bearer(&h), None);
    }
}
