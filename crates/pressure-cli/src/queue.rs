//! `pressure queue list|drain`: the durable manual queue of a gateway whose
//! `gateway.backend` is `redis` (see `pressure_gateway::manual_queue`).
//! Each item is printed as one JSON line
//! `{"ticket","id","use_case","enqueued_at","request"}`.

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
    List(ListArgs),
    /// Reads requests with the consumer group `drainers` (this consumer's
    /// unacknowledged ones first, then new ones) and prints them; with
    /// `--ack` they are acknowledged and removed from the queue.
    Drain(DrainArgs),
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// The gateway config file (its `gateway.backend` must be `redis`).
    #[arg(long, short)]
    config: PathBuf,
    /// At most this many items.
    #[arg(long, default_value_t = 100)]
    count: usize,
}

#[derive(Debug, clap::Args)]
struct DrainArgs {
    /// The gateway config file (its `gateway.backend` must be `redis`).
    #[arg(long, short)]
    config: PathBuf,
    /// At most this many items.
    #[arg(long, default_value_t = 100)]
    count: usize,
    /// Acknowledge the printed items and remove them from the queue.
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

fn print(items: &[pressure_gateway::manual_queue::QueueItem]) -> anyhow::Result<()> {
    if items.is_empty() {
        // On stderr: stdout stays one JSON line per item, for pipes.
        eprintln!("the manual queue is empty");
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    for i in items {
        writeln!(out, "{}", i.to_json())?;
    }
    out.flush()?;
    Ok(())
}

pub(crate) async fn run(args: QueueArgs) -> anyhow::Result<()> {
    match args.action {
        QueueAction::List(a) => {
            let q = open(&a.config)?;
            print(&q.list(a.count).await?)
        }
        QueueAction::Drain(a) => {
            let q = open(&a.config)?;
            print(&q.drain(&a.consumer, a.count, a.ack).await?)
        }
    }
}
