//! [`SharedHash`]: a small hash of configuration in Redis that a fleet
//! writes and watches (the gateway's live per-tenant limit overrides), so
//! that every instance on the same Redis agrees on it without polling.
//!
//! * **Keys**: the hash `<prefix>:{config}:<name>` and its version counter
//!   `<prefix>:{config}:<name>:v`, one hash tag so Redis Cluster runs the
//!   script on one slot. No resource can own the tag `{config}` (escaped
//!   resource ids always start with `r`, [`crate::keys::escape`]). The keys
//!   are **persistent on purpose** — they are configuration, written by an
//!   operator, a handful of entries — and [`gc`](crate::gc) leaves every
//!   `{config}` key alone.
//! * **Writes** (`lua/shared_hash.lua`): one atomic script bumps the version,
//!   writes the field (a [`SharedHash::replace`] only an existing one) and publishes `"<version> s|d <len>:<field>[<value>]"`
//!   on `<prefix>:{config}:<name>:changed`, so the announcements come in the
//!   order of the writes and carry the value (no read back).
//! * **Watching** ([`SharedHash::watch`]): subscribe first, then read the
//!   whole hash with its version ([`SharedHashEvent::Snapshot`]), then hand
//!   every announcement on ([`SharedHashEvent::Set`],
//!   [`SharedHashEvent::Removed`]). Nothing is missed between the two steps;
//!   an announcement older than the snapshot can arrive after it, and its
//!   version says so. The subscription is pinged every 2 s (`PING_EVERY`); a
//!   connection that drops or does not answer within 1 s (`PING_TIMEOUT`) is
//!   replaced (backoff 100 ms doubling to 2 s) and the hash read whole again.
//!   **Bound**: on a live subscription a change reaches every watcher one
//!   pub/sub delivery after the write (milliseconds); after a lost
//!   connection, within 3 s (`PING_EVERY + PING_TIMEOUT`) plus the
//!   reconnect (≤ 2 s backoff) once Redis answers again.
//! * **Cluster**: pub/sub messages reach every node, so the watcher
//!   subscribes on one seed (the next one after each failure).
//! * **Cancellation**: a write is one script; if its caller goes away after
//!   sending it, it runs whole or not at all, and watchers learn of it from
//!   the channel either way.

use crate::conn::{self, Conn};
use crate::RedisConfig;
use futures::StreamExt;
use pressure_core::BackendError;
use redis::{Script, Value};
use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

/// How often a watcher pings its subscription.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(2);

/// How long a ping may take before the subscription is replaced.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(1);

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The hash tag of every shared configuration key.
const CONFIG_TAG: &str = "{config}";

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/shared_hash.lua")));

/// Whether `key` (as `SCAN` returns it) is shared configuration under
/// `prefix`, which must persist (`gc` leaves it alone).
pub(crate) fn is_config_key(prefix: &str, key: &[u8]) -> bool {
    key.strip_prefix(prefix.as_bytes())
        .and_then(|k| k.strip_prefix(b":"))
        .is_some_and(|k| k.starts_with(CONFIG_TAG.as_bytes()))
}

/// What a watcher learns, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedHashEvent {
    /// The whole hash as of `version` (after each (re)subscription):
    /// fields absent here are gone.
    Snapshot {
        /// The version the entries show.
        version: u64,
        /// Every field and its value.
        entries: BTreeMap<String, String>,
    },
    /// `field` was set to `value` by the write of `version`.
    Set {
        /// The write's version.
        version: u64,
        /// The field.
        field: String,
        /// Its new value.
        value: String,
    },
    /// `field` was removed by the write of `version`.
    Removed {
        /// The write's version.
        version: u64,
        /// The field.
        field: String,
    },
}

/// One shared hash of configuration (module docs). Cheap to share behind an
/// `Arc`; its command connection is opened on first use, so Redis down at
/// start is not fatal.
pub struct SharedHash {
    config: RedisConfig,
    key: String,
    version_key: String,
    channel: String,
    timeout: Duration,
    conn: tokio::sync::OnceCell<Conn>,
}

impl std::fmt::Debug for SharedHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedHash")
            .field("key", &self.key)
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl SharedHash {
    /// The hash `name` under the key prefix of `config`.
    pub fn new(config: &RedisConfig, name: &str) -> Self {
        let key = format!("{}:{CONFIG_TAG}:{name}", config.key_prefix);
        Self {
            config: config.clone(),
            version_key: format!("{key}:v"),
            channel: format!("{key}:changed"),
            key,
            // Rare operator calls: a slow Redis should not fail them.
            timeout: (config.timeout() * 4).max(Duration::from_secs(1)),
            conn: tokio::sync::OnceCell::new(),
        }
    }

    /// The hash's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The channel its writes are announced on.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Sets `field` to `value` for the whole fleet; the write's version.
    pub async fn set(&self, field: &str, value: &str) -> Result<u64, BackendError> {
        self.call::<u64>(&["set", &self.channel, field, value]).await
    }

    /// Sets `field` to `value` for the whole fleet only if it is there:
    /// the write's version, or `None` (nothing written) when the field is
    /// absent — so that an update racing a removal never brings the field
    /// back.
    pub async fn replace(&self, field: &str, value: &str) -> Result<Option<u64>, BackendError> {
        let version = self.call::<u64>(&["upd", &self.channel, field, value]).await?;
        Ok((version > 0).then_some(version))
    }

    /// Removes `field` for the whole fleet (also when absent); the write's
    /// version.
    pub async fn remove(&self, field: &str) -> Result<u64, BackendError> {
        self.call::<u64>(&["del", &self.channel, field]).await
    }

    /// The whole hash and the version it shows.
    pub async fn snapshot(&self) -> Result<(u64, BTreeMap<String, String>), BackendError> {
        let reply: Vec<Value> = self.call(&["all"]).await?;
        parse_snapshot(reply).ok_or_else(|| BackendError::Protocol("shared_hash.lua: bad snapshot".into()))
    }

    /// Hands every change of the hash to `on_event`, forever (module docs):
    /// run it in a task of its own and abort the task to stop.
    pub async fn watch(&self, mut on_event: impl FnMut(SharedHashEvent) + Send) {
        let mut backoff = MIN_BACKOFF;
        let mut seed = 0usize;
        // One line per outage, not one per attempt.
        let mut logged = false;
        loop {
            let mut delivered = false;
            let err = self.session(seed, &mut on_event, &mut delivered).await;
            if delivered {
                backoff = MIN_BACKOFF;
                logged = false;
            }
            if !logged {
                logged = true;
                tracing::warn!(
                    key = self.key.as_str(),
                    url = conn::display_address(&self.config).as_str(),
                    error = err.as_str(),
                    "shared configuration watch lost; reconnecting"
                );
            }
            seed = seed.wrapping_add(1);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One subscription: subscribe, snapshot, then the announcements until
    /// the connection fails; the reason.
    async fn session(
        &self,
        seed: usize,
        on_event: &mut (impl FnMut(SharedHashEvent) + Send),
        delivered: &mut bool,
    ) -> String {
        let client = match subscriber_client(&self.config, seed) {
            Ok(c) => c,
            Err(e) => return e,
        };
        let connect = Duration::from_millis(self.config.connect_timeout_ms);
        let pubsub = match tokio::time::timeout(connect, client.get_async_pubsub()).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => return conn::describe(&e, connect),
            Err(_) => return format!("timed out after {} ms", connect.as_millis()),
        };
        let (mut sink, mut stream) = pubsub.split();
        match tokio::time::timeout(self.timeout, sink.subscribe(&self.channel)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return conn::describe(&e, self.timeout),
            Err(_) => return "subscribe timed out".into(),
        }
        match self.snapshot().await {
            Ok((version, entries)) => on_event(SharedHashEvent::Snapshot { version, entries }),
            Err(e) => return e.to_string(),
        }
        *delivered = true;
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    None => return "subscription closed".into(),
                    Some(m) => match parse_message(m.get_payload_bytes()) {
                        Some(event) => on_event(event),
                        None => tracing::warn!(key = self.key.as_str(), "unreadable shared configuration announcement ignored"),
                    },
                },
                _ = ping.tick() => match tokio::time::timeout(PING_TIMEOUT, sink.ping::<Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return conn::describe(&e, PING_TIMEOUT),
                    Err(_) => return format!("no answer to a ping within {} ms", PING_TIMEOUT.as_millis()),
                },
            }
        }
    }

    /// Runs the script with `args` on the command connection.
    async fn call<T: redis::FromRedisValue>(&self, args: &[&str]) -> Result<T, BackendError> {
        let work = async {
            let conn = self
                .conn
                .get_or_try_init(|| conn::connect(&self.config, self.timeout))
                .await?;
            let mut conn = conn.clone();
            let mut invocation = SCRIPT.key(&self.key);
            invocation.key(&self.version_key);
            for a in args {
                invocation.arg(*a);
            }
            invocation
                .invoke_async::<T>(&mut conn)
                .await
                .map_err(|e| BackendError::Unavailable(conn::describe(&e, self.timeout)))
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| BackendError::Timeout(self.timeout))?
    }
}

/// A client for the single Redis of `config`, or for one of its cluster
/// seeds (chosen by `seed`): pub/sub messages reach every cluster node.
fn subscriber_client(config: &RedisConfig, seed: usize) -> Result<redis::Client, String> {
    if config.cluster_nodes.is_empty() {
        return crate::client::single(config);
    }
    let node = &config.cluster_nodes[seed % config.cluster_nodes.len()];
    let single = RedisConfig {
        url: node.clone(),
        cluster_nodes: Vec::new(),
        ..config.clone()
    };
    crate::client::single(&single)
}

/// `{ version, field1, value1, ... }` from `lua/shared_hash.lua`.
fn parse_snapshot(reply: Vec<Value>) -> Option<(u64, BTreeMap<String, String>)> {
    let mut items = reply.into_iter();
    let version: u64 = redis::from_redis_value(items.next()?).ok()?;
    let mut entries = BTreeMap::new();
    while let Some(field) = items.next() {
        let field: String = redis::from_redis_value(field).ok()?;
        let value: String = redis::from_redis_value(items.next()?).ok()?;
        entries.insert(field, value);
    }
    Some((version, entries))
}

/// `"<version> s <len>:<field><value>"` or `"<version> d <len>:<field>"`.
fn parse_message(payload: &[u8]) -> Option<SharedHashEvent> {
    let text = std::str::from_utf8(payload).ok()?;
    let (version, rest) = text.split_once(' ')?;
    let version = version.parse().ok()?;
    let (op, rest) = rest.split_once(' ')?;
    let (len, rest) = rest.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let field = rest.get(..len)?.to_owned();
    let value = rest.get(len..)?;
    match op {
        "s" => Some(SharedHashEvent::Set {
            version,
            field,
            value: value.to_owned(),
        }),
        "d" if value.is_empty() => Some(SharedHashEvent::Removed { version, field }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_parse_whatever_the_field_holds() {
        assert_eq!(
            parse_message(b"7 s 5:a b:c{\"requestsPerMinute\":5}"),
            Some(SharedHashEvent::Set {
                version: 7,
                field: "a b:c".into(),
                value: "{\"requestsPerMinute\":5}".into()
            })
        );
        assert_eq!(
            parse_message("12 s 4:日s{}".as_bytes()),
            Some(SharedHashEvent::Set {
                version: 12,
                field: "日s".into(),
                value: "{}".into()
            })
        );
        assert_eq!(
            parse_message(b"8 d 3:a:b"),
            Some(SharedHashEvent::Removed {
                version: 8,
                field: "a:b".into()
            })
        );
        assert_eq!(parse_message(b"8 d 2:a:b"), None, "a removal carries no value");
        assert_eq!(parse_message(b"x s 1:a"), None);
        assert_eq!(parse_message(b"8 s 9:a"), None, "the length is checked");
        assert_eq!(parse_message(b"8 q 1:a"), None);
    }

    #[test]
    fn only_config_keys_of_the_prefix_are_config() {
        assert!(is_config_key("pressure", b"pressure:{config}:tenant-overrides"));
        assert!(is_config_key("pressure", b"pressure:{config}:tenant-overrides:v"));
        assert!(!is_config_key("pressure", b"pressure:{rgateway:tenant:a}:s"));
        assert!(!is_config_key("pressure", b"other:{config}:x"));
        assert!(!is_config_key("pres", b"pressure:{config}:x"));
        assert_eq!(
            SharedHash::new(&RedisConfig::default(), "tenant-overrides").key(),
            "pressure:{config}:tenant-overrides"
        );
    }
}
