//! JWT verification with algorithms pinned by config (`none` is never
//! accepted), `exp` required, `nbf` checked, optional `aud` / `iss`.

use super::error::AuthError;
use super::tenant::{Tenant, MAX_TENANT_LEN};
use crate::settings::env_value;
use crate::settings::{ConfigError, JwtConfig};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use std::path::Path;

/// JWT algorithms the gateway can verify (names are case-sensitive).
pub(crate) const JWT_ALGORITHMS: [&str; 12] = [
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "PS384", "PS512",
    "EdDSA",
];

/// Largest accepted `auth.jwt.leewaySecs`: ten minutes of clock skew is
/// already generous; more would keep expired tokens alive (and a huge value
/// overflows the verifier's arithmetic and refuses every token).
pub(crate) const MAX_LEEWAY_SECS: u64 = 600;

/// The JSON path of `field` of `gateway.auth.jwt`.
fn at(field: &str) -> String {
    format!("gateway.auth.jwt.{field}")
}

/// Which key material a JWT algorithm verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

impl KeyKind {
    fn of(alg: &str) -> Self {
        match alg {
            a if a.starts_with("HS") => KeyKind::Hmac,
            a if a.starts_with("RS") || a.starts_with("PS") => KeyKind::Rsa,
            a if a.starts_with("ES") => KeyKind::Ec,
            _ => KeyKind::Ed,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            KeyKind::Hmac => "HMAC",
            KeyKind::Rsa => "RSA",
            KeyKind::Ec => "EC",
            KeyKind::Ed => "Ed25519",
        }
    }
}

/// `algorithms`: known names, never `none`, all of one key kind.
fn algorithms(names: &[String]) -> Result<Vec<Algorithm>, ConfigError> {
    if names.is_empty() {
        return Err(ConfigError::new(at("algorithms"), "must not be empty"));
    }
    let mut out = Vec::with_capacity(names.len());
    for (i, alg) in names.iter().enumerate() {
        let path = at(&format!("algorithms[{i}]"));
        if alg.eq_ignore_ascii_case("none") {
            return Err(ConfigError::new(path, format!("\"{alg}\" is never accepted")));
        }
        let parsed = JWT_ALGORITHMS
            .contains(&alg.as_str())
            .then(|| alg.parse::<Algorithm>().ok())
            .flatten()
            .ok_or_else(|| {
                ConfigError::new(
                    path,
                    format!(
                        "unknown algorithm \"{alg}\" (expected one of {})",
                        JWT_ALGORITHMS.join(", ")
                    ),
                )
            })?;
        out.push(parsed);
    }
    let (first_alg, first_kind) = (&names[0], KeyKind::of(&names[0]));
    if let Some(alg) = names.iter().find(|a| KeyKind::of(a) != first_kind) {
        let kind = KeyKind::of(alg);
        let problem = if first_kind == KeyKind::Hmac || kind == KeyKind::Hmac {
            format!("mixes HMAC and public-key algorithms ({first_alg} and {alg}); use one kind")
        } else {
            format!(
                "{first_alg} needs an {} key and {alg} an {} key, but there is one publicKeyFile",
                first_kind.describe(),
                kind.describe()
            )
        };
        return Err(ConfigError::new(at("algorithms"), problem));
    }
    Ok(out)
}

/// The HMAC secret from the environment variable `secretEnv` names.
fn hmac_key(cfg: &JwtConfig, first_alg: &str) -> Result<DecodingKey, ConfigError> {
    let Some(var) = &cfg.secret_env else {
        return Err(ConfigError::new(
            at("secretEnv"),
            format!("is required for {first_alg}"),
        ));
    };
    let secret = env_value(var, &at("secretEnv"))?;
    DecodingKey::from_secret(secret.as_encoded_bytes())
        .map_err(|e| ConfigError::new(at("secretEnv"), format!("not a usable secret: {e}")))
}

/// The PEM public key of `kind` in `publicKeyFile` (relative to `base`).
fn public_key(
    cfg: &JwtConfig,
    kind: KeyKind,
    first_alg: &str,
    base: &Path,
) -> Result<DecodingKey, ConfigError> {
    let path = at("publicKeyFile");
    let Some(file) = &cfg.public_key_file else {
        return Err(ConfigError::new(path, format!("is required for {first_alg}")));
    };
    if file.is_empty() {
        return Err(ConfigError::new(path, "must not be empty"));
    }
    let resolved = crate::settings::resolve(base, file);
    let pem = std::fs::read(&resolved).map_err(|e| {
        ConfigError::new(&path, format!("cannot read {}: {e}", resolved.display())).with_file(&resolved)
    })?;
    let parsed = match kind {
        KeyKind::Rsa => DecodingKey::from_rsa_pem(&pem),
        KeyKind::Ec => DecodingKey::from_ec_pem(&pem),
        KeyKind::Ed | KeyKind::Hmac => DecodingKey::from_ed_pem(&pem),
    };
    parsed.map_err(|e| {
        ConfigError::new(
            path,
            format!(
                "{} is not a PEM {} public key: {e}",
                resolved.display(),
                kind.describe()
            ),
        )
    })
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
    /// Builds the verifier of `gateway.auth.jwt`: the one place that reads
    /// and maps its key (the secret from `secretEnv`, or the PEM in
    /// `publicKeyFile`, relative to `base`), and checks the section as it
    /// goes. Errors name the JSON path under `gateway.auth.jwt`.
    pub fn new(cfg: &JwtConfig, base: &Path) -> Result<Self, ConfigError> {
        let algorithms = algorithms(&cfg.algorithms)?;
        let (first, first_name) = (algorithms[0], cfg.algorithms[0].as_str());
        let key = match KeyKind::of(first_name) {
            KeyKind::Hmac => hmac_key(cfg, first_name)?,
            kind => public_key(cfg, kind, first_name, base)?,
        };
        if cfg.leeway_secs > MAX_LEEWAY_SECS {
            return Err(ConfigError::new(
                at("leewaySecs"),
                format!("must be at most {MAX_LEEWAY_SECS} (seconds of clock skew tolerated on exp/nbf)"),
            ));
        }
        if cfg.tenant_claim.is_empty() {
            return Err(ConfigError::new(at("tenantClaim"), "must not be empty"));
        }
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
