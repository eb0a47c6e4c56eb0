//! The `pressure` command. Subcommands are added by the crates that own them
//! (gateway, mock provider, chaos); for now `demo` exercises the broker.

mod demo;

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
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match cli.command {
        Command::Demo(args) => runtime.block_on(demo::run(args)),
    }
}
