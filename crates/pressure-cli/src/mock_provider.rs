//! `pressure mock-provider`: the chaos stand's misbehaving provider, OpenAI-
//! compatible (`/v1/chat/completions`) and Anthropic-compatible (`/v1/messages`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use pressure_mock::{parse_behaviour, unknown_scenario, Behaviour, MockConfig, MockProvider};

/// Arguments of `pressure mock-provider`.
#[derive(Debug, clap::Args)]
pub(crate) struct MockProviderArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:9100")]
    listen: SocketAddr,
    /// The behaviour preset at start (normal, slow, rate-limited, 500-storm,
    /// overloaded, stall, hang-share, storm-then-recovery).
    #[arg(long, default_value = "normal")]
    scenario: String,
    /// A JSON behaviour file (phases); replaces `--scenario`.
    #[arg(long, value_name = "FILE")]
    behaviour: Option<PathBuf>,
    /// Seeds the random draws for a repeatable run.
    #[arg(long)]
    seed: Option<u64>,
    /// What the answers say: `filler` text, or `triage`, the lexical
    /// stand-in classifier of the triage example (answers a ticket's label).
    #[arg(long, default_value = "filler", value_parser = ["filler", "triage"])]
    responder: String,
}

/// Runs the mock provider until interrupted (Ctrl-C).
pub(crate) async fn run(args: MockProviderArgs) -> anyhow::Result<()> {
    let (behaviour, name) = match &args.behaviour {
        Some(path) => {
            let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let b = parse_behaviour(&raw)
                .map_err(|e| anyhow::anyhow!("invalid behaviour in {}: {e}", path.display()))?;
            (b, path.display().to_string())
        }
        None => {
            let b = Behaviour::preset(&args.scenario)
                .ok_or_else(|| anyhow::anyhow!(unknown_scenario(&args.scenario)))?;
            (b, args.scenario.clone())
        }
    };
    let mut config = MockConfig {
        behaviour,
        seed: args.seed,
        ..MockConfig::default()
    };
    if args.responder == "triage" {
        config.responder = std::sync::Arc::new(pressure_triage::LexicalClassifier);
    }
    let mock = MockProvider::start(args.listen, config).await?;
    crate::outln!("mock provider listening on {} (scenario {name})", mock.base_url())?;
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    mock.shutdown().await;
    Ok(())
}
