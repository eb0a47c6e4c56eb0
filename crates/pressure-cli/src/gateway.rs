//! `pressure gateway` and `pressure check-config`.

use anyhow::Context;
use std::path::{Path, PathBuf};

/// Options of `pressure gateway`.
#[derive(Debug, clap::Args)]
pub(crate) struct GatewayArgs {
    /// The config file (its `gateway` key).
    #[arg(long, short)]
    config: PathBuf,
    /// Also serve the built-in demo upstream on the address of the
    /// upstream named `demo`, for trying the gateway with nothing else
    /// running.
    #[arg(long)]
    demo_upstream: bool,
    /// Reload the config when the file, or a TLS certificate, key or CA
    /// file it names, changes (besides SIGHUP and
    /// `POST /admin/pressure/reload`).
    #[arg(long)]
    watch: bool,
    /// Write one access log line per request (target `pressure::access`),
    /// whatever `gateway.accessLog.enabled` says; kept across reloads.
    #[arg(long)]
    access_log: bool,
    /// The server threads share their cores with other busy processes (a
    /// sidecar, an upstream, a load generator): a saturated server thread
    /// yields its core each time it runs out of tasks, where by default it
    /// does so once a millisecond, so a thread waiting for that core waits
    /// a batch instead of up to a millisecond. 10-15 % more CPU per request
    /// under saturation; off by default.
    #[arg(long)]
    share_cores: bool,
    /// Log line format on stderr: `json` (one JSON object per line) or
    /// `text` (human-readable).
    #[arg(long, value_enum, default_value_t = LogFormat::Json)]
    pub(crate) log_format: LogFormat,
    /// Least severe level logged: error, warn, info, debug or trace (any
    /// `tracing` filter directive is accepted, e.g.
    /// `info,pressure::access=off`). RUST_LOG, when set, wins over this.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub(crate) log_level: String,
}

/// The logging part of `pressure gateway --help`.
pub(crate) const LOGGING_HELP: &str = "\
Logging:
  Lines go to stderr, JSON by default (--log-format text for humans), at
  --log-level (default info). RUST_LOG, when set, wins over --log-level
  (e.g. RUST_LOG=info,pressure::access=off). Targets: pressure::denial (one
  line per refusal), pressure::access (one line per request, with
  --access-log or gateway.accessLog.enabled). See docs/logging.md.";

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One JSON object per line (the default; what log shippers parse).
    Json,
    /// Human-readable lines.
    Text,
}

/// Options of `pressure check-config`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckConfigArgs {
    /// The config file to validate.
    file: PathBuf,
}

/// The config file at `path` as read (shape, files, manifests), not yet
/// checked: the gateway checks it once as it builds its plan, and
/// `check-config` builds that plan on a broker of its own.
fn read_or_exit(path: &Path) -> pressure_gateway::config::GatewayConfig {
    pressure_gateway::config::read(path).unwrap_or_else(|e| invalid(path, &e))
}

/// Reports the config problem `e` of the file at `path` and exits 2.
fn invalid(path: &Path, e: &pressure_gateway::config::ConfigError) -> ! {
    // An unreadable file already names itself.
    if e.path == path.display().to_string() {
        eprintln!("error: {e}");
    } else {
        eprintln!("error: {}: {e}", path.display());
    }
    std::process::exit(crate::exit::INVALID.into());
}

fn base_dir(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub(crate) fn check(args: CheckConfigArgs) -> anyhow::Result<()> {
    let cfg = read_or_exit(&args.file);
    // The plan the gateway would serve, plugin manifests merged: built on
    // a broker of its own, as the gateway builds it at start.
    if let Err(errors) = pressure_gateway::config::validate(&cfg, &base_dir(&args.file)) {
        invalid(&args.file, errors.first());
    }
    crate::outln!(
        "{}: ok ({} upstreams, {} route limits, {} service limits, tenants {})",
        args.file.display(),
        cfg.upstreams.len(),
        cfg.pressure.per_route.len(),
        cfg.pressure.per_service.len(),
        if cfg.pressure.per_tenant.enabled {
            "limited"
        } else {
            "not limited"
        }
    )?;
    Ok(())
}

pub(crate) async fn run(args: GatewayArgs) -> anyhow::Result<()> {
    // Checked once, before anything listens: the gateway builds its plan
    // from what this check loaded.
    let checked = match pressure_gateway::config::check(read_or_exit(&args.config), &base_dir(&args.config)) {
        Ok(checked) => checked,
        Err(errors) => invalid(&args.config, errors.first()),
    };
    let cfg = checked.config();
    if args.demo_upstream {
        let up = cfg
            .upstreams
            .get("demo")
            .context("--demo-upstream needs an upstream named \"demo\"")?;
        let uri: http::Uri = up.url.parse().context("demo upstream url")?;
        let addr = uri
            .authority()
            .context("demo upstream url has no host:port")?
            .as_str()
            .to_owned();
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("demo upstream cannot listen on {addr}"))?;
        eprintln!("demo upstream on http://{addr}");
        tokio::spawn(pressure_mock::demo_upstream::serve(listener));
    }
    let scheme = |tls: bool| if tls { "https" } else { "http" };
    eprintln!(
        "gateway on {}://{}  admin on {}://{}",
        scheme(cfg.tls.is_some()),
        cfg.listen,
        scheme(cfg.admin.tls.is_some()),
        cfg.admin.listen
    );
    let options = pressure_gateway::RunOptions {
        config_path: Some(args.config.clone()),
        watch: args.watch,
        access_log: args.access_log,
        share_cores: args.share_cores,
    };
    match pressure_gateway::run(checked, &base_dir(&args.config), options).await {
        Ok(()) => Ok(()),
        Err(pressure_gateway::GatewayError::Config(e)) => {
            eprintln!("error: {}: {e}", args.config.display());
            std::process::exit(crate::exit::INVALID.into());
        }
        Err(e @ pressure_gateway::GatewayError::Bind { .. }) => {
            eprintln!("error: {e}");
            std::process::exit(crate::exit::INVALID.into());
        }
        Err(e) => Err(e.into()),
    }
}
