//! The standalone service: gRPC on one listener, `/metrics` and `/healthz`
//! on an optional admin listener, reload on file change and SIGHUP.
//! [`Server::bind`] binds both (so a caller can print the addresses, also
//! for port 0) and [`Server::serve`] runs until the shutdown future ends.

use crate::config::Plan;
use crate::error::RlsError;
use crate::grpc::RateLimitServiceServer;
use crate::reload::{self, Reloader};
use crate::service::RateLimiter;
use pressure_core::{Backend, ResourceBroker};
use pressure_redis::{AnyBackend, RedisBackend, RedisConfig};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// The default gRPC address (envoyproxy/ratelimit listens on 8081; 8089
/// keeps clear of it, so both can run side by side while migrating).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8089";

/// What `pressure rls` was asked to run.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The YAML files, one domain each.
    pub files: Vec<PathBuf>,
    /// The gRPC address.
    pub listen: String,
    /// The admin address (`/metrics`, `/healthz`), if any.
    pub admin: Option<String>,
    /// The Redis backend; `None`: in memory (one process).
    pub redis: Option<RedisConfig>,
    /// Poll the files for changes this often; `None`: SIGHUP only.
    pub watch: Option<Duration>,
    /// Most descriptor counters kept at once; in memory only counters whose
    /// windows have passed are dropped, and past it new values share their
    /// rule's overflow counter ([`RateLimiter::max_counters`]).
    pub max_counters: usize,
}

impl ServerOptions {
    /// Options for `files` with the defaults: [`DEFAULT_LISTEN`], no admin
    /// listener, in memory, watched.
    pub fn new(files: Vec<PathBuf>) -> Self {
        Self {
            files,
            listen: DEFAULT_LISTEN.into(),
            admin: None,
            redis: None,
            watch: Some(reload::WATCH_INTERVAL),
            max_counters: pressure_core::DEFAULT_MAX_LAZY_RESOURCES,
        }
    }
}

/// A bound, not yet serving, rate limit service.
#[derive(Debug)]
pub struct Server {
    limiter: Arc<RateLimiter<AnyBackend>>,
    reloader: Arc<Reloader<AnyBackend>>,
    grpc: TcpListener,
    admin: Option<TcpListener>,
    watch: Option<Duration>,
    redis: Option<RedisBackend>,
}

impl Server {
    /// Loads the files, sets up the backend and binds the listeners.
    pub async fn bind(opts: ServerOptions) -> Result<Self, RlsError> {
        let texts = reload::read(&opts.files)?;
        let plan = Plan::from_texts(&texts)?;
        // Redis down at start is not fatal: the failure mode applies and
        // the backend reconnects by itself.
        let (backend, redis) = AnyBackend::start(opts.redis.as_ref()).await?;
        // In memory the service bounds its counters itself, never dropping
        // a live one (`counters.rs`); the broker only needs room for them
        // and the overflow counters. In Redis the count stays in the store
        // and the broker's bound evicts idle handles.
        let in_store = redis.is_some();
        let broker_bound = if in_store {
            opts.max_counters
        } else {
            opts.max_counters
                .saturating_add(RateLimiter::<AnyBackend>::MAX_OVERFLOW_COUNTERS)
        };
        let clock = match &backend {
            AnyBackend::Memory(m) => Some(Arc::clone(m.clock())),
            AnyBackend::Redis(_) => None,
        };
        let broker = ResourceBroker::builder(backend)
            .max_lazy_resources(broker_bound)
            .build();
        let mut limiter = RateLimiter::new(broker, plan)
            .max_counters(opts.max_counters)
            .store_keeps_state(in_store);
        if let Some(clock) = clock {
            limiter = limiter.clock(clock);
        }
        let limiter = Arc::new(limiter);
        let reloader = Arc::new(Reloader::new(opts.files.clone(), Arc::clone(&limiter), texts));
        let grpc = bind(&opts.listen).await?;
        let admin = match &opts.admin {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        Ok(Self {
            limiter,
            reloader,
            grpc,
            admin,
            watch: opts.watch,
            redis,
        })
    }

    /// The bound gRPC address.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.local_addr().ok()
    }

    /// The bound admin address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The service.
    pub fn limiter(&self) -> &Arc<RateLimiter<AnyBackend>> {
        &self.limiter
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), RlsError> {
        let mut tasks = tokio::task::JoinSet::new();
        if let Some(every) = self.watch {
            tasks.spawn(Arc::clone(&self.reloader).watch(every));
        }
        tasks.spawn(Arc::clone(&self.reloader).on_sighup());
        if let Some(admin) = self.admin {
            let app = admin_router(Arc::clone(&self.limiter), self.redis.clone());
            tasks.spawn(async move {
                if let Err(e) = axum::serve(admin, app).await {
                    tracing::error!(error = %e, "admin listener stopped");
                }
            });
        }
        let served = serve_grpc(Arc::clone(&self.limiter), self.grpc, shutdown).await;
        tasks.abort_all();
        served
    }
}

/// Serves `limiter` over gRPC on `listener` until `shutdown` completes: what
/// a program embedding the service (the gateway's `gateway.rls`) runs.
pub async fn serve_grpc<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RlsError> {
    serve_grpc_traced(limiter, listener, shutdown, None).await
}

/// [`serve_grpc`], with a server span per call recorded by `tracer`.
pub async fn serve_grpc_traced<B: Backend>(
    limiter: Arc<RateLimiter<B>>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    tracer: Option<pressure_core::trace::Tracer>,
) -> Result<(), RlsError> {
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(limiter).traced(tracer))
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), shutdown)
        .await?;
    Ok(())
}

async fn bind(addr: &str) -> Result<TcpListener, RlsError> {
    TcpListener::bind(addr).await.map_err(|source| RlsError::Bind {
        addr: addr.to_owned(),
        source,
    })
}

/// `/metrics` (Prometheus text) and `/healthz` (`200 ok`, or `503` while
/// the Redis backend is unreachable).
pub fn admin_router(limiter: Arc<RateLimiter<AnyBackend>>, redis: Option<RedisBackend>) -> axum::Router {
    use axum::routing::get;
    let metrics = move || {
        let limiter = Arc::clone(&limiter);
        async move {
            let mut out = String::new();
            limiter.metrics().encode(&mut out);
            ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
        }
    };
    let healthz = move || {
        let healthy = redis.as_ref().is_none_or(|r| r.status().healthy);
        async move {
            if healthy {
                (http::StatusCode::OK, "ok\n")
            } else {
                (http::StatusCode::SERVICE_UNAVAILABLE, "redis unavailable\n")
            }
        }
    };
    axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
}
