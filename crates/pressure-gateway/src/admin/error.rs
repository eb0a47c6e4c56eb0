//! [`AdminError`]: why the admin listener did not do what it was asked.
//! The control plane's errors, not refusals of traffic: never counted in
//! the request path's metrics nor logged as denials. They describe
//! themselves like a [`Rejection`](crate::rejection::Rejection) does and
//! are answered by the same renderer, in the gateway's error shape
//! (`{"error":{"type","message",...}}`); axum renders them where a handler
//! returns one (`IntoResponse`), the admin listener's one render point.

use crate::rejection::render;
use crate::rejection::{client, server, Description, Detail, Dialect, Level};
use crate::settings::ConfigError;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use std::borrow::Cow;
use std::time::Duration;

/// An error of the admin listener (module docs).
#[derive(Debug)]
pub(crate) enum AdminError {
    /// `401`: no admin token (`gateway.admin.tokenEnv`), or a wrong one.
    Token {
        /// Whether a token was given at all.
        given: bool,
    },
    /// `404`: no such route, or nothing behind it (the message says which).
    NotFound(&'static str),
    /// `404`: a page of the LLM stack, on a gateway without `gateway.llm`
    /// (the message says which page).
    NoLlm(&'static str),
    /// `405`.
    MethodNotAllowed,
    /// `400`: a query the page cannot take.
    BadRequest(Cow<'static, str>),
    /// `409`: the request conflicts with what is there (a key name taken).
    Conflict(Cow<'static, str>),
    /// `413`: a body larger than the route takes.
    TooLarge {
        /// The bound, bytes.
        max: usize,
    },
    /// `400`: a reload found the config invalid, or a tenant's limits do
    /// not compile (names the JSON path).
    InvalidConfig(ConfigError),
    /// `503`: the manual queue's store failed.
    QueueUnavailable(String),
    /// `503`: the store did not take a tenant's live override (nothing
    /// changed).
    StoreUnavailable {
        /// The tenant's resource.
        resource: String,
    },
}

impl AdminError {
    /// The facts of the error, as the renderer reads them.
    fn describe(&self) -> Description<'_> {
        use Description as D;
        use StatusCode as S;
        match self {
            Self::Token { given } => D::new(
                S::UNAUTHORIZED,
                "unauthorized",
                client("invalid_api_key"),
                if *given {
                    "invalid bearer token"
                } else {
                    "a bearer token is required (a browser: open /dashboard?token=<token>)"
                },
            )
            .challenge(if *given {
                "Bearer realm=\"pressure-admin\", error=\"invalid_token\""
            } else {
                "Bearer realm=\"pressure-admin\""
            }),
            Self::NotFound(m) => D::new(S::NOT_FOUND, "not_found", client("not_found"), *m),
            Self::NoLlm(m) => D::new(S::NOT_FOUND, "no_llm", client("not_found"), *m),
            Self::MethodNotAllowed => D::new(
                S::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                client("method_not_allowed"),
                "this admin route does not answer that method",
            ),
            Self::BadRequest(m) => D::new(S::BAD_REQUEST, "bad_request", client("bad_request"), m.as_ref()),
            Self::Conflict(m) => D::new(S::CONFLICT, "conflict", client("conflict"), m.as_ref()),
            Self::TooLarge { max } => D::new(
                S::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                client("request_too_large"),
                format!("the body exceeds {max} bytes"),
            ),
            Self::InvalidConfig(e) => D::new(
                S::BAD_REQUEST,
                "invalid_config",
                client("invalid_config"),
                e.to_string(),
            )
            .detail(Detail::Config {
                path: &e.path,
                problem: &e.problem,
            }),
            Self::QueueUnavailable(m) => D::new(
                S::SERVICE_UNAVAILABLE,
                "queue_unavailable",
                server("queue_unavailable"),
                m.as_str(),
            ),
            Self::StoreUnavailable { resource } => D::new(
                S::SERVICE_UNAVAILABLE,
                "limiter_unavailable",
                server("limiter_unavailable"),
                "the limiter could not decide; try again",
            )
            .level(Level::Warn)
            .retry_after(Duration::from_secs(1))
            .detail(Detail::Resource(resource)),
        }
    }
}

impl IntoResponse for AdminError {
    /// In the gateway's dialect.
    fn into_response(self) -> Response {
        render::respond(&self.describe(), Dialect::Gateway)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use serde_json::Value;

    async fn answer(e: AdminError) -> (StatusCode, http::HeaderMap, Value) {
        let (parts, body) = e.into_response().into_parts();
        let bytes = body.collect().await.expect("body").to_bytes();
        let json = serde_json::from_slice(&bytes).expect("json");
        (parts.status, parts.headers, json)
    }

    #[tokio::test]
    async fn each_error_in_the_gateway_shape() {
        let (status, headers, body) = answer(AdminError::Token { given: false }).await;
        assert_eq!(status, 401);
        assert_eq!(headers["www-authenticate"], "Bearer realm=\"pressure-admin\"");
        assert_eq!(body["error"]["type"], "unauthorized");
        let (status, _, body) = answer(AdminError::InvalidConfig(ConfigError::new(
            "a.b",
            "must be a number",
        )))
        .await;
        assert_eq!(status, 400);
        assert_eq!(body["error"]["type"], "invalid_config");
        assert_eq!(body["error"]["path"], "a.b");
        assert_eq!(body["error"]["problem"], "must be a number");
        let (status, headers, body) = answer(AdminError::StoreUnavailable {
            resource: "gateway:tenant:a".into(),
        })
        .await;
        assert_eq!(status, 503);
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(body["error"]["resource"], "gateway:tenant:a");
        let (status, _, body) = answer(AdminError::MethodNotAllowed).await;
        assert_eq!(status, 405);
        assert_eq!(body["error"]["type"], "method_not_allowed");
    }
}
