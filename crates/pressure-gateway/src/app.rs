//! [`Gateway`]: everything one gateway process runs, built from a validated
//! config — the broker on the configured backend with every route and
//! service limit registered, the layered proxy service, and the admin
//! router — plus [`run`], which binds both listeners and serves them.

use crate::admin::{self, AdminState};
use crate::backend::{AnyBackend, Broker};
use crate::body_limit::BodyLimitLayer;
use crate::config::{BackendConfig, ConfigError, GatewayConfig};
use crate::layers::pre_auth::PreAuthLayer;
use crate::layers::release::ReleaseLayer;
use crate::layers::tenant::{Authenticator, TenantLayer};
use crate::llm::{Llm, LlmRoute};
use crate::manual_queue::RedisManualQueue;
use crate::metrics::GatewayMetrics;
use crate::proxy::ProxyService;
use crate::routes::{service_resource, RouteTable};
use axum::body::Body;
use http::{Request, Response};
use pressure_core::{LimitTemplate, MemoryBackend, ResourceBroker};
use pressure_llm::pipeline::{LlmClient, LlmError};
use pressure_redis::RedisBackend;
use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;
use tower::util::BoxCloneSyncService;
use tower::ServiceBuilder;

/// The gateway's request service: body limit → release → pre-auth → tenant
/// → (`POST /v1/chat/completions` when `gateway.llm` is set) → proxy.
pub type GatewayService = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The config is invalid (names the JSON path).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Redis backend could not connect.
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

/// One gateway, built and ready to serve.
#[derive(Clone)]
pub struct Gateway {
    config: GatewayConfig,
    broker: Broker,
    metrics: Arc<GatewayMetrics>,
    redis: Option<RedisBackend>,
    parts: Arc<Parts>,
    service: GatewayService,
}

/// What every copy of the request service shares.
struct Parts {
    routes: Arc<RouteTable>,
    tenant: TenantLayer,
    llm: Option<Llm>,
}

/// The layer stack over `proxy` (and the LLM endpoint, when configured:
/// inside the pressure layers, so its traffic is limited like the proxied).
fn stack(
    config: &GatewayConfig,
    metrics: &Arc<GatewayMetrics>,
    parts: &Parts,
    proxy: ProxyService,
) -> GatewayService {
    let inner: GatewayService = match &parts.llm {
        Some(llm) => BoxCloneSyncService::new(LlmRoute::new(Arc::clone(llm), proxy)),
        None => BoxCloneSyncService::new(proxy),
    };
    if config.pressure.enabled {
        BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(BodyLimitLayer::new(config.limits.max_body_bytes))
                .layer(ReleaseLayer::new(metrics.clone()))
                .layer(PreAuthLayer::new(parts.routes.clone(), metrics.clone()))
                .layer(parts.tenant.clone())
                .service(inner),
        )
    } else {
        BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(BodyLimitLayer::new(config.limits.max_body_bytes))
                .layer(parts.tenant.clone())
                .service(inner),
        )
    }
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("listen", &self.config.listen)
            .field("broker", &self.broker)
            .finish_non_exhaustive()
    }
}

fn config_error(path: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::new(path, problem)
}

/// Why the LLM client could not be built, under `gateway.llm`.
fn llm_error(e: LlmError) -> ConfigError {
    match e {
        LlmError::Config(c) => config_error(&format!("gateway.llm.{}", c.path), c.problem),
        other => config_error("gateway.llm", other.to_string()),
    }
}

impl Gateway {
    /// Builds the gateway from a validated `config`; `base_dir` resolves
    /// relative files (JWT keys). Connects to Redis when configured.
    pub async fn build(config: GatewayConfig, base_dir: &Path) -> Result<Self, GatewayError> {
        let (backend, redis) = match &config.backend {
            BackendConfig::Memory => (AnyBackend::Memory(MemoryBackend::new()), None),
            BackendConfig::Redis(rc) => {
                let r = RedisBackend::connect(rc.clone()).await?;
                (AnyBackend::Redis(r.clone()), Some(r))
            }
        };
        let broker: Broker = ResourceBroker::builder(backend)
            .max_lazy_resources(config.pressure.per_tenant.max_tenants)
            .build();
        let pressure = &config.pressure;
        if pressure.enabled {
            for (name, limits) in &pressure.per_service {
                broker
                    .register_limit(service_resource(name), limits.clone())
                    .map_err(|e| {
                        config_error(&format!("gateway.pressure.perService.{name}"), e.to_string())
                    })?;
            }
            for (i, r) in pressure.per_route.iter().enumerate() {
                broker
                    .register_limit(r.resource.clone(), r.limits.clone())
                    .map_err(|e| config_error(&format!("gateway.pressure.perRoute[{i}]"), e.to_string()))?;
            }
        }
        let routes = Arc::new(RouteTable::new(&config, &broker));
        let metrics = Arc::new(GatewayMetrics::new());
        let auth = match &config.auth.jwt {
            Some(j) => Some(Arc::new(Authenticator::new(j, base_dir).map_err(
                |(field, problem)| config_error(&format!("gateway.auth.jwt.{field}"), problem),
            )?)),
            None => None,
        };
        let template = match (
            &pressure.per_tenant.limits,
            pressure.enabled && pressure.per_tenant.enabled,
        ) {
            (Some(l), true) => Some(LimitTemplate::new(l).map_err(|e| {
                config_error(
                    &format!("gateway.pressure.perTenant.limits.{}", e.field),
                    e.problem,
                )
            })?),
            _ => None,
        };
        // Checked once here; `stack` builds more proxies from the same config.
        let proxy = ProxyService::from_config(&config.upstreams, &config.timeouts)
            .map_err(|e| config_error("gateway.upstreams", e.to_string()))?;
        let tenant = TenantLayer::new(
            auth,
            config.auth.required,
            template,
            broker.clone(),
            metrics.clone(),
        );
        // On the gateway's broker: `llm:<provider>:<model>` resources live
        // beside the gateway's own, on the same backend.
        let llm: Option<Llm> = match &config.llm {
            Some(c) => {
                let mut client = LlmClient::new(c.clone(), broker.clone()).map_err(llm_error)?;
                // The durable manual queue on the backend's Redis (DESIGN §6).
                if let BackendConfig::Redis(rc) = &config.backend {
                    client = client.with_manual_queue(Arc::new(RedisManualQueue::new(rc)));
                }
                let client = Arc::new(client);
                let scraped = Arc::clone(&client);
                metrics.add_section(Arc::new(move |out: &mut String| {
                    crate::llm::encode_metrics(&scraped, out)
                }));
                Some(client)
            }
            None => None,
        };
        let parts = Arc::new(Parts { routes, tenant, llm });
        let service = stack(&config, &metrics, &parts, proxy);
        Ok(Self {
            config,
            broker,
            metrics,
            redis,
            parts,
            service,
        })
    }

    /// The broker (for stats, and for embedding applications).
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<GatewayMetrics> {
        &self.metrics
    }

    /// The LLM client behind `POST /v1/chat/completions`, when `gateway.llm` is set.
    pub fn llm(&self) -> Option<&Llm> {
        self.parts.llm.as_ref()
    }

    /// The config in use.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// The layered request service.
    pub fn service(&self) -> GatewayService {
        self.service.clone()
    }

    /// A copy of the request service with its own upstream connection pool,
    /// for a server thread of its own: limits, tenants and metrics are
    /// shared, connections are not, so no request hops between threads.
    pub fn service_with_own_pool(&self) -> GatewayService {
        match ProxyService::from_config(&self.config.upstreams, &self.config.timeouts) {
            Ok(proxy) => stack(&self.config, &self.metrics, &self.parts, proxy),
            // Unreachable: the same config built a proxy in `build`.
            Err(_) => self.service(),
        }
    }

    /// The admin router; `token` from `admin.tokenEnv` when set.
    pub fn admin_router(&self) -> axum::Router {
        let token = self
            .config
            .admin
            .token_env
            .as_deref()
            .and_then(|v| std::env::var(v).ok())
            .filter(|t| !t.is_empty());
        admin::router(AdminState {
            broker: self.broker.clone(),
            metrics: self.metrics.clone(),
            token,
            redis: self.redis.clone(),
            llm: self.parts.llm.clone(),
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
    /// `shutdown` resolves.
    pub async fn serve(
        self,
        listener: TcpListener,
        admin: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let mut admin_rx = rx.clone();
        let router = self.admin_router();
        let admin_task = tokio::spawn(async move {
            let _ = axum::serve(admin, router)
                .with_graceful_shutdown(async move {
                    let _ = admin_rx.wait_for(|v| *v).await;
                })
                .await;
        });
        let mut proxy_rx = rx;
        let max_header = self.config.limits.max_header_bytes;
        let proxy_task = tokio::spawn(crate::server::serve(
            listener,
            self.service(),
            max_header,
            async move {
                let _ = proxy_rx.wait_for(|v| *v).await;
            },
        ));
        shutdown.await;
        let _ = tx.send(true);
        let _ = proxy_task.await;
        let _ = admin_task.await;
    }
}

/// A gateway serving in a background task (from [`Gateway::spawn`]): what
/// tests, examples and the chaos stand hold to stop it. Dropping it aborts
/// the task at once; [`Serving::stop`] shuts down gracefully.
#[derive(Debug)]
pub struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Serving {
    /// Stops accepting, lets requests in flight finish, and waits at most
    /// `grace` for that; `false` when the grace ran out and the task was
    /// aborted.
    pub async fn stop(mut self, grace: std::time::Duration) -> bool {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let Some(mut task) = self.task.take() else {
            return true;
        };
        if tokio::time::timeout(grace, &mut task).await.is_ok() {
            return true;
        }
        task.abort();
        false
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Binds `gateway.listen` and `gateway.admin.listen` and serves until
/// Ctrl-C: one server thread per core, each with its own accept socket
/// (`SO_REUSEPORT`), its own single-threaded runtime and its own upstream
/// pool, like nginx's workers; limits, tenants and stats are shared.
pub async fn run(config: GatewayConfig, base_dir: &Path) -> Result<(), GatewayError> {
    let listen = config.listen.clone();
    let admin = config.admin.listen.clone();
    let gateway = Gateway::build(config, base_dir).await?;
    let bind_err = |what: &'static str, addr: &str| {
        let addr = addr.to_owned();
        move |source| GatewayError::Bind { what, addr, source }
    };
    let addr: std::net::SocketAddr = listen.parse().map_err(|e| {
        GatewayError::Config(config_error(
            "gateway.listen",
            format!("not a socket address: {e}"),
        ))
    })?;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut sockets = Vec::with_capacity(workers);
    for _ in 0..workers {
        sockets.push(reuseport_listener(addr).map_err(bind_err("gateway.listen", &listen))?);
    }
    let admin_listener = TcpListener::bind(&admin)
        .await
        .map_err(bind_err("gateway.admin.listen", &admin))?;
    tracing::info!(listen, admin, workers, "gateway listening");
    let (tx, rx) = tokio::sync::watch::channel(false);
    let max_header = gateway.config.limits.max_header_bytes;
    let mut threads = Vec::with_capacity(workers);
    for (i, socket) in sockets.into_iter().enumerate() {
        let service = gateway.service_with_own_pool();
        let mut stop = rx.clone();
        let thread = std::thread::Builder::new()
            .name(format!("pressure-gw-{i}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start a server thread");
                        return;
                    }
                };
                rt.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(socket) else {
                        return;
                    };
                    crate::server::serve(listener, service, max_header, async move {
                        let _ = stop.wait_for(|v| *v).await;
                    })
                    .await;
                });
            })
            .map_err(bind_err("gateway.listen", &listen))?;
        threads.push(thread);
    }
    let router = gateway.admin_router();
    let mut admin_stop = rx;
    let admin_task = tokio::spawn(async move {
        let _ = axum::serve(admin_listener, router)
            .with_graceful_shutdown(async move {
                let _ = admin_stop.wait_for(|v| *v).await;
            })
            .await;
    });
    let _ = tokio::signal::ctrl_c().await;
    let _ = tx.send(true);
    let _ = admin_task.await;
    for t in threads {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    Ok(())
}

/// A non-blocking listening socket on `addr` that other sockets of this
/// process may also bind (`SO_REUSEPORT`): the kernel spreads connections.
fn reuseport_listener(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(1024)?;
    listener.into_std()
}
