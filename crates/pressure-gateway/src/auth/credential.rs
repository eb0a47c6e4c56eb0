//! Which credential a request presents, and who it names: the one place
//! that reads `Authorization` and `x-api-key` for the tenant layer.
//!
//! The rule (also in `docs/api-keys.md`):
//!
//! 1. An `Authorization` header is read first, and must be `Bearer
//!    <token>`. With both `jwt` and `apiKeys` configured, a token with a
//!    `.` is a JWT (a JWS has two) and one without is an API key; with only
//!    one of them, every token is of that kind.
//! 2. Only without an `Authorization` header, and only with `apiKeys`
//!    configured, `x-api-key: <key>` (Anthropic's header) is read.
//!
//! A key is looked up in the config's table (`gateway.auth.apiKeys`)
//! first, then among the keys issued at runtime
//! (`gateway.auth.runtimeKeys`): a runtime key never shadows a config
//! key. An expired runtime key is `401` `key_expired`; one limited to some
//! use cases puts them in the request's extensions ([`KeyScope`]) for the
//! LLM endpoints to check.
//!
//! So when a request carries both, `Authorization` wins and `x-api-key` is
//! not looked at. A valid API key is removed from the request (the header
//! that carried it) before it goes on: it is the gateway's credential and
//! never reaches an upstream. A JWT is forwarded as before.

use super::api_key::{digest, ApiKey};
use super::policy::TenantPolicy;
use super::runtime_keys::{wall_clock_ms as now_ms, KeyScope, RuntimeKey};
use super::{bearer, AuthError, Tenant};
use crate::backend::AnyBackend;
use http::{HeaderName, Request};
use pressure_core::ResourceHandle;
use std::sync::Arc;

/// Anthropic's API key header.
pub(crate) static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// A credential a request presents, borrowed from its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential<'a> {
    /// A bearer token to verify as a JWT.
    Jwt(&'a str),
    /// An API key, and the header it came in.
    ApiKey(&'a str, &'static HeaderName),
}

/// The credential of `req` (see the module docs); `None` when it presents
/// none that the configured methods read.
fn credential<B>(req: &Request<B>, jwt: bool, keys: bool) -> Option<Result<Credential<'_>, AuthError>> {
    if req.headers().contains_key(http::header::AUTHORIZATION) {
        // A JWS is `header.payload.signature`; an API key has no dot.
        let is_key = |t: &str| keys && !(jwt && t.contains('.'));
        return bearer(req).map(|token| {
            token.map(|t| {
                if is_key(t) {
                    Credential::ApiKey(t, &http::header::AUTHORIZATION)
                } else {
                    Credential::Jwt(t)
                }
            })
        });
    }
    if !keys {
        return None;
    }
    let mut values = req.headers().get_all(&X_API_KEY).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return Some(Err(AuthError::InvalidApiKey));
    }
    Some(match first.to_str().map(str::trim) {
        Ok(key) if !key.is_empty() => Ok(Credential::ApiKey(key, &X_API_KEY)),
        _ => Err(AuthError::InvalidApiKey),
    })
}

/// What an API key brings beyond its tenant.
#[derive(Debug, Clone)]
pub(crate) struct KeyUse {
    /// Its label, for the access log.
    pub(crate) label: String,
    /// Its own limit, charged with the tenant's.
    pub(crate) limit: Option<ResourceHandle<AnyBackend>>,
}

/// Who a request is: the tenant its credential names, and the API key
/// that named it (none for a JWT).
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    /// The tenant.
    pub(crate) tenant: Tenant,
    /// The key, when an API key named the tenant.
    pub(crate) key: Option<KeyUse>,
}

/// Whether `policy` reads credentials at all (a JWT verifier, API keys, or
/// both); without, the tenant layer passes every request as anonymous.
pub(crate) fn reads_credentials(policy: &TenantPolicy) -> bool {
    policy.auth.is_some() || reads_keys(policy)
}

/// Whether `policy` reads API keys: the config's, or keys issued at
/// runtime.
fn reads_keys(policy: &TenantPolicy) -> bool {
    policy.api_keys.is_some() || policy.runtime_keys.is_some()
}

/// The identity `req`'s credential proves: `Ok(None)` when it presents
/// none, an error when the one it presents is invalid. A valid API key's
/// header is removed from `req`.
pub(crate) fn identify<B>(
    policy: &TenantPolicy,
    req: &mut Request<B>,
) -> Result<Option<Identity>, AuthError> {
    let (identity, carrier, scope) = match credential(req, policy.auth.is_some(), reads_keys(policy)) {
        None => return Ok(None),
        Some(Err(e)) => return Err(e),
        Some(Ok(Credential::Jwt(token))) => match policy.auth.as_deref() {
            Some(auth) => (
                Identity {
                    tenant: auth.verify(token)?,
                    key: None,
                },
                None,
                None,
            ),
            None => return Err(AuthError::Invalid("JWTs are not accepted".into())),
        },
        Some(Ok(Credential::ApiKey(key, header))) => {
            let d = digest(key.as_bytes());
            match policy.api_keys.as_deref().and_then(|k| k.find_digest(&d)) {
                Some(found) => (known(found), Some(header), None),
                None => {
                    let found = policy.runtime_keys.as_deref().and_then(|k| k.find(&d));
                    let (identity, scope) = issued(found)?;
                    (identity, Some(header), scope)
                }
            }
        }
    };
    if let Some(header) = carrier {
        req.headers_mut().remove(header);
    }
    if let Some(scope) = scope {
        req.extensions_mut().insert(scope);
    }
    Ok(Some(identity))
}

/// The identity of a key the config's table found.
fn known(key: &ApiKey) -> Identity {
    Identity {
        tenant: key.tenant().clone(),
        key: Some(KeyUse {
            label: key.label().to_owned(),
            limit: key.limit().cloned(),
        }),
    }
}

/// The identity of a key issued at runtime, and the use cases it is
/// limited to; an unknown (or revoked) key is refused as an unknown one,
/// an expired one as expired.
fn issued(found: Option<Arc<RuntimeKey>>) -> Result<(Identity, Option<KeyScope>), AuthError> {
    let key = found.ok_or(AuthError::InvalidApiKey)?;
    // The clock is read only for a key that can expire.
    if key.expires_at_ms.is_some() && key.expired(now_ms()) {
        return Err(AuthError::KeyExpired);
    }
    let identity = Identity {
        tenant: key.tenant.clone(),
        key: Some(KeyUse {
            label: key.label.clone(),
            limit: key.limit.clone(),
        }),
    };
    Ok((identity, key.use_cases.clone().map(KeyScope)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::get("/");
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).expect("request")
    }

    const JWT: &str = "aaa.bbb.ccc";

    #[test]
    fn dots_tell_a_jwt_from_a_key_when_both_are_configured() {
        let r = req(&[("authorization", &format!("Bearer {JWT}"))]);
        assert_eq!(credential(&r, true, true), Some(Ok(Credential::Jwt(JWT))));
        let r = req(&[("authorization", "Bearer sk-abc")]);
        assert_eq!(
            credential(&r, true, true),
            Some(Ok(Credential::ApiKey("sk-abc", &http::header::AUTHORIZATION)))
        );
    }

    #[test]
    fn with_one_method_every_bearer_token_is_of_that_kind() {
        let r = req(&[("authorization", "Bearer sk-abc")]);
        assert_eq!(credential(&r, true, false), Some(Ok(Credential::Jwt("sk-abc"))));
        let r = req(&[("authorization", &format!("Bearer {JWT}"))]);
        assert_eq!(
            credential(&r, false, true),
            Some(Ok(Credential::ApiKey(JWT, &http::header::AUTHORIZATION)))
        );
    }

    #[test]
    fn x_api_key_is_read_only_with_keys_and_without_authorization() {
        let r = req(&[("x-api-key", " sk-abc ")]);
        assert_eq!(
            credential(&r, true, true),
            Some(Ok(Credential::ApiKey("sk-abc", &X_API_KEY)))
        );
        assert_eq!(credential(&r, true, false), None);
        let both = req(&[
            ("authorization", &format!("Bearer {JWT}")),
            ("x-api-key", "sk-abc"),
        ]);
        assert_eq!(credential(&both, true, true), Some(Ok(Credential::Jwt(JWT))));
        assert_eq!(credential(&req(&[]), true, true), None);
    }

    #[test]
    fn an_empty_or_repeated_x_api_key_is_invalid() {
        for r in [
            req(&[("x-api-key", "  ")]),
            req(&[("x-api-key", "a"), ("x-api-key", "b")]),
        ] {
            assert_eq!(credential(&r, false, true), Some(Err(AuthError::InvalidApiKey)));
        }
    }
}
