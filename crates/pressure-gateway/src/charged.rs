//! [`Charged`]: what the inner layers of one request decided about it — the
//! resources it was charged to, the tenant its credential named and the
//! API key that named it — for the layers outside them that answer after
//! the response: the access log (`resource`, `tenant`, `key_id` fields) and
//! the optional `RateLimit` headers.
//!
//! The route layer puts one in a request's context only when the plan
//! needs it (access log or `rateLimitHeaders` on), so a gateway without
//! either allocates nothing for it.

use crate::backend::AnyBackend;
use parking_lot::Mutex;
use pressure_core::ResourceHandle;
use std::sync::Arc;

/// Shared between the layers of one request (cheap to clone).
#[derive(Debug, Clone, Default)]
pub(crate) struct Charged(Arc<Mutex<ChargedSoFar>>);

#[derive(Debug, Default)]
struct ChargedSoFar {
    resources: Vec<ResourceHandle<AnyBackend>>,
    tenant: Option<String>,
    api_key: Option<String>,
}

impl Charged {
    /// Records a granted acquisition on `handle`.
    pub(crate) fn charged(&self, handle: &ResourceHandle<AnyBackend>) {
        self.0.lock().resources.push(handle.clone());
    }

    /// Records the tenant a valid token named.
    pub(crate) fn tenant(&self, tenant: &str) {
        self.0.lock().tenant = Some(tenant.to_owned());
    }

    /// Records the label of the API key that named the tenant (its `name`
    /// or the first 8 hex digits of its hash; never the key).
    pub(crate) fn api_key(&self, label: &str) {
        self.0.lock().api_key = Some(label.to_owned());
    }

    /// The label of the API key that named the tenant, if one did.
    pub(crate) fn api_key_label(&self) -> Option<String> {
        self.0.lock().api_key.clone()
    }

    /// The resources charged so far, in order.
    pub(crate) fn resources(&self) -> Vec<ResourceHandle<AnyBackend>> {
        self.0.lock().resources.clone()
    }

    /// The resource ids charged, `,`-separated (empty: none), and the
    /// tenant, if any.
    pub(crate) fn summary(&self) -> (String, Option<String>) {
        let inner = self.0.lock();
        let ids: Vec<&str> = inner.resources.iter().map(ResourceHandle::id).collect();
        (ids.join(","), inner.tenant.clone())
    }
}
