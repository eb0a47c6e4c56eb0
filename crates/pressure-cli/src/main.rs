//! The `pressure` command. Subcommands are added by the crates that own them
//! (gateway, mock provider, chaos, triage); `demo` exercises the broker alone.

mod chaos;
mod config_cmd;
mod demo;
mod gateway;
mod json_log;
mod keys;
mod mock_provider;
mod queue;
mod redis_cmd;
mod rls;
mod triage;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: the gateway's request path is
/// allocation-heavy (hyper, http, tower: ~45 allocations per proxied
/// request), and callgrind counts about half the instructions per
/// allocation with it (`benches/callgrind-gateway.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Writes a line to stdout, returning the I/O error instead of panicking
/// (a closed pipe, as in `pressure demo | head -1`, ends the command quietly).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// Like [`outln!`], without the newline.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// Exit codes, the same for every subcommand (documented in `docs/cli.md`).
pub(crate) mod exit {
    /// The command failed at run time (a server could not be reached, a
    /// chaos criterion or an evaluation failed).
    pub(crate) const FAILURE: u8 = 1;
    /// The command line or a config file is invalid (clap uses 2 as well).
    pub(crate) const INVALID: u8 = 2;
}

/// Admission control for everything a platform pushes downstream: one
/// ResourceBroker that queues LLM calls and refuses floods fast.
#[derive(Debug, Parser)]
#[command(name = "pressure", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a short in-memory tour of the broker: check+reject on a webhook
    /// flood, queue+execute on a rate-limited LLM resource, then the stats.
    Demo(demo::DemoArgs),
    /// Runs the gateway: a reverse proxy applying per-route, per-service and
    /// per-tenant limits (config: the `gateway` key of a JSON file).
    #[command(after_help = gateway::LOGGING_HELP)]
    Gateway(gateway::GatewayArgs),
    /// Validates a config file without starting anything; exit code 2 and
    /// the JSON path of the first problem when it is invalid.
    CheckConfig(gateway::CheckConfigArgs),
    /// Lists or drains the manual queue: of a running gateway through its
    /// admin API (`--admin`, either backend), or from the Redis stream of a
    /// config (`--config`); one JSON line per queued request.
    Queue(queue::QueueArgs),
    /// Issues, lists, shows, changes and revokes API keys at runtime
    /// through a running gateway's admin API (`--admin-url`,
    /// `gateway.auth.runtimeKeys`).
    Keys(keys::KeysArgs),
    /// Runs Envoy's rate limit service (gRPC `ShouldRateLimit`) with
    /// envoyproxy/ratelimit's YAML files: exact sliding windows, denials
    /// that consume nothing, memory or Redis.
    Rls(rls::RlsArgs),
    /// Maintenance of the Redis backend's keys: `pressure redis gc` repairs
    /// keys that older versions left without an expiry.
    Redis(redis_cmd::RedisArgs),
    /// Runs the chaos stand's mock provider: OpenAI-compatible, misbehaving
    /// on demand (scenario at start, switchable through `/mock/*`).
    MockProvider(mock_provider::MockProviderArgs),
    /// Starts the mock provider and the gateway, loads the whole stack per
    /// scenario and writes report.json, report.md and SVG plots; exit code 0
    /// only if every criterion passes.
    Chaos(chaos::ChaosArgs),
    /// The triage example: `pressure triage eval` measures each degradation
    /// level's accuracy on the golden ticket set.
    Triage(triage::TriageArgs),
    /// The config's JSON Schema and its Markdown reference, generated from
    /// the config types.
    Config(config_cmd::ConfigArgs),
    /// Prints a shell completion script: `pressure completions bash >
    /// /etc/bash_completion.d/pressure` (zsh: into a directory of `$fpath`
    /// as `_pressure`; fish: `~/.config/fish/completions/pressure.fish`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// The causes of `e`, outermost first, each said once: a cause whose text
/// its parent already quotes is left out (no `a: b: b`).
fn message(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if parts.last().is_some_and(|p| p.contains(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
}

/// Whether `e` is stdout closed under us (`| head`): not a failure.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", message(&e));
            ExitCode::from(exit::FAILURE)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    // RUST_LOG, when set, wins over every default and over --log-level.
    let filter = |default: &str| {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
    };
    // Kept alive until exit: flushes the log writer thread.
    let _log_guard = match &cli.command {
        // The gateway logs structured JSON lines (denials, transitions),
        // written by a background thread so a flood of denials does not
        // serialize the request path on stderr; no line is dropped.
        // `--log-format text` writes human-readable lines instead;
        // `--log-level` sets the filter unless RUST_LOG is set.
        Command::Gateway(args) => {
            let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
                .lossy(false)
                .finish(std::io::stderr());
            if let Err(e) = tracing_subscriber::EnvFilter::try_new(&args.log_level) {
                eprintln!("error: --log-level {:?}: {e}", args.log_level);
                std::process::exit(2);
            }
            let builder = tracing_subscriber::fmt()
                .with_env_filter(filter(&args.log_level))
                .with_writer(writer);
            match args.log_format {
                gateway::LogFormat::Json => builder
                    .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                    .event_format(json_log::JsonLines::new())
                    .init(),
                gateway::LogFormat::Text => builder.with_ansi(false).init(),
            }
            Some(guard)
        }
        _ => {
            // The chaos run provokes failures on purpose: only errors of
            // the stack itself are worth a line among the progress bars.
            let default = match &cli.command {
                Command::Chaos(_) | Command::Triage(_) => "error",
                // Reloads are worth a line.
                Command::Rls(_) => "info",
                _ => "warn",
            };
            tracing_subscriber::fmt()
                .with_env_filter(filter(default))
                .with_writer(std::io::stderr)
                .init();
            None
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let done = match cli.command {
        Command::Demo(args) => runtime.block_on(demo::run(args)),
        Command::Gateway(args) => runtime.block_on(gateway::run(args)),
        Command::CheckConfig(args) => gateway::check(args),
        Command::Queue(args) => runtime.block_on(queue::run(args)),
        Command::Keys(args) => runtime.block_on(keys::run(args)),
        Command::Redis(args) => runtime.block_on(redis_cmd::run(args)),
        Command::Rls(args) => runtime.block_on(rls::run(args)),
        Command::MockProvider(args) => runtime.block_on(mock_provider::run(args)),
        Command::Chaos(args) => runtime.block_on(chaos::run(args)),
        Command::Triage(args) => runtime.block_on(triage::run(args)),
        Command::Config(args) => config_cmd::run(args),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "pressure", &mut out);
            out!("{}", String::from_utf8_lossy(&out)).map_err(anyhow::Error::from)
        }
    };
    done.map(|()| ExitCode::SUCCESS)
}
