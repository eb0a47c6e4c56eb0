//! The tenant a credential names.

/// The tenant a verified token or a known API key names; put in the
/// request extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

/// Longest tenant id accepted, bytes (from a claim or `apiKeys[i].tenant`).
pub(crate) const MAX_TENANT_LEN: usize = 256;
