//! `pressure queue list|drain`: the manual queue of a gateway.
//!
//! * `--admin URL`: through a running gateway's admin API
//!   (`/admin/pressure/queue`), on either backend — the only way to reach
//!   the in-memory queue of the memory backend. `--token-env VAR` names the
//!   variable holding the admin token, when one is set.
//! * `--config FILE`: straight from the Redis stream of a gateway whose
//!   `gateway.backend` is `redis` (see `pressure_gateway::manual_queue`),
//!   with or without a gateway running.
//!
//! Each item is printed as one JSON line
//! `{"ticket","use_case","request",...}` (Redis adds `id` and `enqueued_at`).

use anyhow::{bail, Context};
use pressure_gateway::config::BackendConfig;
use pressure_gateway::manual_queue::RedisManualQueue;
use std::io::Write;
use std::path::PathBuf;

/// Options of `pressure queue`.
#[derive(Debug, clap::Args)]
pub(crate) struct QueueArgs {
    #[command(subcommand)]
    action: QueueAction,
}

#[derive(Debug, clap::Subcommand)]
enum QueueAction {
    /// Prints the queued requests still in the stream, oldest first
    /// (including ones drained but not acknowledged).
    List(Common),
    /// Reads requests with the consumer group `drainers` (this consumer's
    /// unacknowledged ones first, then new ones) and prints them; with
    /// `--ack` they are acknowledged and removed from the queue.
    Drain(DrainArgs),
}

/// Where the queue is: a running gateway's admin API, or a config's Redis.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct Source {
    /// The gateway config file (its `gateway.backend` must be `redis`).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The admin listener of a running gateway, e.g. `http://127.0.0.1:8081`
    /// (either backend).
    #[arg(long)]
    admin: Option<String>,
}

/// The options of both actions (all of `list`'s).
#[derive(Debug, clap::Args)]
struct Common {
    #[command(flatten)]
    source: Source,
    /// The environment variable holding the admin token (with `--admin`).
    #[arg(long)]
    token_env: Option<String>,
    /// At most this many items.
    #[arg(long, default_value_t = 100)]
    count: usize,
}

#[derive(Debug, clap::Args)]
struct DrainArgs {
    #[command(flatten)]
    common: Common,
    /// Acknowledge the printed items and remove them from the queue (with
    /// `--admin` drained items are always removed).
    #[arg(long)]
    ack: bool,
    /// The consumer name within the group.
    #[arg(long, default_value = "cli")]
    consumer: String,
}

fn open(path: &std::path::Path) -> anyhow::Result<RedisManualQueue> {
    let cfg = pressure_gateway::config::load(path).with_context(|| format!("{}", path.display()))?;
    match &cfg.backend {
        BackendConfig::Redis(rc) => Ok(RedisManualQueue::new(rc)),
        BackendConfig::Memory => bail!(
            "{}: gateway.backend is memory; the manual queue is durable only with the redis backend",
            path.display()
        ),
    }
}

fn print(items: &[serde_json::Value]) -> anyhow::Result<()> {
    if items.is_empty() {
        // On stderr: stdout stays one JSON line per item, for pipes.
        eprintln!("the manual queue is empty");
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    for i in items {
        writeln!(out, "{i}")?;
    }
    out.flush()?;
    Ok(())
}

pub(crate) async fn run(args: QueueArgs) -> anyhow::Result<()> {
    // `drain`: the consumer and whether to acknowledge; `None` for `list`.
    let (common, drain) = match args.action {
        QueueAction::List(c) => (c, None),
        QueueAction::Drain(d) => (d.common, Some((d.consumer, d.ack))),
    };
    let items = match (&common.source.admin, &common.source.config) {
        (Some(url), _) => {
            let path = if drain.is_some() { "queue/drain" } else { "queue" };
            admin(
                url,
                common.token_env.as_deref(),
                path,
                common.count,
                drain.is_some(),
            )
            .await?
        }
        (None, Some(config)) => {
            let queue = open(config)?;
            json(match &drain {
                None => queue.list(common.count).await?,
                Some((consumer, ack)) => queue.drain(consumer, common.count, *ack).await?,
            })
        }
        (None, None) => bail!("--admin or --config is required"),
    };
    print(&items)
}

fn json(items: Vec<pressure_gateway::manual_queue::QueueItem>) -> Vec<serde_json::Value> {
    items.iter().map(|i| i.to_json()).collect()
}

/// The items of `GET|POST {admin}/admin/pressure/{path}?count=N`.
async fn admin(
    base: &str,
    token_env: Option<&str>,
    path: &str,
    count: usize,
    post: bool,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let url = format!(
        "{}/admin/pressure/{path}?count={count}",
        base.trim_end_matches('/')
    );
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let mut req = if post { client.post(&url) } else { client.get(&url) };
    if let Some(var) = token_env {
        let token =
            std::env::var(var).with_context(|| format!("--token-env {var}: the variable is not set"))?;
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.with_context(|| format!("{url}: no answer"))?;
    let status = resp.status();
    let body: serde_json::Value = resp
        .json()
        .await
        .with_context(|| format!("{url}: the answer is not JSON"))?;
    if !status.is_success() {
        let message = body["error"]["message"].as_str().unwrap_or("no message");
        bail!("{url}: {status}: {message}");
    }
    Ok(body["items"].as_array().cloned().unwrap_or_default())
}
