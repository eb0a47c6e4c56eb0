//! `pressure triage eval`: the accuracy of each degradation level of the
//! triage example on its golden dataset, so the cost of each level is known
//! in accuracy and not only in money. The work is in
//! `pressure_chaos::triage`; this file parses the arguments and prints.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use pressure_chaos::triage::eval::{self, LevelKind, DEFAULT_CONCURRENCY};
use pressure_chaos::triage::{Dataset, EvalOptions};

/// Arguments of `pressure triage`.
#[derive(Debug, clap::Args)]
pub(crate) struct TriageArgs {
    #[command(subcommand)]
    command: TriageCommand,
}

/// The subcommands of `pressure triage`.
#[derive(Debug, clap::Subcommand)]
enum TriageCommand {
    /// Measures every level of the use case's chain on the golden set:
    /// model levels through the client stack (one level at a time, so no
    /// fallback hides a failure), rules levels in process, the manual queue
    /// not at all (a person).
    Eval(EvalArgs),
}

/// Arguments of `pressure triage eval`.
#[derive(Debug, clap::Args)]
struct EvalArgs {
    /// The gateway config whose `gateway.llm` section is measured.
    #[arg(long, default_value = "examples/triage/gateway.json")]
    config: PathBuf,
    /// The golden dataset (JSONL: id, text, label).
    #[arg(long, default_value = "examples/triage/tickets.jsonl")]
    dataset: PathBuf,
    /// The use case whose chain is measured.
    #[arg(long, default_value = "triage")]
    use_case: String,
    /// Start pressure's mock provider in process (127.0.0.1, any free port,
    /// with its lexical classifier, a stand-in for a model) and point every
    /// provider of the config at it; without it the configured providers
    /// answer.
    #[arg(long)]
    mock: bool,
    /// Evaluate only the first N tickets.
    #[arg(long)]
    limit: Option<usize>,
    /// Tickets in flight per model level.
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// Runs the triage subcommand.
pub(crate) async fn run(args: TriageArgs) -> anyhow::Result<()> {
    match args.command {
        TriageCommand::Eval(args) => run_eval(args).await,
    }
}

async fn run_eval(args: EvalArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    let mut config =
        eval::load_llm_config(&args.config).with_context(|| format!("loading {}", args.config.display()))?;
    let mut dataset = Dataset::load(&args.dataset)
        .with_context(|| format!("loading the dataset {}", args.dataset.display()))?;
    if let Some(n) = args.limit {
        anyhow::ensure!(n > 0, "--limit must be at least 1");
        dataset.truncate(n);
    }
    let mock = if args.mock {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let mock = eval::start_mock(addr, &config)
            .await
            .context("starting the mock provider")?;
        eval::point_providers_at(&mut config, &mock.base_url());
        Some(mock)
    } else {
        None
    };
    let llm_source = match &mock {
        Some(m) => eval::mock_source(&config, &m.base_url()),
        None => eval::configured_source(&config),
    };
    let options = EvalOptions {
        use_case: args.use_case,
        concurrency: args.concurrency,
        llm_source,
        dataset_name: args.dataset.display().to_string(),
    };
    let result = eval::evaluate(&config, &dataset, &options).await;
    if let Some(m) = mock {
        m.shutdown().await;
    }
    let report = result?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        crate::out!("{}", report.render())?;
    }
    // A model level none of whose calls got an answer measured nothing: the
    // figures above are not an evaluation of it.
    let dead: Vec<&str> = report
        .levels
        .iter()
        .filter(|l| l.kind == LevelKind::Model && l.measured && l.total > 0 && l.errors == l.total)
        .map(|l| l.name.as_str())
        .collect();
    anyhow::ensure!(
        dead.is_empty(),
        "every call to {} failed (see error_kinds); is the provider reachable?",
        dead.join(", ")
    );
    Ok(())
}
