//! JWT verification with algorithms pinned by config (`none` is never
//! accepted), `exp` required, `nbf` checked, optional `aud` / `iss`.

use crate::config::JwtConfig;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use pressure_core::FieldError;
use std::path::Path;

/// The tenant a verified token names; put in the request extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

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
}

impl AuthError {
    /// Short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::Invalid(_) => "invalid",
            AuthError::NoTenant(_) => "no_tenant",
        }
    }
}

/// Verifies tokens as configured.
#[derive(Clone)]
pub struct Authenticator {
    key: DecodingKey,
    validation: Validation,
    tenant_claim: String,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("algorithms", &self.validation.algorithms)
            .field("tenant_claim", &self.tenant_claim)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Builds the verifier from validated config; `base` resolves relative
    /// key files. Errors name the field under `gateway.auth.jwt`.
    pub fn new(cfg: &JwtConfig, base: &Path) -> Result<Self, FieldError> {
        let algorithms: Vec<Algorithm> = cfg
            .algorithms
            .iter()
            .map(|a| {
                a.parse::<Algorithm>()
                    .map_err(|_| FieldError::new("algorithms", format!("unknown algorithm {a}")))
            })
            .collect::<Result<_, _>>()?;
        let first = *algorithms
            .first()
            .ok_or(FieldError::new("algorithms", "must not be empty".to_owned()))?;
        let hmac = matches!(first, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512);
        let key = if hmac {
            let var = cfg
                .secret_env
                .as_deref()
                .ok_or(FieldError::new("secretEnv", "required for HS*".to_owned()))?;
            let secret = std::env::var(var).map_err(|_| {
                FieldError::new("secretEnv", format!("environment variable {var} is not set"))
            })?;
            DecodingKey::from_secret(secret.as_bytes())
                .map_err(|e| FieldError::new("secretEnv", format!("not a usable secret: {e}")))?
        } else {
            let file = cfg
                .public_key_file
                .as_deref()
                .ok_or(FieldError::new("publicKeyFile", "required".to_owned()))?;
            let path = base.join(file);
            let pem = std::fs::read(&path).map_err(|e| {
                FieldError::new("publicKeyFile", format!("cannot read {}: {e}", path.display()))
            })?;
            let parsed = match first {
                Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(&pem),
                Algorithm::EdDSA => DecodingKey::from_ed_pem(&pem),
                _ => DecodingKey::from_rsa_pem(&pem),
            };
            parsed.map_err(|e| FieldError::new("publicKeyFile", format!("not a usable public key: {e}")))?
        };
        let mut validation = Validation::new(first);
        validation.algorithms = algorithms;
        validation.leeway = cfg.leeway_secs;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        // A configured audience or issuer must be present, not only match
        // when present.
        let mut required = vec!["exp"];
        match &cfg.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &cfg.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        Ok(Self {
            key,
            validation,
            tenant_claim: cfg.tenant_claim.clone(),
        })
    }

    /// Verifies `token` and returns its tenant.
    pub fn verify(&self, token: &str) -> Result<Tenant, AuthError> {
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &self.key,
            &self.validation,
        )
        .map_err(|e| AuthError::Invalid(e.to_string()))?;
        tenant_of(data.claims.get(&self.tenant_claim))
            .map(Tenant)
            .ok_or_else(|| AuthError::NoTenant(self.tenant_claim.clone()))
    }
}

/// Longest tenant id accepted, bytes.
const MAX_TENANT_LEN: usize = 256;

/// The tenant id a claim's value names: a non-empty string of at most
/// [`MAX_TENANT_LEN`] bytes, or an integer as its decimal string (issuers
/// write numeric ids as JSON numbers; `42` and `"42"` are one tenant). A
/// fraction, a boolean, null, an array or an object names no tenant: there
/// is no one spelling of them to count a tenant under.
fn tenant_of(claim: Option<&serde_json::Value>) -> Option<String> {
    match claim? {
        serde_json::Value::String(s) if !s.is_empty() && s.len() <= MAX_TENANT_LEN => Some(s.clone()),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

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
