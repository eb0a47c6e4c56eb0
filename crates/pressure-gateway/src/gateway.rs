//! [`Gateway`]: everything one gateway process runs, built from a validated
//! config — the broker on the configured backend, the current [`Plan`]
//! (swapped whole on reload), the layered request service and the admin
//! router — and [`Serving`], a gateway serving in the background.

use crate::admin::{self, AdminState};
use crate::answer::Answer;
use crate::backend::{AnyBackend, Broker};
use crate::decisions::permits::PermitStore;
use crate::decisions::{self, DecisionState};
use crate::drain::Serving;
use crate::http::proxy::ProxyClient;
use crate::http::server::{serve_from, serve_with, AcceptFailures, ConnLink, ServeOptions, Source};
use crate::layers::body_limit::BodyLimitLayer;
use crate::layers::pre_auth::PreAuthLayer;
use crate::layers::release::ReleaseLayer;
use crate::layers::release::{ReleaseFuture, ReleaseService};
use crate::layers::route::{RouteFuture, RouteLayer, RouteService};
use crate::layers::tenant::TenantLayer;
use crate::layers::{Outcome, StepFuture, Stepped};
use crate::manual_queue::RedisManualQueue;
use crate::metrics::GatewayMetrics;
use crate::openai::Llm;
use crate::plan::keys::store::Keys;
use crate::plan::overrides::store::Overrides;
use crate::plan::overrides::{LiveOverrides, LiveParents};
use crate::plan::reload::{self, ReloadOutcome};
use crate::plan::Listeners;
use crate::plan::PlanCell;
use crate::plan::{CheckedConfig, Plan};
use crate::settings::{BackendConfig, ConfigError, GatewayConfig, DEFAULT_MAX_PERMITS};
use arc_swap::ArcSwap;
use axum::body::Body;
use http::{Request, Response};
use pressure_core::ResourceBroker;
use pressure_llm::breaker::BreakerScope;
use pressure_llm::pipeline::{LlmClient, LlmError};
use pressure_redis::RedisBackend;
use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tower::ServiceBuilder;

/// The layers of the request path over the proxy, as built once per
/// server thread (see [`crate::layers`]).
type Stack = RouteService<
    Stepped<BodyLimitLayer, ReleaseService<Stepped<PreAuthLayer, Stepped<TenantLayer, Answer>>>>,
>;

/// The gateway's request service: route → body limit → release → pre-auth
/// → tenant → the answer (an LLM endpoint, or the proxy), with one future
/// per request and no boxing between the
/// layers (see [`Gateway::service`]). Serve it with [`crate::serve_with`],
/// or call it as any `tower::Service`.
#[derive(Debug, Clone)]
pub struct GatewayService(Stack);

impl GatewayService {
    /// Attaches a copy to one client connection (see `crate::http::server::Attach`).
    pub(crate) fn attach(&mut self, link: &ConnLink) -> bool {
        self.0.attach(link.clone());
        true
    }
}

impl tower::Service<Request<Body>> for GatewayService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = GatewayFuture;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> GatewayFuture {
        GatewayFuture {
            fut: self.0.call(req),
        }
    }
}

/// The future of each layer over the one under it, the proxy's boxed one
/// innermost.
type StackFuture = RouteFuture<
    StepFuture<ReleaseFuture<StepFuture<StepFuture<futures::future::BoxFuture<'static, Outcome>>>>>,
>;

pin_project_lite::pin_project! {
    /// The answer of [`GatewayService`] to one request: a plain value over
    /// the layers' futures.
    pub struct GatewayFuture {
        #[pin]
        fut: StackFuture,
    }
}

impl Future for GatewayFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.project().fut.poll(cx)
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The config is invalid (names the JSON path).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Redis backend could not be set up.
    #[error("gateway.backend: {0}")]
    Backend(#[from] pressure_core::BackendError),
    /// A listener could not bind.
    #[error("{what}: cannot listen on {addr}: {source}")]
    Bind {
        /// `gateway.listen` or `gateway.admin.listen`.
        what: &'static str,
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

/// One gateway, built and ready to serve. Cheap to clone: clones share
/// everything.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<GatewayState>,
}

struct GatewayState {
    plan: PlanCell,
    broker: Broker,
    metrics: Arc<GatewayMetrics>,
    redis: Option<RedisBackend>,
    base_dir: PathBuf,
    source: Option<PathBuf>,
    reload_lock: parking_lot::Mutex<()>,
    draining: AtomicBool,
    admin_token: Option<String>,
    tls: Listeners,
    force_access_log: bool,
    permits: Arc<PermitStore>,
    decisions_token: Option<Arc<str>>,
    overrides: Overrides,
    keys: Keys,
    /// The tracer, when traces are exported (`crate::otel`).
    tracer: Option<pressure_core::trace::Tracer>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("listen", &self.plan().config().listen)
            .field("broker", &self.inner.broker)
            .finish_non_exhaustive()
    }
}

/// Why the LLM client could not be built, under `gateway.llm`.
fn llm_error(e: LlmError) -> ConfigError {
    match e {
        LlmError::Config(c) => ConfigError::new(format!("gateway.llm.{}", c.path), c.problem),
        other => ConfigError::new("gateway.llm", other.to_string()),
    }
}

impl Gateway {
    /// Checks `config` ([`Plan::checked`]; its errors are
    /// [`GatewayError::Config`]) and builds the gateway from it; `base_dir`
    /// resolves relative files (JWT keys, certificates). Sets up the Redis
    /// backend when configured.
    pub async fn build(config: GatewayConfig, base_dir: &Path) -> Result<Self, GatewayError> {
        let checked = Plan::checked(config, base_dir).map_err(ConfigError::from)?;
        Self::from_checked(checked, base_dir).await
    }

    /// Builds the gateway from a config checked once ([`Plan::checked`]):
    /// its plan is built from what the check loaded, on the gateway's
    /// broker, without checking again.
    pub async fn from_checked(checked: CheckedConfig, base_dir: &Path) -> Result<Self, GatewayError> {
        let config = checked.config();
        // Redis down at start is not fatal: the failure mode applies and a
        // background probe reconnects (docs/architecture.md#lifecycle-and-live-reload).
        let redis_config = match &config.backend {
            BackendConfig::Memory => None,
            BackendConfig::Redis(rc) => Some(rc),
        };
        let (backend, redis) = AnyBackend::start(redis_config).await?;
        let broker: Broker = ResourceBroker::builder(backend)
            .max_lazy_resources(config.pressure.per_tenant.max_tenants)
            .build();
        let metrics = Arc::new(GatewayMetrics::new());
        let tracer = crate::settings::resolve_tracing(config.tracing.as_ref(), &|k| std::env::var(k).ok())?
            .map(|resolved| crate::otel::start(resolved, &metrics));
        // On the gateway's broker: `llm:<provider>:<model>` resources live
        // beside the gateway's own, on the same backend.
        let llm: Option<Llm> = match &config.llm {
            Some(c) => {
                let mut client = LlmClient::new(c.clone(), broker.clone()).map_err(llm_error)?;
                // The durable manual queue on the backend's Redis (docs/architecture.md#the-llm-stack).
                if let BackendConfig::Redis(rc) = &config.backend {
                    client = client.with_manual_queue(Arc::new(RedisManualQueue::new(rc)));
                }
                // Fleet-wide breakers on the backend's Redis unless
                // `llm.breaker.scope` is `process` (docs/architecture.md#what-openai-and-anthropic-clients-expect).
                if let (Some(r), false) = (&redis, c.breaker.scope == Some(BreakerScope::Process)) {
                    client = client
                        .with_shared_breakers(Arc::new(r.clone()))
                        .map_err(llm_error)?;
                }
                let client = Arc::new(client);
                let scraped = Arc::clone(&client);
                metrics.add_section(Arc::new(move |out: &mut String| {
                    crate::metrics::llm::encode(&scraped, out);
                }));
                Some(client)
            }
            None => None,
        };
        let admin_token = config
            .admin
            .token_env
            .as_deref()
            .and_then(|v| std::env::var(v).ok())
            .filter(|t| !t.is_empty());
        let decisions_token = config
            .decisions
            .as_ref()
            .and_then(|d| d.token_env.as_deref())
            .and_then(|v| std::env::var(v).ok())
            .filter(|t| !t.is_empty())
            .map(Arc::from);
        let max_permits = config
            .decisions
            .as_ref()
            .map_or(DEFAULT_MAX_PERMITS, |d| d.max_permits);
        let backend_config = config.backend.clone();
        let live = Arc::new(LiveOverrides::default());
        let parents = Arc::new(LiveParents::default());
        let (plan, tls) = Plan::with_tls(checked, &broker, llm).map_err(ConfigError::from)?;
        let runtime_keys = Arc::new(crate::auth::RuntimeKeys::default());
        let plan = plan
            .with_live_overrides(Arc::clone(&live))
            .with_live_parents(Arc::clone(&parents))
            .with_runtime_keys(Arc::clone(&runtime_keys));
        let tls = tls.into_listeners();
        let plan: PlanCell = Arc::new(ArcSwap::from_pointee(plan));
        let overrides = Overrides::start(&backend_config, live, parents, plan.clone(), broker.clone());
        let keys = Keys::start(&backend_config, runtime_keys, plan.clone(), broker.clone());
        Ok(Self {
            inner: Arc::new(GatewayState {
                plan,
                broker,
                metrics,
                redis,
                base_dir: base_dir.to_path_buf(),
                source: None,
                reload_lock: parking_lot::Mutex::new(()),
                draining: AtomicBool::new(false),
                admin_token,
                tls,
                force_access_log: false,
                permits: PermitStore::start(max_permits),
                decisions_token,
                overrides,
                keys,
                tracer,
            }),
        })
    }

    /// Remembers the config file the gateway was built from, so that
    /// [`reload`](Self::reload) can read it again.
    ///
    /// # Panics
    /// Never; a gateway already cloned keeps its source unset (call this
    /// right after [`build`](Self::build)).
    #[must_use]
    pub fn with_source(mut self, path: &Path) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.source = Some(path.to_path_buf());
        }
        self
    }

    /// Writes the access log (`crate::access_log`) whatever
    /// `gateway.accessLog.enabled` says, also after reloads
    /// (`pressure gateway --access-log`). Call it right after
    /// [`build`](Self::build), like [`with_source`](Self::with_source).
    #[must_use]
    pub fn with_access_log(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.force_access_log = true;
        }
        self
    }

    /// The config file reloads read, if any.
    pub fn source(&self) -> Option<&Path> {
        self.inner.source.as_deref()
    }

    /// The broker (for stats, and for embedding applications).
    pub fn broker(&self) -> &Broker {
        &self.inner.broker
    }

    /// The tracer, when traces are exported (`gateway.tracing`).
    pub(crate) fn tracer(&self) -> Option<pressure_core::trace::Tracer> {
        self.inner.tracer.clone()
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<GatewayMetrics> {
        &self.inner.metrics
    }

    /// The plan serving now.
    pub fn plan(&self) -> Arc<Plan> {
        self.inner.plan.load_full()
    }

    /// The LLM client behind `POST /v1/chat/completions`, when `gateway.llm` is set.
    pub fn llm(&self) -> Option<Llm> {
        self.plan().llm().cloned()
    }

    /// The Redis backend, when the config names one.
    pub fn redis(&self) -> Option<&RedisBackend> {
        self.inner.redis.as_ref()
    }

    /// A new copy of the request service with its own upstream connection
    /// pool (a server thread of its own keeps its connections to itself);
    /// the plan, limits, tenants and metrics are shared.
    pub fn service(&self) -> GatewayService {
        let connect_ms = self.plan().config().timeouts.connect_ms;
        let proxy = ProxyClient::with_upstream_tls(
            std::time::Duration::from_millis(connect_ms),
            Arc::clone(&self.inner.tls.upstreams),
        );
        let metrics = Arc::clone(&self.inner.metrics);
        GatewayService(
            ServiceBuilder::new()
                .layer(
                    RouteLayer::new(Arc::clone(&self.inner.plan), Arc::clone(&metrics))
                        .force_access_log(self.inner.force_access_log)
                        .tracer(self.inner.tracer.clone()),
                )
                .layer(BodyLimitLayer)
                .layer(ReleaseLayer::new(Arc::clone(&metrics)))
                .layer(PreAuthLayer::new(Arc::clone(&metrics)))
                .layer(TenantLayer::new(self.inner.broker.clone(), metrics))
                .service(Answer::new(proxy)),
        )
    }

    /// Re-reads the config file ([`with_source`](Self::with_source)) and
    /// swaps the plan (see [`apply`](Self::apply)). Counted in
    /// `pressure_config_reloads_total{result}` and logged either way.
    pub fn reload(&self) -> Result<ReloadOutcome, ConfigError> {
        let result = match self.source() {
            Some(path) => crate::plan::read(path).and_then(|c| self.apply(c)),
            None => Err(ConfigError::new(
                "(reload)",
                "the gateway was not started from a config file",
            )),
        };
        match &result {
            Ok(o) => {
                self.inner.metrics.reload("ok");
                tracing::info!(
                    added = o.added.len(),
                    changed = o.changed.len(),
                    removed = o.removed.len(),
                    "config reloaded"
                );
            }
            Err(e) => {
                self.inner.metrics.reload("error");
                tracing::error!(error = %e, "config reload refused; the old config serves on");
            }
        }
        result
    }

    /// Swaps the plan for one built from `config` (validated): a resource
    /// whose limits did not change keeps everything; a changed limit applies
    /// to new acquisitions and keeps current usage; removed resources go.
    /// Settings that only a restart can change (listeners, backend, …) are
    /// refused, and a refused config changes nothing.
    pub fn apply(&self, config: GatewayConfig) -> Result<ReloadOutcome, ConfigError> {
        let _one_at_a_time = self.inner.reload_lock.lock();
        let old = self.plan();
        reload::check_restart_only(old.config(), &config)?;
        let outcome = ReloadOutcome::between(old.config(), &config);
        // Certificates are read again on every reload (even when the file
        // names did not change), by the plan's build, before anything
        // changes.
        let checked = Plan::checked(config, &self.inner.base_dir).map_err(ConfigError::from)?;
        let (plan, tls) =
            Plan::with_tls(checked, &self.inner.broker, old.llm().cloned()).map_err(ConfigError::from)?;
        let plan = plan
            .with_live_overrides(Arc::clone(self.inner.overrides.live()))
            .with_live_parents(Arc::clone(self.inner.overrides.parents()))
            .with_runtime_keys(Arc::clone(self.inner.keys.mirror()));
        if plan.config().auth.runtime_keys {
            self.inner.keys.watch();
        }
        reload::retemplate_tenants(&self.inner.broker, &old, &plan);
        for id in old.resource_ids().difference(plan.resource_ids()) {
            self.inner.broker.unregister(id);
        }
        self.inner.plan.store(Arc::new(plan));
        tls.install(&self.inner.tls);
        Ok(outcome)
    }

    /// Sets (`Some`) or removes (`None`) the live limit override of
    /// `tenant` for every gateway on the same backend, applied here at once
    /// (`crate::plan::overrides`).
    pub(crate) async fn write_override(
        &self,
        tenant: String,
        limits: Option<(pressure_core::Limits, pressure_core::LimitTemplate)>,
    ) -> Result<(), pressure_core::BackendError> {
        self.inner.overrides.write(tenant, limits).await
    }

    /// Sets (`Some`; `""`: no parent) or removes (`None`: back to the
    /// config's) the live parent of `tenant` for every gateway on the same
    /// backend, applied here at once (`crate::plan::hierarchy`).
    pub(crate) async fn write_parent(
        &self,
        tenant: String,
        parent: Option<String>,
    ) -> Result<(), pressure_core::BackendError> {
        self.inner.overrides.write_parent(tenant, parent).await
    }

    /// Marks the gateway as stopping: `/readyz` answers 503 from now on.
    pub fn set_draining(&self) {
        self.inner.draining.store(true, Ordering::Release);
    }

    /// Whether the gateway is stopping.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Acquire)
    }

    /// The admin router; its token from `admin.tokenEnv` when set.
    pub fn admin_router(&self) -> axum::Router {
        admin::router(AdminState {
            broker: self.inner.broker.clone(),
            metrics: Arc::clone(&self.inner.metrics),
            token: self.inner.admin_token.clone(),
            redis: self.inner.redis.clone(),
            llm: self.llm(),
            control: Some(Arc::new(self.clone())),
        })
    }

    /// The decision listener's router (`gateway.decisions`, see
    /// `crate::decisions`): the decision API and forward auth on this
    /// gateway's broker and plan.
    pub fn decisions_router(&self) -> axum::Router {
        decisions::router(DecisionState::new(
            Arc::clone(&self.inner.plan),
            self.inner.broker.clone(),
            Arc::clone(&self.inner.metrics),
            Arc::clone(&self.inner.permits),
            self.inner.decisions_token.clone(),
            self.inner.force_access_log,
            self.inner.tracer.clone(),
        ))
    }

    /// Permits the decision listener holds for its clients now.
    pub fn decision_permits(&self) -> usize {
        self.inner.permits.len()
    }

    /// How the decision listener serves connections: the proxy's timeouts
    /// and head bound, a one-second grace, plain HTTP.
    pub fn decisions_serve_options(&self) -> ServeOptions {
        ServeOptions {
            grace: std::time::Duration::from_secs(1),
            tls: None,
            ..ServeOptions::from_config(self.plan().config())
        }
    }

    /// Serves the decision listener on `listener` in a background task
    /// until the returned [`Serving`] is stopped or dropped.
    pub fn spawn_decisions(&self, listener: TcpListener) -> Serving {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let router = self.decisions_router();
        let options = self.decisions_serve_options();
        let task = tokio::spawn(async move {
            serve_with(listener, router, &options, async move {
                let _ = rx.await;
            })
            .await;
        });
        Serving {
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// How the proxy listener serves connections (TLS when `gateway.tls`).
    pub fn serve_options(&self) -> ServeOptions {
        ServeOptions {
            tls: self.inner.tls.proxy.clone(),
            ..ServeOptions::from_config(self.plan().config())
        }
    }

    /// How the admin listener serves connections: the proxy's timeouts, a
    /// one-second grace, TLS when `gateway.admin.tls`.
    pub fn admin_serve_options(&self) -> ServeOptions {
        ServeOptions {
            grace: std::time::Duration::from_secs(1),
            tls: self.inner.tls.admin.clone(),
            ..ServeOptions::from_config(self.plan().config())
        }
    }

    /// Serves the admin router on `listener` in a background task until
    /// `stop` turns true.
    pub(crate) fn spawn_admin(
        &self,
        listener: TcpListener,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<crate::http::server::Drained> {
        let router = self.admin_router();
        let options = self.admin_serve_options();
        tokio::spawn(async move {
            serve_with(listener, router, &options, async move {
                let _ = stop.wait_for(|v| *v).await;
            })
            .await
        })
    }

    /// [`serve`](Self::serve) in a background task until the returned
    /// [`Serving`] is stopped or dropped.
    pub fn spawn(self, listener: TcpListener, admin: TcpListener) -> Serving {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            self.serve(listener, admin, async move {
                let _ = rx.await;
            })
            .await;
        });
        Serving {
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Serves the proxy on `listener` and the admin router on `admin` until
    /// `shutdown` resolves, then drains: `/readyz` answers 503, the proxy
    /// stops accepting and lets requests in flight finish (within
    /// `shutdownGraceMs`), and the admin listener stops last.
    pub async fn serve(
        self,
        listener: TcpListener,
        admin: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        let options = self.serve_options();
        let (admin_tx, admin_rx) = tokio::sync::watch::channel(false);
        let (proxy_tx, mut proxy_rx) = tokio::sync::watch::channel(false);
        let admin_task = self.spawn_admin(admin, admin_rx);
        let service = self.service();
        let proxy_task = tokio::spawn(async move {
            let stopped = async move {
                let _ = proxy_rx.wait_for(|v| *v).await;
            };
            let source = Source::Listener(listener, AcceptFailures::default());
            serve_from(source, service, &options, stopped, GatewayService::attach).await
        });
        shutdown.await;
        let listening = crate::drain::Listening {
            stop_proxy: proxy_tx,
            proxy_drained: Box::pin(async move { proxy_task.await.unwrap_or_default().dropped }),
            decisions: None,
            stop_admin: admin_tx,
            admin: admin_task,
        };
        let dropped = crate::drain::drain(|| self.set_draining(), listening).await;
        if dropped > 0 {
            tracing::warn!(dropped, "connections dropped at the end of the grace period");
        }
    }
}

/// What the admin listener may ask of its gateway (`crate::admin::Control`).
impl admin::Control for Gateway {
    fn is_draining(&self) -> bool {
        Gateway::is_draining(self)
    }

    fn reload(&self) -> Result<ReloadOutcome, ConfigError> {
        Gateway::reload(self)
    }

    fn plan(&self) -> Arc<Plan> {
        Gateway::plan(self)
    }

    fn write_override(
        &self,
        tenant: String,
        limits: Option<(pressure_core::Limits, pressure_core::LimitTemplate)>,
    ) -> futures::future::BoxFuture<'_, Result<(), pressure_core::BackendError>> {
        Box::pin(Gateway::write_override(self, tenant, limits))
    }

    fn write_parent(
        &self,
        tenant: String,
        parent: Option<String>,
    ) -> futures::future::BoxFuture<'_, Result<(), pressure_core::BackendError>> {
        Box::pin(Gateway::write_parent(self, tenant, parent))
    }

    fn keys(&self) -> &Keys {
        &self.inner.keys
    }
}
