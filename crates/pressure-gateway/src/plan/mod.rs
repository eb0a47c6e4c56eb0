//! [`Plan`]: everything the request path needs, built from a config in
//! one pass that is also its validation: the [`Router`] with its routes and
//! their resources, the tenant policy (authenticator and limit template),
//! the LLM client, and the request bounds. Each section is checked as it is
//! built (`listeners`, `upstreams`, `settings`, `limits`, `tls`, the JWT key
//! in [`Authenticator::new`], the API keys in `api_keys`); a config that does not build yields every
//! problem found, each naming its JSON path ([`ConfigErrors`]). Config
//! types stop here: the layers and the proxy read built values from the
//! plan of their request.
//!
//! A request reads the plan once, at its start; a reload swaps the whole
//! plan atomically, so a request never sees half of an old config and half
//! of a new one.

pub(crate) mod api_keys;
pub(crate) mod checks;
pub(crate) mod hierarchy;
pub(crate) mod keys;
mod limits;
mod listeners;
mod load;
mod loaded_tls;
mod manifests;
pub(crate) mod overrides;
pub(crate) mod reload;
mod router;
mod setting_checks;
mod tls;
mod upstreams;

pub use load::{check, load, parse, parse_in, read, validate};
pub(crate) use loaded_tls::{Listeners, LoadedTls};
pub(crate) use router::model_id;
pub use router::{Endpoint, Route, Router};

use crate::auth::{Authenticator, TenantPolicy};
use crate::backend::{AnyBackend, Broker};
use crate::settings::{AuthConfig, ConfigError, ConfigErrors, GatewayConfig};
use arc_swap::ArcSwap;
use limits::ChargedBy;
use overrides::{LiveOverrides, LiveParents, Source};
use pressure_core::{LimitTemplate, Limits, ResourceHandle};
use pressure_llm::pipeline::LlmClient;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The LLM client behind the OpenAI-compatible endpoints, on the gateway's
/// broker.
pub type Llm = Arc<LlmClient<AnyBackend>>;

/// The plan the gateway serves now, swapped whole on reload.
pub type PlanCell = Arc<ArcSwap<Plan>>;

/// A config whose every check passed, with what the checks loaded: what
/// [`Plan::from_checked`] builds a plan from without reading or checking
/// anything again (the gateway keeps the plan of the config it checked).
#[derive(Debug)]
pub struct CheckedConfig {
    upstreams: crate::http::proxy::Upstreams,
    auth: Option<Arc<Authenticator>>,
    keys: Vec<api_keys::CheckedKey>,
    limited: Vec<limits::Limited>,
    template: Option<LimitTemplate>,
    decided: Vec<limits::Limited>,
    tenant_overrides: BTreeMap<String, LimitTemplate>,
    parents: hierarchy::ConfigParents,
    tls: LoadedTls,
    config: GatewayConfig,
}

impl CheckedConfig {
    /// The config.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }
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
    tenant_overrides: BTreeMap<String, LimitTemplate>,
    live: Arc<LiveOverrides>,
    parents: hierarchy::ConfigParents,
    live_parents: Arc<LiveParents>,
    max_depth: usize,
    config: GatewayConfig,
}

impl Plan {
    /// Builds the plan of `config` on `broker`: [`check`](Self::checked)
    /// then [`from_checked`](Self::from_checked). Nothing is registered
    /// unless the whole config checks; otherwise every problem found, in
    /// the order of the config's sections.
    pub fn build(
        config: GatewayConfig,
        base_dir: &Path,
        broker: &Broker,
        llm: Option<Llm>,
    ) -> Result<Self, ConfigErrors> {
        Self::from_checked(Self::checked(config, base_dir)?, broker, llm)
    }

    /// Checks `config` whole, loading what its checks read once (TLS
    /// files, the JWT key, secrets from the environment): every problem
    /// found, in the order of the config's sections, or the config with
    /// what was loaded, for [`from_checked`](Self::from_checked) to build
    /// on a broker without reading or checking anything again. `base_dir`
    /// resolves key and certificate files.
    pub fn checked(config: GatewayConfig, base_dir: &Path) -> Result<CheckedConfig, ConfigErrors> {
        let mut problems = Problems::default();
        problems.keep(listeners::check_listen(&config));
        problems.keep(listeners::check_admin(&config.admin, &config.listen));
        let upstreams = problems.keep(upstreams::build(&config));
        problems.keep(setting_checks::check_backend(&config.backend));
        let auth = problems.keep(authenticator(&config.auth, base_dir));
        let keys = problems.keep(api_keys::check(&config));
        let pressure = problems.keep(limits::build(&config));
        problems.keep(setting_checks::check_request_limits(&config));
        problems.keep(setting_checks::check_llm(&config));
        problems.keep(crate::settings::check_tracing(config.tracing.as_ref()));
        let tls = problems.keep(tls::load(&config, base_dir));
        let decided = problems.keep(limits::decision_resources(&config));
        problems.keep(listeners::check_decisions(&config));
        let tenant_overrides =
            problems.keep(overrides::config_overrides(&config.pressure.per_tenant.overrides));
        let per_tenant = &config.pressure.per_tenant;
        let parents = problems.keep(hierarchy::config_parents(
            &per_tenant.overrides,
            per_tenant.max_depth,
        ));
        let (
            Some(upstreams),
            Some(auth),
            Some(keys),
            Some((limited, template)),
            Some(decided),
            Some(tenant_overrides),
            Some(parents),
            Some(tls),
        ) = (
            upstreams,
            auth,
            keys,
            pressure,
            decided,
            tenant_overrides,
            parents,
            tls,
        )
        else {
            return Err(problems.into_errors());
        };
        problems.into_result()?;
        Ok(CheckedConfig {
            upstreams,
            auth,
            keys,
            limited,
            template,
            decided,
            tenant_overrides,
            parents,
            tls,
            config,
        })
    }

    /// The plan of a checked config on `broker`: every route and service
    /// limit is registered, or updated in place when its limits changed
    /// (current usage kept); `llm` is the client of `config.llm`, built by
    /// the caller.
    pub fn from_checked(
        checked: CheckedConfig,
        broker: &Broker,
        llm: Option<Llm>,
    ) -> Result<Self, ConfigErrors> {
        Self::with_tls(checked, broker, llm).map(|(plan, _tls)| plan)
    }

    /// [`from_checked`](Self::from_checked), and the TLS files the check
    /// loaded, for the gateway to install.
    pub(crate) fn with_tls(
        checked: CheckedConfig,
        broker: &Broker,
        llm: Option<Llm>,
    ) -> Result<(Self, LoadedTls), ConfigErrors> {
        let CheckedConfig {
            upstreams,
            auth,
            keys,
            limited,
            template,
            decided,
            tenant_overrides,
            parents,
            tls,
            config,
        } = checked;
        let mut ids = BTreeSet::new();
        let mut services = std::collections::BTreeMap::new();
        let mut router = Router::new().with_llm(llm.is_some());
        let mut routes = Vec::new();
        for l in limited.iter().chain(&decided) {
            let handle = register(broker, &l.id, &l.limits, &l.path).map_err(ConfigErrors::from)?;
            ids.insert(l.id.clone());
            match &l.by {
                ChargedBy::Service(name) => {
                    services.insert(name.as_str(), handle);
                }
                ChargedBy::Route(prefix) => routes.push((prefix.as_str(), handle)),
                ChargedBy::Decisions => {}
            }
        }
        for upstream in upstreams.iter() {
            let resource = services.remove(upstream.name());
            router = router.upstream(Arc::clone(upstream), resource);
        }
        for (prefix, handle) in routes {
            router = router.limit(prefix, handle);
        }
        let api_keys = api_keys::build(keys, |l| {
            let handle = register(broker, &l.id, &l.limits, &l.path)?;
            ids.insert(l.id.clone());
            Ok(handle)
        })
        .map_err(ConfigErrors::from)?;
        let tenant_overrides = if template.is_some() {
            tenant_overrides
        } else {
            BTreeMap::new()
        };
        let tenant = TenantPolicy {
            auth,
            api_keys,
            runtime_keys: None,
            required: config.auth.required,
            template,
        };
        let plan = Self {
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
            tenant_overrides,
            live: Arc::default(),
            parents,
            live_parents: Arc::default(),
            max_depth: config.pressure.per_tenant.max_depth,
            config,
        };
        Ok((plan, tls))
    }

    /// Builds the plan of `config` on a broker of its own, in memory and
    /// without an LLM client: what `pressure check-config` and the config
    /// loader do to tell a config that would serve from one that would not.
    pub fn check(config: GatewayConfig, base_dir: &Path) -> Result<Self, ConfigErrors> {
        let scratch: Broker =
            pressure_core::ResourceBroker::builder(AnyBackend::Memory(pressure_core::MemoryBackend::new()))
                .build();
        Self::from_checked(Self::checked(config, base_dir)?, &scratch, None)
    }

    /// The router.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The tenant policy.
    pub fn tenant(&self) -> &TenantPolicy {
        &self.tenant
    }

    /// The plan reading `live` as its live tenant overrides (a gateway's
    /// plans share one).
    pub(crate) fn with_live_overrides(mut self, live: Arc<LiveOverrides>) -> Self {
        self.live = live;
        self
    }

    /// The plan reading `keys` as the keys issued at runtime when
    /// `gateway.auth.runtimeKeys` is on (a gateway's plans share one
    /// mirror; `crate::plan::keys`).
    pub(crate) fn with_runtime_keys(mut self, keys: Arc<crate::auth::RuntimeKeys>) -> Self {
        if self.config.auth.runtime_keys {
            self.tenant.runtime_keys = Some(keys);
        }
        self
    }

    /// The live tenant overrides (admin API), shared by every plan of a
    /// gateway; they win over [`tenant_overrides`](Self::tenant_overrides).
    pub(crate) fn live_overrides(&self) -> &LiveOverrides {
        &self.live
    }

    /// Limits of named tenants instead of the tenant template
    /// (`perTenant.overrides`; empty while tenants are not limited).
    pub(crate) fn tenant_overrides(&self) -> &BTreeMap<String, LimitTemplate> {
        &self.tenant_overrides
    }

    /// The limits `tenant` gets now and where they come from; `None` while
    /// tenants are not limited (`crate::plan::overrides`).
    pub(crate) fn tenant_limits(&self, tenant: &str) -> Option<(LimitTemplate, Source)> {
        let template = self.tenant.template.as_ref()?;
        let live = self.live.get(tenant);
        let (t, source) = overrides::resolve(live.as_ref(), self.tenant_overrides.get(tenant), template);
        Some((t.clone(), source))
    }

    /// The handle of `tenant`'s resource, registered on first use with the
    /// limits it gets now ([`tenant_limits`](Self::tenant_limits)); `None`
    /// while tenants are not limited. A live override written while the
    /// tenant registers is applied to it before this returns.
    pub(crate) fn tenant_handle(
        &self,
        broker: &Broker,
        tenant: &str,
    ) -> Option<Result<ResourceHandle<AnyBackend>, pressure_core::Error>> {
        self.tenant_handle_in(broker, tenant, None)
    }

    /// [`tenant_handle`](Self::tenant_handle) placed in `group`, the
    /// resource of its hierarchy's root (see `hierarchy`); `None` for a
    /// root itself, whose keys never move.
    pub(crate) fn tenant_handle_in(
        &self,
        broker: &Broker,
        tenant: &str,
        group: Option<&str>,
    ) -> Option<Result<ResourceHandle<AnyBackend>, pressure_core::Error>> {
        let template = self.tenant.template.as_ref()?;
        let seen = self.live.changes();
        // No clone of the limits on the hot path: they are read in place.
        let live = self.live.view();
        let live = live.as_ref().and_then(|v| v.get(tenant));
        let (limits, _) = overrides::resolve(live, self.tenant_overrides.get(tenant), template);
        let resource = crate::resources::tenant(tenant);
        let handle = match group {
            None => broker.lazy_limit(&resource, limits),
            Some(g) => broker.lazy_limit_in_group(&resource, g, limits),
        };
        if handle.is_ok() && self.live.changes() != seen {
            self.refresh_tenant(broker, tenant);
        }
        Some(handle)
    }

    /// Brings the registered resource of `tenant`, if any, to the limits it
    /// gets now under this plan, keeping its usage (an unregistered tenant
    /// picks them up at its first request); unregisters it while tenants are
    /// not limited. Called when a live override or the config changes.
    pub(crate) fn refresh_tenant(&self, broker: &Broker, tenant: &str) {
        let resource = crate::resources::tenant(tenant);
        if broker.resource(&resource).is_none() {
            return;
        }
        match self.tenant_limits(tenant) {
            Some((limits, _)) => {
                if let Err(e) = broker.set_limits(&resource, limits.limits().clone()) {
                    tracing::warn!(resource = resource.as_str(), error = %e, "tenant limits not updated");
                }
            }
            None => {
                broker.unregister(&resource);
            }
        }
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

    /// Ids of the route, service, API key and `pressure.resources`
    /// resources this plan registered.
    pub fn resource_ids(&self) -> &BTreeSet<String> {
        &self.resources
    }

    /// The config the plan was built from.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }
}

/// `gateway.auth`: the JWT verifier, when there is a `jwt` section.
fn authenticator(auth: &AuthConfig, base_dir: &Path) -> Result<Option<Arc<Authenticator>>, ConfigError> {
    match &auth.jwt {
        Some(jwt) => Authenticator::new(jwt, base_dir).map(|a| Some(Arc::new(a))),
        None if auth.required && auth.api_keys.is_empty() && !auth.runtime_keys => Err(ConfigError::new(
            "gateway.auth.required",
            "requires gateway.auth.jwt, gateway.auth.apiKeys or gateway.auth.runtimeKeys (nothing can name a tenant without them)",
        )),
        None => Ok(None),
    }
}

/// Registers `id` with `limits`, or updates its limits in place.
fn register(
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

/// The problems found while building, in the order found.
#[derive(Debug, Default)]
struct Problems(Vec<ConfigError>);

impl Problems {
    /// The value of `result`, or `None` with its problem kept.
    fn keep<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        result.map_err(|e| self.0.push(e)).ok()
    }

    /// `Ok` when nothing was found.
    fn into_result(self) -> Result<(), ConfigErrors> {
        match ConfigErrors::new(self.0) {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }

    /// The problems found (at least one: a section that did not build).
    fn into_errors(self) -> ConfigErrors {
        ConfigErrors::new(self.0)
            .unwrap_or_else(|| ConfigErrors::from(ConfigError::new("gateway", "the config did not build")))
    }
}
