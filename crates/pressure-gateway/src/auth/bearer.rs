//! The `Authorization: Bearer` token of a request.

use super::error::AuthError;

/// The bearer token of a request, if it has one.
pub(crate) fn bearer<B>(req: &http::Request<B>) -> Option<Result<&str, AuthError>> {
    let v = req.headers().get(http::header::AUTHORIZATION)?;
    let s = match v.to_str() {
        Ok(s) => s,
        Err(_) => {
            return Some(Err(AuthError::Invalid(
                "authorization header is not ASCII".into(),
            )))
        }
    };
    let mut parts = s.splitn(2, ' ');
    match (parts.next(), parts.next()) {
        (Some(scheme), Some(token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => {
            Some(Ok(token.trim()))
        }
        _ => Some(Err(AuthError::Invalid(
            "authorization is not a bearer token".into(),
        ))),
    }
}
