//! `pressure rls`: Envoy's rate limit service (gRPC) on pressure, with
//! envoyproxy/ratelimit's YAML files (see docs/envoy.md).

use pressure_redis::{FailureMode, RedisConfig};
use pressure_rls::{RlsError, Server, ServerOptions};
use std::path::PathBuf;
use std::time::Duration;

/// Options of `pressure rls`.
#[derive(Debug, clap::Args)]
pub(crate) struct RlsArgs {
    /// An envoyproxy/ratelimit YAML file (one domain); repeat for more.
    #[arg(long = "config", short = 'c', value_name = "FILE.yaml", required = true)]
    configs: Vec<PathBuf>,
    /// The gRPC address Envoy's `rate_limit_service` points at (port 0:
    /// any free port; the bound address is printed).
    #[arg(long, default_value = pressure_rls::DEFAULT_LISTEN)]
    listen: String,
    /// Serve `/metrics` (Prometheus) and `/healthz` on this address.
    #[arg(long, value_name = "ADDR")]
    admin: Option<String>,
    /// Count in Redis (`redis://host:port/db`, `rediss://` for TLS) so
    /// every instance shares one limit; without it, in this process.
    #[arg(long, value_name = "URL", conflicts_with = "redis_cluster")]
    redis: Option<String>,
    /// Count in a Redis Cluster: its seed nodes, comma-separated
    /// (`redis://10.0.0.1:7000,redis://10.0.0.2:7000`).
    #[arg(long, value_name = "NODES", value_delimiter = ',')]
    redis_cluster: Vec<String>,
    /// While Redis cannot be reached: `closed` (answer gRPC UNAVAILABLE,
    /// so Envoy's `failure_mode_deny` decides), `open` (allow) or `local`
    /// (count in this process with --local-share of each limit).
    #[arg(long, value_enum, default_value_t = Mode::Closed)]
    failure_mode: Mode,
    /// `local` failure mode: the share of each limit this instance may use.
    #[arg(long, default_value_t = 0.25)]
    local_share: f64,
    /// Timeout of each Redis call, milliseconds.
    #[arg(long, default_value_t = 50)]
    redis_timeout_ms: u64,
    /// Do not poll the files for changes (SIGHUP still reloads).
    #[arg(long)]
    no_watch: bool,
    /// Most descriptor counters held at once (distinct values of key-only
    /// descriptors, e.g. client IPs). In memory only counters whose windows
    /// have passed are dropped; while all are live, new values share one
    /// overflow counter per rule (docs/envoy.md). In Redis each value keeps
    /// its count in the store.
    #[arg(long, default_value_t = pressure_core::DEFAULT_MAX_LAZY_RESOURCES)]
    max_counters: usize,
}

/// `--failure-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Refuse to decide: gRPC UNAVAILABLE.
    Closed,
    /// Allow.
    Open,
    /// Count locally.
    Local,
}

impl RlsArgs {
    fn redis(&self) -> Option<RedisConfig> {
        if self.redis.is_none() && self.redis_cluster.is_empty() {
            return None;
        }
        let mut rc = RedisConfig::new(self.redis.clone().unwrap_or_default());
        rc.cluster_nodes = self.redis_cluster.clone();
        rc.failure_mode = match self.failure_mode {
            Mode::Closed => FailureMode::Closed,
            Mode::Open => FailureMode::Open,
            Mode::Local => FailureMode::Local,
        };
        rc.local_share = self.local_share;
        rc.timeout_ms = self.redis_timeout_ms;
        Some(rc)
    }
}

pub(crate) async fn run(args: RlsArgs) -> anyhow::Result<()> {
    let redis = args.redis();
    if let Some(rc) = &redis {
        if let Err(e) = rc.validate() {
            eprintln!("error: --redis: {e}");
            std::process::exit(crate::exit::INVALID.into());
        }
    }
    let opts = ServerOptions {
        files: args.configs.clone(),
        listen: args.listen.clone(),
        admin: args.admin.clone(),
        redis,
        watch: (!args.no_watch).then_some(pressure_rls::reload::WATCH_INTERVAL),
        max_counters: args.max_counters,
    };
    let server = match Server::bind(opts).await {
        Ok(s) => s,
        Err(e @ (RlsError::Config(_) | RlsError::Bind { .. })) => {
            eprintln!("error: {e}");
            std::process::exit(crate::exit::INVALID.into());
        }
        Err(e) => return Err(e.into()),
    };
    let grpc = server
        .grpc_addr()
        .map_or_else(|| args.listen.clone(), |a| a.to_string());
    match server.admin_addr() {
        Some(admin) => eprintln!("rls on grpc://{grpc}  admin on http://{admin}"),
        None => eprintln!("rls on grpc://{grpc}"),
    }
    server.serve(shutdown()).await?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    // Let in-flight answers go out.
    tokio::time::sleep(Duration::from_millis(10)).await;
}
