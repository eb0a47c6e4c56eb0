//! Why a request's credential was refused.

/// Why a token was refused (each maps to 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header while auth is required.
    #[error("missing bearer token")]
    Missing,
    /// Malformed, badly signed, expired, not yet valid, wrong algorithm,
    /// wrong audience or issuer.
    #[error("invalid token: {0}")]
    Invalid(String),
    /// Valid, but without a usable tenant claim (a non-empty string or an
    /// integer).
    #[error("token has no string claim {0:?}")]
    NoTenant(String),
    /// An API key that `gateway.auth.apiKeys` does not hold (unknown, or
    /// revoked by a reload), or an unreadable `x-api-key` header. The
    /// message never quotes the key.
    #[error("invalid API key")]
    InvalidApiKey,
    /// A key issued at runtime whose `expiresAt` has passed. The message
    /// never quotes the key.
    #[error("the API key has expired")]
    KeyExpired,
}

impl AuthError {
    /// Short label for metrics, and the `code` of the 401's body.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::Invalid(_) => "invalid",
            AuthError::NoTenant(_) => "no_tenant",
            AuthError::InvalidApiKey => "invalid_api_key",
            AuthError::KeyExpired => "key_expired",
        }
    }
}
