//! [`gc`]: a one-off repair that gives every pressure key without an expiry
//! the expiry it was meant to have (`pressure redis gc`).
//!
//! Versions of the scripts before the `e` mark sometimes created a
//! resource's state hash without a TTL (their `PEXPIREAT` ran before the
//! `HSET` that created the key), so Redis kept every tenant it ever saw.
//! The scripts now set an expiry on every write; this repairs the keys
//! written before.
//!
//! * **What happens to a key** (`lua/gc.lua`, one atomic call per key): a
//!   key with a TTL (or gone) is left alone; a key that is not a hash is
//!   skipped (the manual queue's stream persists by design); a hash whose
//!   mark — the later of its fields `e` and `x`, the server time in µs until
//!   which its content matters — is past is deleted; one whose mark is ahead
//!   expires at the mark; one without a mark (the shared breaker hashes)
//!   expires after [`GcOptions::default_ttl`].
//! * **Configuration is not garbage**: keys under `<prefix>:{config}:`
//!   ([`SharedHash`](crate::SharedHash), e.g. the gateway's live tenant
//!   limit overrides) persist on purpose and are skipped before any script
//!   runs ([`GcReport::skipped_config`]).
//! * **Safe on a live Redis**: keys are found with `SCAN` in batches, never
//!   `KEYS`, and each key is looked at and changed in one script call, so a
//!   gateway writing the same key meanwhile loses nothing: whichever runs
//!   second sees the other's result. Running it again is harmless: a fixed
//!   key has a TTL and is left alone.
//! * **Every master of a cluster, once**: the slot ranges of `CLUSTER SLOTS`
//!   are grouped by master node id, and each master is scanned by routing
//!   `SCAN` to the first slot it serves through the cluster connection (so
//!   its addresses, credentials and TLS are the ones already in use). Before
//!   and after a master's scan, `CLUSTER MYID` on that route must answer
//!   that master's id: a failover or resharding during the run ends it with
//!   an error (run it again) instead of scanning a node twice or missing one
//!   silently. A master that serves no slot holds no keys and is not
//!   scanned; replicas follow their masters. Each key's script goes to the
//!   key's own slot, like any keyed command.
//! * **Counts**: `SCAN` may return a key more than once (while the keyspace
//!   is rehashed); such a key is counted each time it is returned.

use crate::config::RedisConfig;
use crate::conn::{self, Conn};
use crate::scripts;
use crate::shared_hash::is_config_key;
use futures::{StreamExt, TryStreamExt};
use pressure_core::BackendError;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, RedisError, Value};
use serde::Serialize;
use std::time::Duration;

/// Script calls in flight at once: the multiplexed connection pipelines
/// them, so a batch costs a few round trips, not one per key.
const IN_FLIGHT: usize = 16;

/// How [`gc`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcOptions {
    /// Report what would be done, change nothing.
    pub dry_run: bool,
    /// Keys asked for per `SCAN` (its `COUNT`; at least 1): bounds the work
    /// of one call on the server.
    pub batch: usize,
    /// TTL given to a hash without a mark (at least 1 ms).
    pub default_ttl: Duration,
    /// Sleep between batches, to spread the load on a busy server.
    pub pause: Duration,
}

impl Default for GcOptions {
    /// Not a dry run, batches of 500, one hour for a hash without a mark,
    /// no pause.
    fn default() -> Self {
        Self {
            dry_run: false,
            batch: 500,
            default_ttl: Duration::from_secs(3600),
            pause: Duration::ZERO,
        }
    }
}

/// What [`gc`] found and did (in a dry run: would have done), in keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// Servers scanned: 1 for a single Redis, the masters of a cluster.
    pub nodes: usize,
    /// Keys under the prefix returned by `SCAN`.
    pub scanned: u64,
    /// Left alone: they had a TTL (or were gone when looked at).
    pub had_ttl: u64,
    /// Given an expiry: their mark, or the default TTL.
    pub expiry_set: u64,
    /// Deleted: their mark was past.
    pub deleted: u64,
    /// Left alone: not a hash (the manual queue's stream, anything else).
    pub skipped_non_hash: u64,
    /// Left alone: shared configuration under `<prefix>:{config}:`, which
    /// persists on purpose (not written when 0, so reports of a Redis
    /// without any read as before).
    #[serde(skip_serializing_if = "is_zero")]
    pub skipped_config: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Gives every key under `config.key_prefix` that has no expiry the one it
/// was meant to have, or deletes it when its content is past (module docs),
/// on the single Redis of `config` or every master of its cluster.
///
/// Each call has `config.timeout()`; the config is taken as it is (call
/// [`RedisConfig::validate`] first).
///
/// # Errors
/// [`BackendError::Unavailable`] with the address and the cause when Redis
/// cannot be reached or a call fails (keys fixed until then stay fixed:
/// run it again), or when the cluster changed during the run;
/// [`BackendError::Protocol`] for an answer this code does not understand.
pub async fn gc(config: &RedisConfig, opts: &GcOptions) -> Result<GcReport, BackendError> {
    let conn = conn::connect(config, config.timeout()).await?;
    let mut run = Run {
        prefix: config.key_prefix.clone(),
        address: conn::display_address(config),
        timeout: config.timeout(),
        pattern: format!("{}:*", glob_escape(&config.key_prefix)),
        dry_run: if opts.dry_run { "1" } else { "0" },
        default_ttl_ms: u64::try_from(opts.default_ttl.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, i64::MAX as u64),
        batch: opts.batch.max(1),
        pause: opts.pause,
        report: GcReport {
            dry_run: opts.dry_run,
            ..GcReport::default()
        },
        conn,
    };
    if matches!(run.conn, Conn::Cluster(_)) {
        let any = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let slots = run.call(Some(any), cluster_slots()).await?;
        for master in masters(slots).map_err(BackendError::Protocol)? {
            run.scan(Some(&master)).await?;
        }
    } else {
        run.scan(None).await?;
    }
    Ok(run.report)
}

/// One run of [`gc`]: its connection, settings and counts so far.
struct Run {
    conn: Conn,
    prefix: String,
    address: String,
    timeout: Duration,
    pattern: String,
    dry_run: &'static str,
    default_ttl_ms: u64,
    batch: usize,
    pause: Duration,
    report: GcReport,
}

/// A master of the cluster: its node id (or `host:port` when the server
/// does not say), its address for messages, and the first slot it serves.
#[derive(Debug)]
struct Master {
    id: String,
    address: String,
    has_id: bool,
    slot: u16,
}

impl Master {
    fn route(&self) -> RoutingInfo {
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
            self.slot,
            SlotAddr::Master,
        )))
    }
}

impl Run {
    /// Scans one server to the end: the single Redis (`None`) or one master
    /// of the cluster, reached through the cluster connection.
    async fn scan(&mut self, master: Option<&Master>) -> Result<(), BackendError> {
        if let Some(m) = master {
            self.check_id(m).await?;
        }
        let mut cursor: u64 = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&self.pattern)
                .arg("COUNT")
                .arg(self.batch);
            let (next, keys): (u64, Vec<Vec<u8>>) = self.call(master.map(Master::route), scan).await?;
            self.fix(&keys).await?;
            cursor = next;
            if cursor == 0 {
                break;
            }
            if !self.pause.is_zero() {
                tokio::time::sleep(self.pause).await;
            }
        }
        if let Some(m) = master {
            self.check_id(m).await?;
        }
        self.report.nodes += 1;
        Ok(())
    }

    /// Runs `lua/gc.lua` on every key of one batch, [`IN_FLIGHT`] at a time,
    /// each routed by its key, and counts the answers.
    async fn fix(&mut self, keys: &[Vec<u8>]) -> Result<(), BackendError> {
        let (config, keys): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) =
            keys.iter().partition(|k| is_config_key(&self.prefix, k));
        self.report.skipped_config += config.len() as u64;
        self.report.scanned += config.len() as u64;
        let codes: Vec<i64> = futures::stream::iter(keys)
            .map(|key| {
                let mut conn = self.conn.clone();
                let mut call = scripts::GC.key(key.as_slice());
                call.arg(self.dry_run).arg(self.default_ttl_ms);
                async move { call.invoke_async::<i64>(&mut conn).await }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect()
            .await
            .map_err(|e| self.failed(&e))?;
        for code in codes {
            let count = match code {
                0 => &mut self.report.had_ttl,
                1 => &mut self.report.expiry_set,
                2 => &mut self.report.deleted,
                3 => &mut self.report.skipped_non_hash,
                other => {
                    return Err(BackendError::Protocol(format!(
                        "{}: gc.lua answered {other}",
                        self.address
                    )))
                }
            };
            *count += 1;
            self.report.scanned += 1;
        }
        Ok(())
    }

    /// Fails unless the node behind `master`'s route is still that master.
    async fn check_id(&self, master: &Master) -> Result<(), BackendError> {
        if !master.has_id {
            return Ok(());
        }
        let mut myid = redis::cmd("CLUSTER");
        myid.arg("MYID");
        let id: String = self.call(Some(master.route()), myid).await?;
        if id == master.id {
            return Ok(());
        }
        Err(BackendError::Unavailable(format!(
            "{}: the cluster changed during gc: slot {} is served by node {id}, not {} ({}); \
             run gc again{}",
            self.address,
            master.slot,
            master.id,
            master.address,
            self.progress(),
        )))
    }

    /// One command: on a cluster sent where `route` says (without one,
    /// where its key routes); a single Redis takes everything.
    async fn call<T: FromRedisValue>(&self, route: Option<RoutingInfo>, cmd: Cmd) -> Result<T, BackendError> {
        let mut conn = self.conn.clone();
        let value = match (&mut conn, route) {
            (Conn::Cluster(c), Some(route)) => c.route_command(cmd, route).await,
            (conn, _) => cmd.query_async::<Value>(conn).await,
        }
        .map_err(|e| self.failed(&e))?;
        redis::from_redis_value(value).map_err(|e| BackendError::Protocol(format!("{}: {e}", self.address)))
    }

    /// `e` as an error with the address, the cause and the progress so far.
    fn failed(&self, e: &RedisError) -> BackendError {
        BackendError::Unavailable(format!(
            "{}: {}{}",
            self.address,
            conn::describe(e, self.timeout),
            self.progress()
        ))
    }

    fn progress(&self) -> String {
        match self.report.scanned {
            0 => String::new(),
            n => format!(" (after {n} keys; those stay as gc left them)"),
        }
    }
}

fn cluster_slots() -> Cmd {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    cmd
}

/// The masters in a `CLUSTER SLOTS` reply, one per node id (or address),
/// each with the first slot it serves, in slot order.
fn masters(reply: Value) -> Result<Vec<Master>, String> {
    let bad = |what: &str| format!("CLUSTER SLOTS: {what}");
    let Value::Array(ranges) = reply else {
        return Err(bad("not an array"));
    };
    let mut out: Vec<Master> = Vec::new();
    for range in ranges {
        let Value::Array(items) = range else {
            return Err(bad("a range is not an array"));
        };
        let (Some(Value::Int(start)), Some(Value::Array(node))) = (items.first(), items.get(2)) else {
            return Err(bad("a range without start slot and master"));
        };
        let slot = u16::try_from(*start).map_err(|_| bad("slot out of range"))?;
        let text = crate::slot_map::text;
        let host = text(node.first()).ok_or_else(|| bad("a master without host"))?;
        let port = text(node.get(1)).ok_or_else(|| bad("a master without port"))?;
        let address = format!("{host}:{port}");
        let id = text(node.get(2));
        let has_id = id.is_some();
        let id = id.unwrap_or_else(|| address.clone());
        match out.iter_mut().find(|m| m.id == id) {
            Some(m) => m.slot = m.slot.min(slot),
            None => out.push(Master {
                id,
                address,
                has_id,
                slot,
            }),
        }
    }
    out.sort_by_key(|m| m.slot);
    Ok(out)
}

/// `prefix` with the glob characters of `SCAN MATCH` (`* ? [ ] \`)
/// escaped, so it matches itself only.
fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 4);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_matches_only_itself() {
        assert_eq!(glob_escape("pressure"), "pressure");
        assert_eq!(glob_escape(r"a*b?c[d]e\f"), r"a\*b\?c\[d\]e\\f");
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn range(start: i64, end: i64, host: &str, port: i64, id: Option<&str>) -> Value {
        let mut node = vec![bulk(host), Value::Int(port)];
        node.extend(id.map(bulk));
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(node),
            // A replica: never scanned.
            Value::Array(vec![bulk(host), Value::Int(port + 1000), bulk("replica")]),
        ])
    }

    #[test]
    fn one_master_per_node_id_with_its_first_slot() {
        let reply = Value::Array(vec![
            range(10923, 16383, "10.0.0.3", 6379, Some("c")),
            range(5461, 10922, "10.0.0.2", 6379, Some("b")),
            range(100, 5460, "10.0.0.1", 6379, Some("a")),
            // Node a serves a second range before its first.
            range(0, 99, "10.0.0.1", 6379, Some("a")),
        ]);
        let got = masters(reply).expect("parses");
        let ids: Vec<(&str, u16, bool)> = got.iter().map(|m| (m.id.as_str(), m.slot, m.has_id)).collect();
        assert_eq!(ids, [("a", 0, true), ("b", 5461, true), ("c", 10923, true)]);
        assert_eq!(got[0].address, "10.0.0.1:6379");
    }

    #[test]
    fn without_node_ids_the_address_names_the_master() {
        let reply = Value::Array(vec![
            range(0, 8191, "h", 1, None),
            range(8192, 16383, "h", 2, None),
        ]);
        let got = masters(reply).expect("parses");
        assert_eq!(got.len(), 2);
        assert_eq!((got[1].id.as_str(), got[1].has_id), ("h:2", false));
        assert!(masters(Value::Int(1)).is_err());
    }
}
