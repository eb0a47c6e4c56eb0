//! [`Plan`]: everything the request path needs, built once from a validated
//! config (and rebuilt on reload): the [`Router`] with its routes and their
//! resources, the tenant policy (authenticator and limit template), the LLM
//! client, and the request bounds. Config types stop here: the layers and
//! the proxy read built values from the plan of their request.
//!
//! A request reads the plan once, at its start; a reload swaps the whole
//! plan atomically, so a request never sees half of an old config and half
//! of a new one.

mod router;

pub use router::{
    model_id, prefix_matches, Endpoint, Route, Router, CHAT_COMPLETIONS_PATH, EMBEDDINGS_PATH, MODELS_PATH,
};

use crate::backend::{AnyBackend, Broker};
use crate::config::{ConfigError, GatewayConfig};
use crate::layers::tenant::Authenticator;
use crate::openai::Llm;
use crate::proxy::Upstreams;
use crate::resources;
use pressure_core::{LimitTemplate, Limits, ResourceHandle};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Who may pass the tenant layer, and at what rate.
#[derive(Debug, Clone, Default)]
pub struct TenantPolicy {
    /// The JWT verifier; none: tokens are not read.
    pub auth: Option<Arc<Authenticator>>,
    /// Whether a request without a token is refused.
    pub required: bool,
    /// Each tenant's limits; none: tenants are not limited.
    pub template: Option<LimitTemplate>,
}

/// The built request path of one config.
#[derive(Debug)]
pub struct Plan {
    router: Router,
    tenant: TenantPolicy,
    llm: Option<Llm>,
    max_body_bytes: u64,
    upstream_timeout: Duration,
    body_read_timeout: Duration,
    access_log: bool,
    denial_lines: u32,
    rate_limit_headers: bool,
    resources: BTreeSet<String>,
    config: GatewayConfig,
}

impl Plan {
    /// Builds the plan of `config` (validated) on `broker`: every route and
    /// service limit is registered, or updated in place when its limits
    /// changed (current usage kept). `base_dir` resolves key files; `llm`
    /// is the client of `config.llm`, built by the caller.
    pub fn build(
        config: GatewayConfig,
        base_dir: &Path,
        broker: &Broker,
        llm: Option<Llm>,
    ) -> Result<Self, ConfigError> {
        let pressure = &config.pressure;
        let mut ids = BTreeSet::new();
        let upstreams = Upstreams::new(&config.upstreams)
            .map_err(|e| ConfigError::new("gateway.upstreams", e.to_string()))?;
        let mut router = Router::new().with_llm(llm.is_some());
        for upstream in upstreams.iter() {
            let name = upstream.name();
            let resource = match pressure.per_service.get(name) {
                Some(limits) if pressure.enabled => {
                    let id = resources::service(name);
                    let h = apply(
                        broker,
                        &id,
                        limits,
                        &format!("gateway.pressure.perService.{name}"),
                    )?;
                    ids.insert(id);
                    Some(h)
                }
                _ => None,
            };
            router = router.upstream(Arc::clone(upstream), resource);
        }
        if pressure.enabled {
            for (i, r) in pressure.per_route.iter().enumerate() {
                let h = apply(
                    broker,
                    &r.resource,
                    &r.limits,
                    &format!("gateway.pressure.perRoute[{i}]"),
                )?;
                ids.insert(r.resource.clone());
                router = router.limit(&r.path_prefix, h);
            }
            // Charged by no route: served to the decision API only.
            for (id, limits) in &pressure.resources {
                apply(broker, id, limits, &format!("gateway.pressure.resources.{id}"))?;
                ids.insert(id.clone());
            }
        }
        let auth = match &config.auth.jwt {
            Some(j) => Some(Arc::new(
                Authenticator::new(j, base_dir)
                    .map_err(|e| ConfigError::from(e.under("gateway.auth.jwt")))?,
            )),
            None => None,
        };
        let template = match (
            &pressure.per_tenant.limits,
            pressure.enabled && pressure.per_tenant.enabled,
        ) {
            (Some(l), true) => Some(LimitTemplate::new(l).map_err(|e| {
                ConfigError::new(
                    format!("gateway.pressure.perTenant.limits.{}", e.field),
                    e.problem,
                )
            })?),
            _ => None,
        };
        let tenant = TenantPolicy {
            auth,
            required: config.auth.required,
            template,
        };
        Ok(Self {
            router,
            tenant,
            llm,
            max_body_bytes: config.limits.max_body_bytes,
            upstream_timeout: Duration::from_millis(config.timeouts.total_ms),
            body_read_timeout: Duration::from_millis(config.timeouts.body_read_ms),
            access_log: config.access_log.enabled,
            denial_lines: config.denial_log.lines_per_resource_per_second,
            rate_limit_headers: config.pressure.rate_limit_headers,
            resources: ids,
            config,
        })
    }

    /// The router.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The tenant policy.
    pub fn tenant(&self) -> &TenantPolicy {
        &self.tenant
    }

    /// The LLM client, when `gateway.llm` is set.
    pub fn llm(&self) -> Option<&Llm> {
        self.llm.as_ref()
    }

    /// Largest request body, bytes.
    pub fn max_body_bytes(&self) -> u64 {
        self.max_body_bytes
    }

    /// Bound on an upstream exchange up to its response head.
    pub fn upstream_timeout(&self) -> Duration {
        self.upstream_timeout
    }

    /// Inactivity allowed while reading a request body (then `408`).
    pub fn body_read_timeout(&self) -> Option<Duration> {
        Some(self.body_read_timeout)
    }

    /// Whether every request writes an access log line (`accessLog.enabled`).
    pub fn access_log(&self) -> bool {
        self.access_log
    }

    /// Denial log lines per resource per second
    /// (`denialLog.linesPerResourcePerSecond`; 0: unbounded).
    pub fn denial_lines(&self) -> u32 {
        self.denial_lines
    }

    /// Whether successful responses carry `RateLimit` headers
    /// (`pressure.rateLimitHeaders`).
    pub fn rate_limit_headers(&self) -> bool {
        self.rate_limit_headers
    }

    /// Ids of the route, service and `pressure.resources` resources this
    /// plan registered.
    pub fn resource_ids(&self) -> &BTreeSet<String> {
        &self.resources
    }

    /// The config the plan was built from.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }
}

/// Registers `id` with `limits`, or updates its limits in place.
fn apply(
    broker: &Broker,
    id: &str,
    limits: &Limits,
    path: &str,
) -> Result<ResourceHandle<AnyBackend>, ConfigError> {
    broker
        .set_limits(id, limits.clone())
        .map_err(|e| ConfigError::new(path, e.to_string()))?;
    broker
        .resource(id)
        .ok_or_else(|| ConfigError::new(path, format!("{id} is not registered")))
}
