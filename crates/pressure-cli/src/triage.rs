//! `pressure triage eval`: the accuracy of each degradation level of the
//! triage example on its golden dataset, so the cost of each level is known
//! in accuracy and not only in money. The work is in
//! `pressure_triage`; this file parses the arguments and prints.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use pressure_triage::endpoint::{self, Endpoint, ModelPrice};
use pressure_triage::eval::{self, LevelKind, DEFAULT_CONCURRENCY};
use pressure_triage::prompt::SchemaFormat;
use pressure_triage::{Dataset, EvalOptions};

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
    #[arg(long, conflicts_with = "provider")]
    mock: bool,
    /// Measure an OpenAI-compatible endpoint instead of the config's models:
    /// its API root (e.g. `http://127.0.0.1:8000/v1`). The use case's model
    /// levels are replaced by the `--model` names on it; its rules and
    /// manual queue, retry policy and the config's breaker stay, so the
    /// calls go through the same client stack as in the gateway.
    #[arg(long, value_name = "URL", requires = "model")]
    provider: Option<String>,
    /// A model name on `--provider`, sent as the request's `model`; repeat
    /// it for one chain level per model, in order.
    #[arg(long, value_name = "NAME", requires = "provider")]
    model: Vec<String>,
    /// The environment variable holding `--provider`'s API key (sent as
    /// `Authorization: Bearer`); without it no key is sent (local servers).
    #[arg(long, value_name = "VAR", requires = "provider")]
    api_key_env: Option<String>,
    /// `--provider`: the wait for an answer's first byte and between its
    /// chunks, in milliseconds (a small model on a CPU is slow).
    #[arg(long, value_name = "MS", default_value_t = endpoint::DEFAULT_TIMEOUT_MS, requires = "provider")]
    timeout_ms: u64,
    /// `--provider`: each model's context window in tokens.
    #[arg(long, value_name = "TOKENS", default_value_t = endpoint::DEFAULT_CONTEXT_TOKENS, requires = "provider")]
    context_tokens: u64,
    /// `--provider`: price of 1M input tokens in micro-USD, for the cost
    /// column (default 0: a local model costs time, not money).
    #[arg(long, value_name = "MICRO_USD", default_value_t = 0, requires = "provider")]
    input_price: u64,
    /// `--provider`: price of 1M output tokens in micro-USD.
    #[arg(long, value_name = "MICRO_USD", default_value_t = 0, requires = "provider")]
    output_price: u64,
    /// Constrain each model answer to one label with a JSON schema (an enum
    /// of the labels) instead of asking for the label in plain text; the
    /// answer `{"label": …}` is parsed. `json-schema` (the default) is
    /// OpenAI's `response_format` (OpenAI, vLLM, llama.cpp's llama-server);
    /// `json-object` sends `{"type": "json_object", "schema": …}`, the form
    /// llama-cpp-python's server takes.
    #[arg(long, value_enum, value_name = "DIALECT", num_args = 0..=1, default_missing_value = "json-schema")]
    structured: Option<Structured>,
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

/// The `response_format` dialect of `--structured`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Structured {
    /// `{"type": "json_schema", "json_schema": {"schema": …}}` (OpenAI).
    JsonSchema,
    /// `{"type": "json_object", "schema": …}` (llama-cpp-python).
    JsonObject,
}

impl From<Structured> for SchemaFormat {
    fn from(s: Structured) -> Self {
        match s {
            Structured::JsonSchema => Self::JsonSchema,
            Structured::JsonObject => Self::JsonObject,
        }
    }
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
    let endpoint = args.provider.map(|base_url| Endpoint {
        api_key_env: args.api_key_env,
        timeout_ms: args.timeout_ms,
        context_tokens: args.context_tokens,
        price: ModelPrice::new(args.input_price, args.output_price),
        ..Endpoint::new(base_url, args.model)
    });
    if let Some(endpoint) = &endpoint {
        endpoint::use_endpoint(&mut config, &args.use_case, endpoint)?;
    }
    let llm_source = match (&mock, &endpoint) {
        (Some(m), _) => eval::mock_source(&config, &m.base_url()),
        (None, Some(e)) => e.source(),
        (None, None) => eval::configured_source(&config),
    };
    let options = EvalOptions {
        use_case: args.use_case,
        concurrency: args.concurrency,
        llm_source,
        dataset_name: args.dataset.display().to_string(),
        structured: args.structured.map(SchemaFormat::from),
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
