//! Who is asking: JWT verification, API keys (their digests compared in
//! constant time), the credential a request carries (bearer token or
//! `x-api-key`), and the tenant it names. Below the plan, the layers, the
//! refusals, the endpoints and admin, which all read it; it reads only the
//! config's data and the backend's handle type. A listener's own shared
//! secret (the admin token, the decision listener's service token) is
//! checked in constant time too ([`token`]).

pub(crate) mod api_key;
mod bearer;
pub(crate) mod credential;
mod error;
pub(crate) mod jwt;
mod policy;
pub(crate) mod runtime_keys;
mod tenant;
pub(crate) mod token;

pub(crate) use bearer::bearer;
pub(crate) use error::AuthError;
pub(crate) use jwt::Authenticator;
pub use policy::TenantPolicy;
pub(crate) use runtime_keys::RuntimeKeys;
pub(crate) use tenant::Tenant;
pub(crate) use tenant::MAX_TENANT_LEN;
