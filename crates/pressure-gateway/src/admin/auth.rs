//! Bearer-token check of the admin routes (the check itself:
//! `crate::auth::token`).

use super::{AdminError, AdminState};
use crate::auth::token;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// Passes the request on when no token is configured or the request carries
/// `Authorization: Bearer <token>`; answers 401 otherwise.
pub(super) async fn require_token(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Result<Response, AdminError> {
    token::check(state.token.as_deref(), token::bearer(request.headers()))
        .map_err(|w| AdminError::Token { given: w.given })?;
    Ok(next.run(request).await)
}
