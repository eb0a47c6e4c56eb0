//! The gateway's resource ids, written in one place: what the config names
//! and what the broker, the metrics and the logs show must be the same
//! string.

/// The prefix of every per-service resource id.
pub(crate) const SERVICE_PREFIX: &str = "gateway:service:";

/// The prefix of every per-tenant resource id; routes may not use it.
pub(crate) const TENANT_PREFIX: &str = "gateway:tenant:";

/// The prefix of every per-API-key resource id (`gateway.auth.apiKeys[i].limits`);
/// routes may not use it.
pub(crate) const API_KEY_PREFIX: &str = "gateway:apikey:";

/// The `resource` label every per-tenant resource is reported under, so that
/// 100 000 tenants make one metrics series, not 100 000.
pub(crate) const TENANT_LABEL: &str = "gateway:tenant:*";

/// Resource id of an upstream's `perService` limit.
pub(crate) fn service(name: &str) -> String {
    format!("{SERVICE_PREFIX}{name}")
}

/// Resource id of a tenant.
pub(crate) fn tenant(id: &str) -> String {
    format!("{TENANT_PREFIX}{id}")
}

/// Resource id of an API key's own limits, by its label (its `name`, or
/// the first 8 hex digits of its hash).
pub(crate) fn api_key(label: &str) -> String {
    format!("{API_KEY_PREFIX}{label}")
}

/// Whether `id` is a per-tenant resource.
pub(crate) fn is_tenant(id: &str) -> bool {
    id.starts_with(TENANT_PREFIX)
}

/// The metrics `resource` label of `id`: tenant resources fold into
/// [`TENANT_LABEL`].
pub(crate) fn label(id: &str) -> &str {
    if is_tenant(id) {
        TENANT_LABEL
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_labels() {
        assert_eq!(service("web"), "gateway:service:web");
        assert_eq!(tenant("acme"), "gateway:tenant:acme");
        assert_eq!(api_key("ci-bot"), "gateway:apikey:ci-bot");
        assert_eq!(label("gateway:tenant:acme"), TENANT_LABEL);
        assert_eq!(label("gateway:route:x"), "gateway:route:x");
    }
}
