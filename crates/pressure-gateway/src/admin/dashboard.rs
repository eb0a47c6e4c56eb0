//! The live operator dashboard: one HTML page, a script and a style sheet,
//! compiled into the binary (`include_str!` of `dashboard/`), so it works
//! offline and needs no build step or CDN.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | `303` to `/dashboard` (query kept) |
//! | `GET /dashboard` | the page (admin token required when one is set) |
//! | `GET /dashboard/app.js`, `/dashboard/style.css` | the static assets (no data in them, no token needed) |
//!
//! The page reads `/admin/pressure/events` (one summary per second over
//! Server-Sent Events) and falls back to polling `/admin/pressure/summary`
//! when the stream fails. With an admin token, open the page once as
//! `/dashboard?token=<token>`: the answer sets an `HttpOnly; SameSite=Strict`
//! session cookie (see [`super::auth`]) that the page's own requests carry,
//! and the script removes the token from the address bar. The page is served
//! with a `Content-Security-Policy` that allows only its own script and
//! style, and `Referrer-Policy: no-referrer`.

use super::{auth, AdminState};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /`: the dashboard is the admin listener's home page.
pub(super) async fn home(RawQuery(query): RawQuery) -> Redirect {
    match query {
        Some(q) => Redirect::to(&format!("/dashboard?{q}")),
        None => Redirect::to("/dashboard"),
    }
}

/// The page's query: the admin token, given once.
#[derive(Debug, Default, Deserialize)]
pub(super) struct PageQuery {
    token: Option<String>,
}

/// `GET /dashboard`.
pub(super) async fn page(
    State(state): State<AdminState>,
    method: Method,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    let given = query.ok().and_then(|Query(q)| q.token);
    let cookie = match (&state.token, given) {
        (Some(_), Some(given)) if auth::is_token(&state, &given) => auth::session_cookie(&given),
        (Some(_), Some(_)) => {
            return refused(
                "the token in the address is not the admin token: open /dashboard?token=&lt;token&gt;",
            )
        }
        _ => {
            if auth::check(&state, &method, &headers).is_err() {
                return refused("this dashboard needs the admin token: open /dashboard?token=&lt;token&gt;");
            }
            None
        }
    };
    let mut response = html(StatusCode::OK, PAGE.to_owned());
    if let Some(cookie) = cookie {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
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

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        ],
        body,
    )
        .into_response()
}

/// A 401 a person can read, with the bearer challenge for programs.
fn refused(message: &str) -> Response {
    let mut response = html(
        StatusCode::UNAUTHORIZED,
        format!(
            "<!doctype html><meta charset=utf-8><title>pressure: token required</title>\
             <p>{message}</p>"
        ),
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"pressure-admin\""),
    );
    response
}
