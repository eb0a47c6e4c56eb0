//! `gateway.rls`: Envoy's rate limit service on its own listener inside the
//! gateway, on the gateway's broker — so its descriptors count on the same
//! backend (memory or Redis), in the same failure mode, and show on the
//! same `/metrics` (`pressure_rls_*`) as the gateway's own limits.
//!
//! The YAML files are read at start (an invalid one stops the start with
//! `gateway.rls.files`, exit code 2) and again on every SIGHUP and, with
//! `--watch`, whenever they change; an invalid edit keeps the rules in
//! force. `gateway.rls` itself (the listener) changes only with a restart.

use crate::gateway::{Gateway, GatewayError};
use crate::settings::{ConfigError, RlsConfig};
use pressure_rls::reload::{self, Reloader};
use pressure_rls::{Plan, RateLimiter};
use std::path::Path;
use std::sync::Arc;

/// The service of `gateway.rls`, loaded and bound, not yet serving.
#[derive(Debug)]
pub(crate) struct RlsListener {
    limiter: Arc<RateLimiter<crate::backend::AnyBackend>>,
    reloader: Arc<Reloader<crate::backend::AnyBackend>>,
    listener: std::net::TcpListener,
    /// The gateway's tracer (`gateway.tracing`): a server span per call.
    tracer: Option<pressure_core::trace::Tracer>,
}

impl RlsListener {
    /// Loads `config`'s files (relative to `base_dir`) onto `gateway`'s
    /// broker, adds its metrics to the gateway's `/metrics`, and takes the
    /// already bound `listener`.
    pub(crate) fn new(
        gateway: &Gateway,
        config: &RlsConfig,
        base_dir: &Path,
        listener: std::net::TcpListener,
    ) -> Result<Self, GatewayError> {
        let files: Vec<_> = config.files.iter().map(|f| base_dir.join(f)).collect();
        let problem = |e: pressure_rls::ConfigError| ConfigError::new("gateway.rls.files", e.to_string());
        let texts = reload::read(&files).map_err(problem)?;
        let plan = Plan::from_texts(&texts).map_err(problem)?;
        let limiter = Arc::new(RateLimiter::new(gateway.broker().clone(), plan));
        let scraped = Arc::clone(&limiter);
        gateway.metrics().add_section(Arc::new(move |out: &mut String| {
            scraped.metrics().encode(out);
        }));
        let reloader = Arc::new(Reloader::new(files, Arc::clone(&limiter), texts));
        Ok(Self {
            limiter,
            reloader,
            listener,
            tracer: gateway.tracer(),
        })
    }

    /// Serves until `stop` completes; reloads on SIGHUP, and when `watch`
    /// on a change of the files.
    pub(crate) async fn serve(
        self,
        watch: bool,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), GatewayError> {
        let addr = self
            .listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let bind = |source| GatewayError::Bind {
            what: "gateway.rls.listen",
            addr: addr.clone(),
            source,
        };
        let listener = tokio::net::TcpListener::from_std(self.listener).map_err(bind)?;
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(Arc::clone(&self.reloader).on_sighup());
        if watch {
            tasks.spawn(Arc::clone(&self.reloader).watch(reload::WATCH_INTERVAL));
        }
        let served = pressure_rls::serve_grpc_traced(self.limiter, listener, stop, self.tracer).await;
        tasks.abort_all();
        if let Err(e) = served {
            tracing::error!(error = %e, "gateway.rls listener stopped");
        }
        Ok(())
    }
}
