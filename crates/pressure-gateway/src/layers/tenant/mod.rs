//! Layer 2, after the pre-auth floor: a valid JWT names the tenant (claim
//! `namespaceId` by default), whose resource `gateway:tenant:<id>` is
//! registered lazily with `perTenant.limits`. A token that is present but
//! invalid is always `401`; a missing one is `401` only when auth is
//! required, and otherwise passes as anonymous without a tenant limit.

mod jwt;
mod layer;
mod service;

pub use jwt::{AuthError, Authenticator, Tenant};
pub use layer::TenantLayer;
pub use service::TenantService;
