//! [`run`]: the gateway as a process — bind, serve on every core, reload on
//! `SIGHUP` (and on changes of the config or its TLS files with `watch`),
//! drain on `SIGTERM`/`SIGINT`.
//!
//! * Every listener (proxy, admin, decisions) is bound before anything else starts, without
//!   `SO_REUSEPORT`: a second process on the same address fails with
//!   "address already in use" instead of silently sharing the traffic. One
//!   task accepts and hands the connections round-robin to the server
//!   threads.
//! * The soft `RLIMIT_NOFILE` is raised to the hard limit, so a busy
//!   gateway is bounded by the system's limit, not by a shell's default.
//! * One server thread per core, each with its own single-threaded runtime
//!   and its own upstream pool, like nginx's workers; the plan, limits,
//!   tenants and stats are shared. A saturated server thread offers its
//!   core to whatever waits for it once a millisecond, with `share_cores`
//!   each time it runs out of tasks (`server::core_share`).
//! * `SIGTERM`/`SIGINT`: `/readyz` answers 503, the listener closes, requests
//!   and streams in flight finish within `shutdownGraceMs`, then `run`
//!   returns (exit 0).

use crate::drain::{drain, Listening};
use crate::gateway::{Gateway, GatewayError};
use crate::http::server::{core_share, distribute, serve_from, Source};
use crate::plan::CheckedConfig;
use crate::GatewayService;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::signal::unix::{signal, SignalKind};

/// How [`run`] was asked to behave.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The config file (reloads read it again).
    pub config_path: Option<PathBuf>,
    /// Reload when the config file changes (polled once a second).
    pub watch: bool,
    /// Write the access log whatever `gateway.accessLog.enabled` says.
    pub access_log: bool,
    /// A saturated server thread yields its core each time it runs out of
    /// tasks instead of once a millisecond, so the threads sharing its
    /// cores wait a batch instead of up to a millisecond, at more CPU per
    /// request (`--share-cores`).
    pub share_cores: bool,
}

fn bind_error(what: &'static str, addr: &str) -> impl FnOnce(std::io::Error) -> GatewayError {
    let addr = addr.to_owned();
    move |source| GatewayError::Bind { what, addr, source }
}

/// Binds `addr` exclusively (no `SO_REUSEPORT`).
fn bind(addr: &str, what: &'static str) -> Result<std::net::TcpListener, GatewayError> {
    let listener = std::net::TcpListener::bind(addr).map_err(bind_error(what, addr))?;
    listener.set_nonblocking(true).map_err(bind_error(what, addr))?;
    Ok(listener)
}

/// [`bind`] when there is an address to bind.
fn bind_optional(
    addr: Option<&str>,
    what: &'static str,
) -> Result<Option<std::net::TcpListener>, GatewayError> {
    addr.map(|addr| bind(addr, what)).transpose()
}

/// A server thread's runtime: single-threaded; while every poll finds
/// work at once, it yields its core once a millisecond, with `share_cores`
/// each time it runs out of tasks (`core_share`).
fn server_runtime(share_cores: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let pace = if share_cores {
        Duration::ZERO
    } else {
        core_share::PACE
    };
    let (park, unpark) = core_share::hooks(pace);
    tokio::runtime::Builder::new_current_thread()
        .on_thread_park(park)
        .on_thread_unpark(unpark)
        .enable_all()
        .build()
}

/// Raises the soft fd limit to the hard one.
fn raise_fd_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(nofile = n, "file descriptor limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the file descriptor limit"),
    }
}

/// Runs the gateway of a config checked once (`crate::config::check`)
/// until `SIGTERM`/`SIGINT`; `base_dir` resolves relative files.
pub async fn run(checked: CheckedConfig, base_dir: &Path, options: RunOptions) -> Result<(), GatewayError> {
    raise_fd_limit();
    let config = checked.config();
    let listen = config.listen.clone();
    let admin_addr = config.admin.listen.clone();
    let proxy_socket = bind(&listen, "gateway.listen")?;
    let admin_socket = bind(&admin_addr, "gateway.admin.listen")?;
    let decisions_addr = config.decisions.as_ref().map(|d| d.listen.clone());
    let decisions_socket = bind_optional(decisions_addr.as_deref(), "gateway.decisions.listen")?;
    let rls_config = config.rls.clone();
    let rls_socket = bind_optional(
        rls_config.as_ref().map(|r| r.listen.as_str()),
        "gateway.rls.listen",
    )?;
    let mut gateway = Gateway::from_checked(checked, base_dir).await?;
    if let Some(path) = &options.config_path {
        gateway = gateway.with_source(path);
    }
    if options.access_log {
        gateway = gateway.with_access_log();
    }
    let serve = gateway.serve_options();
    let rls = match (&rls_config, rls_socket) {
        (Some(c), Some(socket)) => Some(crate::rls::RlsListener::new(&gateway, c, base_dir, socket)?),
        _ => None,
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share_cores = options.share_cores;
    tracing::info!(
        listen,
        admin = admin_addr,
        workers,
        share_cores,
        "gateway listening"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (threads, handoff) = spawn_server_threads(&gateway, workers, share_cores, &serve, &stop_rx, &listen)?;
    let listener =
        tokio::net::TcpListener::from_std(proxy_socket).map_err(bind_error("gateway.listen", &listen))?;
    let mut accept_stop = stop_rx.clone();
    let acceptor = tokio::spawn(distribute(listener, handoff, async move {
        let _ = accept_stop.wait_for(|v| *v).await;
    }));
    let admin_listener = tokio::net::TcpListener::from_std(admin_socket)
        .map_err(bind_error("gateway.admin.listen", &admin_addr))?;
    let (admin_tx, admin_rx) = tokio::sync::watch::channel(false);
    let admin_task = gateway.spawn_admin(admin_listener, admin_rx);

    let decisions = match (decisions_socket, &decisions_addr) {
        (Some(socket), Some(addr)) => {
            let listener = tokio::net::TcpListener::from_std(socket)
                .map_err(bind_error("gateway.decisions.listen", addr))?;
            tracing::info!(decisions = addr.as_str(), "decision listener on");
            Some(gateway.spawn_decisions(listener))
        }
        _ => None,
    };
    let rls_task = rls.map(|rls| {
        let mut rls_stop = stop_rx.clone();
        tracing::info!(
            listen = rls_config.as_ref().map(|c| c.listen.as_str()),
            "gateway.rls listening"
        );
        tokio::spawn(rls.serve(options.watch, async move {
            let _ = rls_stop.wait_for(|v| *v).await;
        }))
    });

    wait_for_stop(&gateway, &options).await;
    let proxy_drained = async move {
        let _ = acceptor.await;
        if let Some(t) = rls_task {
            let _ = t.await;
        }
        let mut dropped = 0;
        for t in threads {
            if let Ok(Ok(n)) = tokio::task::spawn_blocking(move || t.join()).await {
                dropped += n;
            }
        }
        dropped
    };
    let listening = Listening {
        stop_proxy: stop_tx,
        proxy_drained: Box::pin(proxy_drained),
        decisions,
        stop_admin: admin_tx,
        admin: admin_task,
    };
    let set_draining = || {
        gateway.set_draining();
        tracing::info!(
            grace_ms = u64::try_from(serve.grace.as_millis()).unwrap_or(u64::MAX),
            "stopping: draining requests in flight"
        );
    };
    let dropped = drain(set_draining, listening).await;
    tracing::info!(dropped, "gateway stopped");
    Ok(())
}

/// Where the acceptor hands a server thread its connections.
type Handoff = tokio::sync::mpsc::Sender<(std::net::TcpStream, std::net::SocketAddr)>;

/// The proxy's server threads, one runtime each: each serves the
/// connections the acceptor hands it (the senders answered), until `stop`
/// turns true; a thread answers the connections it dropped at the end of
/// the grace.
fn spawn_server_threads(
    gateway: &Gateway,
    workers: usize,
    share_cores: bool,
    serve: &crate::http::server::ServeOptions,
    stop_rx: &tokio::sync::watch::Receiver<bool>,
    listen: &str,
) -> Result<(Vec<std::thread::JoinHandle<usize>>, Vec<Handoff>), GatewayError> {
    let mut threads = Vec::with_capacity(workers);
    let mut handoff = Vec::with_capacity(workers);
    for i in 0..workers {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        handoff.push(tx);
        let service = gateway.service();
        let mut stop = stop_rx.clone();
        let options = serve.clone();
        let thread = std::thread::Builder::new()
            .name(format!("pressure-gw-{i}"))
            .spawn(move || {
                let rt = match server_runtime(share_cores) {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start a server thread");
                        return 0;
                    }
                };
                rt.block_on(async move {
                    let stopped = async move {
                        let _ = stop.wait_for(|v| *v).await;
                    };
                    serve_from(
                        Source::Handed(rx),
                        service,
                        &options,
                        stopped,
                        GatewayService::attach,
                    )
                    .await
                    .dropped
                })
            })
            .map_err(bind_error("gateway.listen", listen))?;
        threads.push(thread);
    }
    Ok((threads, handoff))
}

/// Serves reloads until a stop signal arrives.
async fn wait_for_stop(gateway: &Gateway, options: &RunOptions) {
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers; stopping on Ctrl-C only");
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    let mut seen = stamps(gateway, options);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config");
                let _ = gateway.reload();
            }
            _ = tick.tick(), if options.watch => {
                let now = stamps(gateway, options);
                if now.first().is_some_and(Option::is_some) && now != seen {
                    tracing::info!("config or certificate file changed: reloading");
                    let _ = gateway.reload();
                    seen = stamps(gateway, options);
                }
            }
        }
    }
}

/// When the config file and the TLS files it names were last modified
/// (the config file first), for `--watch`: a rotated certificate reloads
/// too.
fn stamps(gateway: &Gateway, options: &RunOptions) -> Vec<Option<SystemTime>> {
    let plan = gateway.plan();
    let tls = crate::settings::watched_files(plan.config());
    std::iter::once(options.config_path.as_deref().and_then(modified))
        .chain(tls.into_iter().map(|f| modified(Path::new(f))))
        .collect()
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
