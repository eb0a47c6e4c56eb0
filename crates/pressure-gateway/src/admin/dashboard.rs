//! The live operator dashboard: one HTML page, a script and a style sheet,
//! compiled into the binary (`include_str!` of `dashboard/`), so it works
//! offline and needs no build step or CDN.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | `303` to `/dashboard` (query kept) |
//! | `GET /dashboard` | the page (no data in it: no token needed) |
//! | `GET /dashboard/app.js`, `/dashboard/style.css` | its script and style sheet |
//!
//! The page reads `/admin/pressure/events` (one summary per second, in the
//! Server-Sent Events format, read with a streaming `fetch`) and falls back
//! to polling `/admin/pressure/summary` when the stream fails.
//!
//! **The admin token.** The page and its assets hold no data and are served
//! to anyone; every number comes from the token-protected admin routes. The
//! page sends the token as `Authorization: Bearer` on each of its requests
//! (a streaming `fetch` can, an `EventSource` could not). It takes the token
//! once, from `/dashboard?token=<token>` or from its own prompt, keeps it in
//! `sessionStorage` (this tab only, gone when the tab closes) and removes it
//! from the address bar. There is deliberately no cookie: cookies are not
//! scoped by port, so a browser would send one to the proxy listener (and
//! on to the upstreams) and to every other service on the same host. The
//! page is served with a `Content-Security-Policy` that allows only its own
//! script, style and same-origin requests, and `Referrer-Policy:
//! no-referrer`.

use axum::extract::RawQuery;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /`: the dashboard is the admin listener's home page. The query (a
/// `token`, `top`) goes along; one that is no valid header value is dropped
/// rather than failing the redirect.
pub(super) async fn home(RawQuery(query): RawQuery) -> Response {
    let location = query
        .and_then(|q| HeaderValue::from_str(&format!("/dashboard?{q}")).ok())
        .unwrap_or(HeaderValue::from_static("/dashboard"));
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// `GET /dashboard`.
pub(super) async fn page() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        ],
        PAGE,
    )
        .into_response()
}

/// `GET /dashboard/app.js`.
pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /dashboard/style.css`.
pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}
