//! Connections: a few multiplexed connections to one Redis, or a cluster
//! connection, shared round robin by every caller ([`Pool`]), and the
//! plain [`connect`] other parts of pressure use.
//!
//! The pool never waits for Redis: a slot holds a live connection or
//! nothing. A call on an empty pool fails at once (the failure mode
//! applies); a connection that breaks is dropped from its slot; the backend's
//! background task fills empty slots again. So a Redis that is down at start,
//! or goes down later, costs no caller a connect timeout, and reconnecting
//! needs no traffic.

use crate::config::RedisConfig;
use parking_lot::RwLock;
use pressure_core::BackendError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Value};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// One multiplexed, auto-reconnecting connection to a Redis or a Redis
/// Cluster, as configured; cheap to clone. Other parts of pressure that keep
/// data in the same Redis (the LLM manual queue) use it too.
#[derive(Clone)]
pub enum Conn {
    /// A single Redis, reconnecting by itself ([`connect`]).
    Single(ConnectionManager),
    /// A single Redis, one connection (the backend's pool replaces it when
    /// it breaks).
    Multiplexed(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Multiplexed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Multiplexed(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Multiplexed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Opens one connection to the Redis (or cluster) of `config`, bounded by
/// its connect timeout; each command then runs with `response_timeout`.
/// Fails at once with the address and the real cause ("connection
/// refused", "timed out after 500 ms", ...) when the first connection cannot
/// be made.
pub async fn connect(config: &RedisConfig, response_timeout: Duration) -> Result<Conn, BackendError> {
    // One plain attempt first, for an error that says what went wrong; the
    // manager below then reconnects by itself for the life of the connection.
    if let Err(cause) = open(config).await {
        return Err(BackendError::Unavailable(format!(
            "{}: {cause}",
            display_address(config)
        )));
    }
    let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
    let unavailable = |e: redis::RedisError| BackendError::Unavailable(e.to_string());
    if config.cluster_nodes.is_empty() {
        let client = crate::client::single(config).map_err(BackendError::Unavailable)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout))
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200))
            .set_number_of_retries(usize::MAX >> 1);
        let cm = tokio::time::timeout(connect_timeout, ConnectionManager::new_with_config(client, cfg))
            .await
            .map_err(|_| BackendError::Timeout(connect_timeout))?
            .map_err(unavailable)?;
        Ok(Conn::Single(cm))
    } else {
        let client = crate::client::cluster_builder(config)
            .map_err(BackendError::Unavailable)?
            .connection_timeout(connect_timeout)
            .response_timeout(response_timeout)
            .build()
            .map_err(unavailable)?;
        let c = tokio::time::timeout(connect_timeout, client.get_async_connection())
            .await
            .map_err(|_| BackendError::Timeout(connect_timeout))?
            .map_err(unavailable)?;
        Ok(Conn::Cluster(c))
    }
}

/// The address of `config` for messages: the URL (or the cluster seeds)
/// with any password replaced by `***`.
pub(crate) fn display_address(config: &RedisConfig) -> String {
    if config.cluster_nodes.is_empty() {
        redact(&config.url)
    } else {
        let nodes: Vec<String> = config.cluster_nodes.iter().map(|n| redact(n)).collect();
        format!("cluster {}", nodes.join(","))
    }
}

/// `redis://user:secret@host` → `redis://user:***@host`.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{}{masked}{}", &url[..scheme_end], &rest[at..])
        }
        None => url.to_owned(),
    }
}

/// The real cause of a connection or call failure, in words an operator
/// acts on: "connection refused", "timed out after 500 ms", "authentication
/// failed: ...".
pub(crate) fn describe(e: &RedisError, timeout: Duration) -> String {
    if e.is_connection_refusal() {
        "connection refused".to_owned()
    } else if e.is_timeout() {
        format!("timed out after {} ms", timeout.as_millis())
    } else if is_auth_failure(e) {
        format!("authentication failed: {e}")
    } else if e.is_connection_dropped() {
        format!("connection lost: {e}")
    } else {
        e.to_string()
    }
}

/// Whether the server refused us for lack of (or wrong) credentials.
pub(crate) fn is_auth_failure(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
}

/// Whether a failed call means its connection is unusable (closed, reset,
/// protocol broken) rather than slow.
pub(crate) fn is_broken(e: &RedisError) -> bool {
    !e.is_timeout() && (e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error())
}

/// Opens one connection of the backend's pool: a plain multiplexed
/// connection (single Redis) or a cluster connection. Fails with the real
/// cause, within the connect timeout.
pub(crate) async fn open(config: &RedisConfig) -> Result<Conn, String> {
    let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
    // Our own per-call timeout governs callers; the connection's response
    // timeout only clears requests whose caller gave up long ago.
    let response_timeout = (config.timeout() * 4).max(Duration::from_secs(1));
    let timed_out = || format!("timed out after {} ms", connect_timeout.as_millis());
    if config.cluster_nodes.is_empty() {
        let client = crate::client::single(config)?;
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout));
        match tokio::time::timeout(
            connect_timeout + Duration::from_millis(50),
            client.get_multiplexed_async_connection_with_config(&cfg),
        )
        .await
        {
            Ok(Ok(c)) => {
                let mut c = Conn::Multiplexed(c);
                // A server that wants a password accepts the connection and
                // refuses the first command: ask it now, for the real cause.
                let ping = redis::cmd("PING");
                match tokio::time::timeout(connect_timeout, ping.query_async::<String>(&mut c)).await {
                    Ok(Ok(_)) => Ok(c),
                    Ok(Err(e)) => Err(describe(&e, connect_timeout)),
                    Err(_) => Err(timed_out()),
                }
            }
            Ok(Err(e)) => Err(describe(&e, connect_timeout)),
            Err(_) => Err(timed_out()),
        }
    } else {
        let client = crate::client::cluster_builder(config)?
            .connection_timeout(connect_timeout)
            .response_timeout(response_timeout)
            .build()
            .map_err(|e| format!("invalid cluster config: {e}"))?;
        match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
            Ok(Ok(c)) => Ok(Conn::Cluster(c)),
            Ok(Err(e)) => Err(describe(&e, connect_timeout)),
            Err(_) => Err(timed_out()),
        }
    }
}

/// The connections of one backend: slots that hold a live connection or
/// nothing, each with a generation so a stale failure never drops its
/// replacement.
pub(crate) struct Pool {
    slots: Box<[Slot]>,
    generation: AtomicU64,
    next: AtomicUsize,
}

/// One slot of the pool: a live connection with its generation, or nothing.
type Slot = RwLock<Option<(u64, Conn)>>;

/// A connection taken from the pool, and where to report it broken.
pub(crate) struct Pooled {
    pub(crate) conn: Conn,
    slot: usize,
    generation: u64,
}

impl Pool {
    /// An empty pool of the configured size (one for a cluster: its
    /// connection is already multiplexed across nodes).
    pub(crate) fn new(config: &RedisConfig) -> Self {
        let n = if config.cluster_nodes.is_empty() {
            config.connections
        } else {
            1
        };
        Self {
            slots: (0..n).map(|_| RwLock::new(None)).collect(),
            generation: AtomicU64::new(0),
            next: AtomicUsize::new(0),
        }
    }

    /// A live connection, round robin; `None` when none is connected.
    pub(crate) fn get(&self) -> Option<Pooled> {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).find_map(|i| {
            let slot = (start + i) % n;
            self.slots[slot].read().as_ref().map(|(generation, conn)| Pooled {
                conn: conn.clone(),
                slot,
                generation: *generation,
            })
        })
    }

    /// Drops `pooled`'s connection from its slot (if still there).
    pub(crate) fn discard(&self, pooled: &Pooled) {
        let mut s = self.slots[pooled.slot].write();
        if s.as_ref().is_some_and(|(g, _)| *g == pooled.generation) {
            *s = None;
        }
    }

    /// Slots without a connection.
    pub(crate) fn empty_slots(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].read().is_none())
            .collect()
    }

    /// Whether at least one connection is live.
    pub(crate) fn is_connected(&self) -> bool {
        self.slots.iter().any(|s| s.read().is_some())
    }

    /// Puts a new connection in `slot`.
    pub(crate) fn fill(&self, slot: usize, conn: Conn) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *self.slots[slot].write() = Some((generation, conn));
    }
}
