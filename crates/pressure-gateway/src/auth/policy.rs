//! What the tenant layer reads of a plan: how credentials are verified,
//! whether one is required, and each tenant's limits.

use super::api_key::ApiKeys;
use super::jwt::Authenticator;
use super::runtime_keys::RuntimeKeys;
use pressure_core::LimitTemplate;
use std::sync::Arc;

/// Who may pass the tenant layer, and at what rate.
#[derive(Debug, Clone, Default)]
pub struct TenantPolicy {
    /// The JWT verifier; none: tokens are not read.
    pub auth: Option<Arc<Authenticator>>,
    /// The API keys (`gateway.auth.apiKeys`); none: keys are not read.
    pub api_keys: Option<Arc<ApiKeys>>,
    /// The keys issued at runtime (`gateway.auth.runtimeKeys`), a
    /// gateway's one mirror; none: they are not read.
    pub runtime_keys: Option<Arc<RuntimeKeys>>,
    /// Whether a request without a credential is refused.
    pub required: bool,
    /// Each tenant's limits; none: tenants are not limited.
    pub template: Option<LimitTemplate>,
}
