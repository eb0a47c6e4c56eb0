//! Configuration of the Redis backend (JSON names in camelCase, as under the
//! gateway's `backend` key).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What an acquisition does when Redis is unreachable or too slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailureMode {
    /// Deny (fail closed): protects downstream at the cost of availability.
    #[default]
    Closed,
    /// Allow (fail open): availability first, no limit while Redis is out.
    Open,
    /// Count in this process with `localShare` of each limit.
    Local,
}

/// Settings of a [`crate::RedisBackend`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `redis://host:port/db` of a single Redis (ignored when
    /// `clusterNodes` is set).
    pub url: String,
    /// Seed nodes of a Redis Cluster; when non-empty, cluster mode is used.
    pub cluster_nodes: Vec<String>,
    /// Prefix of every key.
    pub key_prefix: String,
    /// Timeout of every Redis call, in milliseconds.
    pub timeout_ms: u64,
    /// Timeout of a connection attempt, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Behaviour while Redis is unavailable.
    pub failure_mode: FailureMode,
    /// `local` mode: share of each limit this process may use on its own
    /// (e.g. 1 / number of instances).
    pub local_share: f64,
    /// Multiplexed connections shared by all callers (round robin).
    pub connections: usize,
    /// Refuse locally what the store already denied until a known time.
    pub deny_cache: bool,
    /// TLS for `rediss://` URLs (a private CA); absent: the public roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::RedisTlsConfig>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            cluster_nodes: Vec::new(),
            key_prefix: "pressure".into(),
            timeout_ms: 50,
            connect_timeout_ms: 500,
            failure_mode: FailureMode::Closed,
            local_share: 0.25,
            connections: 2,
            deny_cache: true,
            tls: None,
        }
    }
}

impl RedisConfig {
    /// The default settings for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Checks the values; the error names the JSON field.
    pub fn validate(&self) -> Result<(), pressure_core::FieldError> {
        if self.timeout_ms == 0 || self.timeout_ms > 10_000 {
            return Err(pressure_core::FieldError::new(
                "timeoutMs",
                "must be between 1 and 10000",
            ));
        }
        if self.connect_timeout_ms == 0 {
            return Err(pressure_core::FieldError::new("connectTimeoutMs", "must be > 0"));
        }
        if !(self.local_share > 0.0 && self.local_share <= 1.0) {
            return Err(pressure_core::FieldError::new(
                "localShare",
                "must be > 0 and at most 1",
            ));
        }
        if self.connections == 0 || self.connections > 64 {
            return Err(pressure_core::FieldError::new(
                "connections",
                "must be between 1 and 64",
            ));
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(pressure_core::FieldError::new(
                "keyPrefix",
                "must be non-empty and contain no braces",
            ));
        }
        crate::tls::check(self)
    }
}
