//! `pressure redis gc`: maintenance of the Redis that holds a fleet's
//! state, straight against Redis (no gateway needed).
//!
//! `gc` gives the keys that versions before the `e` mark left without an
//! expiry the one they were meant to have (`pressure_redis::gc`, the
//! runbook's "Redis keys without an expiry") and prints one JSON line with
//! the counts, `{"dry_run","nodes","scanned","had_ttl","expiry_set",
//! "deleted","skipped_non_hash"}`.

use anyhow::Context;
use pressure_redis::{GcOptions, RedisConfig};
use std::time::Duration;

/// Options of `pressure redis`.
#[derive(Debug, clap::Args)]
pub(crate) struct RedisArgs {
    #[command(subcommand)]
    action: RedisAction,
}

#[derive(Debug, clap::Subcommand)]
enum RedisAction {
    /// Gives keys left without a TTL the expiry they were meant to have.
    ///
    /// A hash under the prefix without a TTL expires at its mark (after
    /// `--default-ttl-ms` when it has none), or is deleted when the mark is
    /// past; streams (the manual queue), other types and keys with a TTL are
    /// left alone. Safe on a live Redis or cluster: SCAN in batches, one
    /// atomic script per key. Run it with `--dry-run` first.
    Gc(GcArgs),
}

/// Where Redis is: one server, or the seeds of a cluster.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct Target {
    /// `redis://host:port/db` (or `rediss://`) of a single Redis.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// A seed node of a Redis Cluster (repeat for more); every master is
    /// scanned, whichever seeds are given.
    #[arg(long = "cluster-node", value_name = "URL")]
    cluster_nodes: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct GcArgs {
    #[command(flatten)]
    target: Target,
    /// The gateway's `backend.keyPrefix`.
    #[arg(long, default_value = "pressure")]
    prefix: String,
    /// Count what would be done, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Keys asked for per SCAN call (its COUNT).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// TTL for a hash without a mark (a shared breaker's), in ms.
    #[arg(long, default_value_t = 3_600_000, value_parser = clap::value_parser!(u64).range(1..))]
    default_ttl_ms: u64,
    /// Sleep between batches, in ms, to spread the load on a busy server.
    #[arg(long, default_value_t = 0)]
    pause_ms: u64,
}

/// Each Redis call may take this long: a SCAN batch on a loaded server is
/// slower than the gateway's 50 ms budget, and nobody waits on this one.
const CALL_TIMEOUT_MS: u64 = 5_000;
/// A connection attempt may take this long (a cluster's is several round
/// trips).
const CONNECT_TIMEOUT_MS: u64 = 2_000;

pub(crate) async fn run(args: RedisArgs) -> anyhow::Result<()> {
    match args.action {
        RedisAction::Gc(a) => gc(a).await,
    }
}

async fn gc(args: GcArgs) -> anyhow::Result<()> {
    let config = RedisConfig {
        url: args.target.redis.unwrap_or_default(),
        cluster_nodes: args.target.cluster_nodes,
        key_prefix: args.prefix,
        timeout_ms: CALL_TIMEOUT_MS,
        connect_timeout_ms: CONNECT_TIMEOUT_MS,
        ..RedisConfig::default()
    };
    if let Err(e) = config.validate() {
        // Named by the flag that set the field.
        let flag = match e.path.as_str() {
            "keyPrefix" => "--prefix",
            "url" => "--redis",
            p if p.starts_with("clusterNodes") => "--cluster-node",
            p => p,
        };
        eprintln!("error: {flag}: {}", e.problem);
        std::process::exit(crate::exit::INVALID.into());
    }
    let opts = GcOptions {
        dry_run: args.dry_run,
        batch: args.batch as usize,
        default_ttl: Duration::from_millis(args.default_ttl_ms),
        pause: Duration::from_millis(args.pause_ms),
    };
    let report = pressure_redis::gc(&config, &opts).await.context("redis gc")?;
    crate::outln!("{}", serde_json::to_string(&report)?)?;
    Ok(())
}
