//! The `pressure` command. Subcommands are added by the crates that own them
//! (gateway, mock provider, chaos, triage); `demo` exercises the broker alone.

mod chaos;
mod demo;
mod gateway;
mod mock_provider;
mod queue;
mod triage;

use clap::{Parser, Subcommand};

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
    /// Lists or drains the durable manual queue (a Redis stream) of a
    /// gateway on the redis backend; one JSON line per queued request.
    Queue(queue::QueueArgs),
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
}

fn main() -> anyhow::Result<()> {
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
                gateway::LogFormat::Json => builder.json().init(),
                gateway::LogFormat::Text => builder.with_ansi(false).init(),
            }
            Some(guard)
        }
        _ => {
            // The chaos run provokes failures on purpose: only errors of
            // the stack itself are worth a line among the progress bars.
            let default = match &cli.command {
                Command::Chaos(_) | Command::Triage(_) => "error",
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
    match cli.command {
        Command::Demo(args) => runtime.block_on(demo::run(args)),
        Command::Gateway(args) => runtime.block_on(gateway::run(args)),
        Command::CheckConfig(args) => gateway::check(args),
        Command::Queue(args) => runtime.block_on(queue::run(args)),
        Command::MockProvider(args) => runtime.block_on(mock_provider::run(args)),
        Command::Chaos(args) => runtime.block_on(chaos::run(args)),
        Command::Triage(args) => runtime.block_on(triage::run(args)),
    }
}
