//! `/v1/forward-auth` (any method): the proxy's decision for a request
//! another proxy (nginx `auth_request`, Caddy `forward_auth`, Traefik
//! `ForwardAuth`) is about to serve.
//!
//! The original method and URI come in `X-Forwarded-Method` /
//! `X-Forwarded-Uri` (Traefik, Caddy) or `X-Original-Method` /
//! `X-Original-URI` (nginx), its other headers (`Authorization`, `Host`) as
//! they are. The request is rebuilt with that method and URI and sent
//! through the gateway's own route layer (head checks, path normalisation,
//! one route), pre-auth and tenant layers over an answer of `204`, so the
//! decision, its counters and its denial log lines are the proxy's — with
//! one difference: concurrency limits are not charged (the decision listener's route layer
//! charges no lease: `RouteLayer::without_leases`), since
//! an auth subrequest ends before the request it authorises and can never
//! give the slot back.
//!
//! Answers: `204` with `RateLimit` headers, `429` with `Retry-After` and
//! `RateLimit` headers (or `403` when [`DENY_STATUS_HEADER`] asks for it,
//! for nginx), `401` for a present-but-invalid token (or a missing one when
//! `auth.required`), `400` for a path the proxy refuses (an encoded `/`).
//! With `tokenEnv` set, the proxy sends the service token in
//! [`TOKEN_HEADER`]; it is removed before the layers see the request.

use super::{DecisionState, DENY_STATUS_HEADER, TOKEN_HEADER};
use crate::rejection::{Dialect, Rejection};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::uri::PathAndQuery;
use http::{HeaderMap, Method, StatusCode, Uri};
use tower::ServiceExt;

const FORWARDED_METHOD: [&str; 2] = ["x-forwarded-method", "x-original-method"];
const FORWARDED_URI: [&str; 2] = ["x-forwarded-uri", "x-original-uri"];

/// The first of `names` present in `headers`, as text; an error names a
/// header that is not visible ASCII or is given twice.
fn forwarded<'a>(headers: &'a HeaderMap, names: &[&str]) -> Result<Option<&'a str>, Rejection> {
    for name in names {
        let mut all = headers.get_all(*name).iter();
        let Some(v) = all.next() else { continue };
        if all.next().is_some() {
            return Err(Rejection::BadRequest(
                format!("more than one {name} header").into(),
            ));
        }
        return v
            .to_str()
            .map(Some)
            .map_err(|_| Rejection::BadRequest(format!("{name} is not visible ASCII").into()));
    }
    Ok(None)
}

/// The original request, rebuilt from the forward-auth request.
fn original(req: Request) -> Result<Request, Rejection> {
    let (mut parts, _) = req.into_parts();
    let method = match forwarded(&parts.headers, &FORWARDED_METHOD)? {
        Some(m) => Method::from_bytes(m.as_bytes())
            .map_err(|_| Rejection::BadRequest(format!("{m:?} is not an HTTP method").into()))?,
        None => parts.method.clone(),
    };
    let Some(target) = forwarded(&parts.headers, &FORWARDED_URI)? else {
        return Err(Rejection::BadRequest(
            "X-Forwarded-Uri (or X-Original-URI) is required: the original request's path".into(),
        ));
    };
    // Absolute-form (`http://host/path?q`) or origin-form (`/path?q`).
    let pq = match target.parse::<Uri>() {
        Ok(u) if u.scheme().is_some() => u.path_and_query().cloned(),
        _ => target.parse::<PathAndQuery>().ok(),
    }
    .filter(|pq| pq.path().starts_with('/'))
    .ok_or_else(|| Rejection::BadRequest(format!("{target:?} is not a request target").into()))?;
    parts.method = method;
    parts.uri = Uri::from(pq);
    parts.headers.remove(TOKEN_HEADER);
    parts.headers.remove(DENY_STATUS_HEADER);
    for name in FORWARDED_METHOD.iter().chain(&FORWARDED_URI) {
        parts.headers.remove(*name);
    }
    Ok(Request::from_parts(parts, Body::empty()))
}

pub(super) async fn forward_auth(State(state): State<DecisionState>, req: Request) -> Response {
    let outcome = decided(&state, req).await;
    state.answer(Dialect::Gateway, outcome)
}

/// The decision on the original request: the proxy's layers' answer (its
/// refusals rendered by their route layer), as forward auth words it.
async fn decided(state: &DecisionState, req: Request) -> Result<Response, Rejection> {
    let token = req.headers().get(TOKEN_HEADER).map(|v| v.as_bytes().trim_ascii());
    state.token_ok(token)?;
    let deny_403 = req
        .headers()
        .get(DENY_STATUS_HEADER)
        .is_some_and(|v| v.as_bytes().trim_ascii() == b"403");
    let req = original(req)?;
    let Ok(mut resp) = state.decide.clone().oneshot(req).await;
    Ok(match resp.status() {
        s if s.is_success() => {
            // The answer is the status and its headers; nothing else.
            let (mut parts, _) = resp.into_parts();
            parts.status = StatusCode::NO_CONTENT;
            parts.headers.remove(http::header::CONTENT_TYPE);
            parts.headers.remove(http::header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::empty())
        }
        StatusCode::TOO_MANY_REQUESTS if deny_403 => {
            *resp.status_mut() = StatusCode::FORBIDDEN;
            resp
        }
        _ => resp,
    })
}

/// The terminal service of the decision: every request that passed the
/// layers is allowed.
pub(crate) async fn allowed(_req: http::Request<Body>) -> Result<Response, Rejection> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    Ok(resp)
}
