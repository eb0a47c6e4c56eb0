//! [`Charged`]: what the inner layers of one request decided about it — the
//! resources it was charged to and the tenant its token named — for the
//! layers outside them that answer after the response: the access log
//! (`resource`, `tenant` fields) and the optional `RateLimit` headers.
//!
//! The route layer puts one in a request's extensions only when the plan
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

/// The [`Charged`] record of a request, when the route layer asked for one.
pub(crate) fn of<B>(req: &http::Request<B>) -> Option<&Charged> {
    req.extensions().get::<Charged>()
}
