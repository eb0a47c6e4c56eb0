//! Connections: a few multiplexed, auto-reconnecting connections to one
//! Redis, or a cluster connection, shared round robin by every caller.

use crate::config::RedisConfig;
use pressure_core::BackendError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One multiplexed, auto-reconnecting connection to a Redis or a Redis
/// Cluster, as configured; cheap to clone. Other parts of pressure that keep
/// data in the same Redis (the LLM manual queue) use it too.
#[derive(Clone)]
pub enum Conn {
    /// A single Redis.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
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
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The connections of one backend.
#[derive(Clone)]
pub(crate) struct Pool {
    conns: Arc<Vec<Conn>>,
    next: Arc<AtomicUsize>,
}

/// Opens one connection to the Redis (or cluster) of `config`, bounded by
/// its connect timeout; each command then runs with `response_timeout`.
pub async fn connect(config: &RedisConfig, response_timeout: Duration) -> Result<Conn, BackendError> {
    let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
    let unavailable = |e: redis::RedisError| BackendError::Unavailable(e.to_string());
    if config.cluster_nodes.is_empty() {
        let client = redis::Client::open(config.url.as_str()).map_err(unavailable)?;
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
        let client = redis::cluster::ClusterClientBuilder::new(config.cluster_nodes.clone())
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

impl Pool {
    pub(crate) async fn connect(config: &RedisConfig) -> Result<Self, BackendError> {
        // A cluster connection is already multiplexed across nodes: one.
        let n = if config.cluster_nodes.is_empty() {
            config.connections
        } else {
            1
        };
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            conns.push(connect(config, config.timeout() * 4).await?);
        }
        Ok(Self {
            conns: Arc::new(conns),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// A connection, round robin.
    pub(crate) fn get(&self) -> Conn {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }
}
