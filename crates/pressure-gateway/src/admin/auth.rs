//! Bearer-token check of the admin routes.
//!
//! A client sends `Authorization: Bearer <token>`. A browser cannot put that
//! header on an `EventSource` (nor on the page load itself), so a read-only
//! request (`GET`, `HEAD`) may instead carry the cookie
//! [`COOKIE`]`=<token, percent-encoded>` that `/dashboard?token=<token>`
//! sets (`HttpOnly; SameSite=Strict`, for the browser session). The cookie
//! never authorizes a `POST` (a reload needs the header), so a page of
//! another site cannot make the browser change anything.

use super::{error_response, AdminState};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::fmt::Write as _;

/// The name of the dashboard's session cookie.
pub(super) const COOKIE: &str = "pressure_admin_token";

/// Passes the request on when no token is configured or the request carries
/// the token ([module docs](self)); answers 401 otherwise.
pub(super) async fn require_token(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    match check(&state, request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.response(),
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Neither the header nor (for a read) the cookie.
    Missing,
    /// A bearer token that is not the admin token.
    InvalidToken,
    /// A session cookie that is not the admin token's.
    InvalidCookie,
}

impl Refusal {
    /// The 401 in the gateway's error shape, with its bearer challenge.
    pub(super) fn response(self) -> Response {
        match self {
            Refusal::Missing => unauthorized(
                "Bearer realm=\"pressure-admin\"",
                "a bearer token is required (a browser: open /dashboard?token=<token>)",
            ),
            Refusal::InvalidToken => unauthorized(
                "Bearer realm=\"pressure-admin\", error=\"invalid_token\"",
                "invalid bearer token",
            ),
            Refusal::InvalidCookie => unauthorized(
                "Bearer realm=\"pressure-admin\", error=\"invalid_token\"",
                "invalid session cookie: open /dashboard?token=<token> again",
            ),
        }
    }
}

/// `Ok` when no token is configured or the request carries it.
pub(super) fn check(state: &AdminState, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(expected) = state.token.as_deref() else {
        return Ok(());
    };
    match bearer(headers) {
        Some(given) if constant_time_eq(expected.as_bytes(), given) => return Ok(()),
        Some(_) => return Err(Refusal::InvalidToken),
        None => {}
    }
    let read_only = method == Method::GET || method == Method::HEAD;
    match cookie(headers).filter(|_| read_only) {
        Some(given) if constant_time_eq(cookie_value(expected).as_bytes(), given) => Ok(()),
        Some(_) => Err(Refusal::InvalidCookie),
        None => Err(Refusal::Missing),
    }
}

/// Whether `given` is the configured token (constant time); `true` when none
/// is configured.
pub(super) fn is_token(state: &AdminState, given: &str) -> bool {
    state
        .token
        .as_deref()
        .is_none_or(|expected| constant_time_eq(expected.as_bytes(), given.as_bytes()))
}

/// The `Set-Cookie` value that lets this browser session read the admin
/// routes.
pub(super) fn session_cookie(token: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        cookie_value(token)
    ))
    .ok()
}

/// `token` percent-encoded but for RFC 3986 unreserved characters, which
/// are all valid in a cookie value.
fn cookie_value(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The value of the first [`COOKIE`] in the request's `Cookie` headers.
fn cookie(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let (name, value) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
            (name == COOKIE.as_bytes()).then(|| value.get(1..).unwrap_or_default())
        })
}

fn unauthorized(challenge: &'static str, message: &str) -> Response {
    let mut response = error_response(StatusCode::UNAUTHORIZED, "unauthorized", message);
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    response
}

/// The credentials of an `Authorization: Bearer ...` header (the scheme is
/// case-insensitive), if there is exactly one such header.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
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

    #[test]
    fn compares_exactly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"secret", b"secre"));
        assert!(!constant_time_eq(b"secret", b""));
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

    #[test]
    fn parses_the_session_cookie() {
        let mut h = HeaderMap::new();
        assert_eq!(cookie(&h), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; pressure_admin_token=s%3Bx ;b=2"),
        );
        assert_eq!(cookie(&h), Some(&b"s%3Bx"[..]));
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("xpressure_admin_token=1; other"),
        );
        assert_eq!(cookie(&h), None);
        assert_eq!(cookie_value("s;x y~"), "s%3Bx%20y~");
        let set = session_cookie("a b").expect("valid header");
        assert_eq!(
            set,
            "pressure_admin_token=a%20b; Path=/; HttpOnly; SameSite=Strict"
        );
    }
}
