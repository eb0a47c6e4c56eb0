//! Which resource limits a request before auth: the longest matching
//! `perRoute.pathPrefix`, else the `perService` limit of the upstream the
//! path goes to, else none. Handles are resolved once at start.

use crate::backend::{AnyBackend, Broker};
use crate::config::GatewayConfig;
use pressure_core::ResourceHandle;

/// Whether `prefix` covers `path` on a segment boundary (`/api/v1` covers
/// `/api/v1` and `/api/v1/x`, not `/api/v10`).
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    if prefix == "/" || path == prefix {
        return true;
    }
    path.starts_with(prefix) && (prefix.ends_with('/') || path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// One limited prefix.
#[derive(Debug, Clone)]
struct Entry {
    prefix: String,
    handle: ResourceHandle<AnyBackend>,
}

/// The pre-auth resource of every path.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    /// Routes, longest prefix first.
    routes: Vec<Entry>,
    /// Upstreams with a service limit, longest prefix first.
    services: Vec<Entry>,
}

impl RouteTable {
    /// Resolves the handles of `cfg`'s routes and services (already
    /// registered in `broker`).
    pub fn new(cfg: &GatewayConfig, broker: &Broker) -> Self {
        let mut routes: Vec<Entry> = cfg
            .pressure
            .per_route
            .iter()
            .filter_map(|r| {
                broker.resource(&r.resource).map(|handle| Entry {
                    prefix: r.path_prefix.clone(),
                    handle,
                })
            })
            .collect();
        let mut services: Vec<Entry> = cfg
            .upstreams
            .iter()
            .filter_map(|(name, up)| {
                broker.resource(&service_resource(name)).map(|handle| Entry {
                    prefix: up.path_prefix.clone(),
                    handle,
                })
            })
            .collect();
        routes.sort_by_key(|e| std::cmp::Reverse(e.prefix.len()));
        services.sort_by_key(|e| std::cmp::Reverse(e.prefix.len()));
        Self { routes, services }
    }

    /// The resource limiting `path` before auth, if any.
    pub fn resolve(&self, path: &str) -> Option<&ResourceHandle<AnyBackend>> {
        self.routes
            .iter()
            .chain(self.services.iter())
            .find(|e| prefix_matches(&e.prefix, path))
            .map(|e| &e.handle)
    }
}

/// Resource id of an upstream's service limit.
pub fn service_resource(name: &str) -> String {
    format!("gateway:service:{name}")
}

/// Resource id of a tenant.
pub fn tenant_resource(id: &str) -> String {
    format!("gateway:tenant:{id}")
}

#[cfg(test)]
mod tests {
    use super::prefix_matches;

    #[test]
    fn prefixes_match_on_segments() {
        assert!(prefix_matches("/api/v1", "/api/v1"));
        assert!(prefix_matches("/api/v1", "/api/v1/x"));
        assert!(!prefix_matches("/api/v1", "/api/v10"));
        assert!(prefix_matches("/api/", "/api/x"));
        assert!(prefix_matches("/", "/anything"));
    }
}
