//! An in-process `pressure rls` on 127.0.0.1:0 with a real tonic client,
//! and request builders.

use pressure_redis::{AnyBackend, RedisConfig};
use pressure_rls::proto::{Code, RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use pressure_rls::{RateLimitClient, RateLimiter, Server, ServerOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A running service; stopped on drop.
pub(crate) struct Rls {
    pub(crate) client: RateLimitClient,
    pub(crate) limiter: Arc<RateLimiter<AnyBackend>>,
    pub(crate) admin: Option<String>,
    pub(crate) files: Vec<PathBuf>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Starts the service on `yamls` (one file each), in memory.
pub(crate) async fn start(yamls: &[&str]) -> Rls {
    start_with(yamls, None, true).await
}

/// Starts the service on `yamls`, on `redis` if given, with an admin
/// listener when `admin`.
pub(crate) async fn start_with(yamls: &[&str], redis: Option<RedisConfig>, admin: bool) -> Rls {
    start_counters(yamls, redis, admin, pressure_core::DEFAULT_MAX_LAZY_RESOURCES).await
}

/// [`start_with`] keeping at most `max_counters` descriptor counters.
pub(crate) async fn start_counters(
    yamls: &[&str],
    redis: Option<RedisConfig>,
    admin: bool,
    max_counters: usize,
) -> Rls {
    let dir = tempfile::tempdir().expect("temp dir");
    let files: Vec<PathBuf> = yamls
        .iter()
        .enumerate()
        .map(|(i, y)| {
            let p = dir.path().join(format!("config{i}.yaml"));
            std::fs::write(&p, y).expect("write config");
            p
        })
        .collect();
    let mut opts = ServerOptions::new(files.clone());
    opts.listen = "127.0.0.1:0".into();
    opts.admin = admin.then(|| "127.0.0.1:0".to_owned());
    opts.redis = redis;
    opts.watch = Some(Duration::from_millis(50));
    opts.max_counters = max_counters;
    let server = Server::bind(opts).await.expect("bind");
    let grpc = server.grpc_addr().expect("grpc addr");
    let admin = server.admin_addr().map(|a| format!("http://{a}"));
    let limiter = Arc::clone(server.limiter());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    let client = RateLimitClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect");
    Rls {
        client,
        limiter,
        admin,
        files,
        stop: Some(stop),
        _dir: dir,
    }
}

impl Rls {
    /// One call; panics on a gRPC error.
    pub(crate) async fn call(&mut self, req: RateLimitRequest) -> RateLimitResponse {
        self.client.should_rate_limit(req).await.expect("ShouldRateLimit")
    }

    /// `n` calls of `req`: how many were OK.
    pub(crate) async fn admitted(&mut self, req: &RateLimitRequest, n: usize) -> usize {
        let mut ok = 0;
        for _ in 0..n {
            if self.call(req.clone()).await.overall_code == Code::Ok as i32 {
                ok += 1;
            }
        }
        ok
    }

    /// The Prometheus text of the service's metrics.
    pub(crate) fn metrics(&self) -> String {
        let mut out = String::new();
        self.limiter.metrics().encode(&mut out);
        out
    }
}

/// A request of `domain` with one descriptor per `descriptors` item.
pub(crate) fn req(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors
            .iter()
            .map(|d| RateLimitDescriptor::of(d.iter().copied()))
            .collect(),
        hits_addend: 0,
    }
}

/// Whether the answer is OK overall.
pub(crate) fn ok(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::Ok as i32
}
