//! The durable manual queue (docs/architecture.md#the-llm-stack, the last level of a fallback chain):
//! a Redis stream, used by the gateway instead of the in-process queue when
//! `gateway.backend` is `redis`, and listed/drained by `pressure queue`.
//!
//! * One stream per gateway fleet: `<keyPrefix>:{manual-queue}:requests`
//!   (the hash tag keeps it on one cluster slot).
//! * [`ManualQueue::push`] is `XADD key MAXLEN ~ 100000 * use_case <name>
//!   request <ChatRequest JSON>`; the ticket is `mq-<entry id>` (e.g.
//!   `mq-1764460000000-0`). The entry id carries the Redis server's time,
//!   read back as [`QueueItem::enqueued_at`]. The stream is capped at about [`MAX_LEN`]
//!   entries: the oldest are trimmed first when a flood outgrows it.
//! * [`RedisManualQueue::list`] (`XRANGE`) shows the entries still in the
//!   stream, oldest first — new ones and ones drained without
//!   acknowledgement alike.
//! * [`RedisManualQueue::drain`] reads with the consumer group
//!   [`GROUP`] (created idempotently with `MKSTREAM`): first the entries
//!   already delivered to this consumer and not acknowledged, then new
//!   ones (`XREADGROUP ... >`). With `ack`, the returned entries are
//!   acknowledged (`XACK`) **and removed** from the stream (`XDEL`), so
//!   they leave `list`; without it they stay pending for this consumer and
//!   the next drain by the same consumer returns them again.
//! * Every Redis call is bounded by a timeout; a failure is a
//!   [`ManualQueueError`] (the chain then answers an error, not a ticket).
//!   The connection is opened on first use and reconnects by itself.

use pressure_llm::pipeline::{ManualQueue, ManualQueueError};
use pressure_llm::provider::ChatRequest;
use pressure_redis::{RedisConfig, RedisConnection as Conn};
use redis::aio::ConnectionLike;
use redis::{Cmd, Value};
use serde_json::{json, Value as Json};
use std::fmt;
use std::time::Duration;
use tokio::sync::OnceCell;

/// The approximate cap of the stream (`XADD ... MAXLEN ~`).
pub const MAX_LEN: u64 = 100_000;

/// The consumer group of `drain`.
pub const GROUP: &str = "drainers";

/// The least timeout of one queue call.
const MIN_TIMEOUT: Duration = Duration::from_millis(1000);

/// The stream of the queue under `key_prefix`.
pub fn stream_key(key_prefix: &str) -> String {
    format!("{key_prefix}:{{manual-queue}}:requests")
}

/// One queued request, as read back from the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueItem {
    /// `mq-<entry id>`, the ticket answered to the caller.
    pub ticket: String,
    /// The stream entry id.
    pub id: String,
    /// The use case it came from.
    pub use_case: String,
    /// The request as received (JSON of the `ChatRequest`).
    pub request: Json,
    /// When it was queued, unix milliseconds of the Redis server (the
    /// time part of the entry id).
    pub enqueued_at: u64,
}

impl QueueItem {
    /// `{"ticket","id","use_case","enqueued_at","request"}`.
    pub fn to_json(&self) -> Json {
        json!({
            "ticket": self.ticket,
            "id": self.id,
            "use_case": self.use_case,
            "enqueued_at": self.enqueued_at,
            "request": self.request,
        })
    }
}

/// The manual queue on a Redis stream.
pub struct RedisManualQueue {
    config: RedisConfig,
    key: String,
    timeout: Duration,
    conn: OnceCell<Conn>,
}

impl fmt::Debug for RedisManualQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisManualQueue")
            .field("key", &self.key)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn err(e: impl fmt::Display) -> ManualQueueError {
    ManualQueueError(e.to_string())
}

impl RedisManualQueue {
    /// The queue on the Redis of `config` (its `url` or `clusterNodes`, its
    /// `keyPrefix`); each call is bounded by `max(timeoutMs, 1 s)`. Does not
    /// connect yet.
    pub fn new(config: &RedisConfig) -> Self {
        Self {
            key: stream_key(&config.key_prefix),
            timeout: Duration::from_millis(config.timeout_ms).max(MIN_TIMEOUT),
            config: config.clone(),
            conn: OnceCell::new(),
        }
    }

    /// The stream key.
    pub fn key(&self) -> &str {
        &self.key
    }

    async fn connect(&self) -> Result<Conn, ManualQueueError> {
        let mut cfg = self.config.clone();
        cfg.connect_timeout_ms = cfg.connect_timeout_ms.max(MIN_TIMEOUT.as_millis() as u64);
        pressure_redis::connect(&cfg, self.timeout).await.map_err(err)
    }

    /// Runs `cmd` with the call timeout.
    async fn query(&self, cmd: &Cmd) -> Result<Value, ManualQueueError> {
        let mut conn = self.conn.get_or_try_init(|| self.connect()).await?.clone();
        tokio::time::timeout(self.timeout, conn.req_packed_command(cmd))
            .await
            .map_err(|_| err(format!("Redis call timed out after {:?}", self.timeout)))?
            .map_err(err)
    }

    /// Queues `req` of `use_case`; returns the ticket `mq-<entry id>`.
    pub async fn enqueue(&self, use_case: &str, req: &ChatRequest) -> Result<String, ManualQueueError> {
        let body = serde_json::to_string(req).map_err(err)?;
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&self.key)
            .arg("MAXLEN")
            .arg("~")
            .arg(MAX_LEN)
            .arg("*")
            .arg("use_case")
            .arg(use_case)
            .arg("request")
            .arg(body);
        let id = string(&self.query(&cmd).await?).ok_or_else(|| err("XADD answered no id"))?;
        Ok(format!("mq-{id}"))
    }

    /// The first `count` entries in the stream, oldest first (`XRANGE`).
    pub async fn list(&self, count: usize) -> Result<Vec<QueueItem>, ManualQueueError> {
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(&self.key)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(count.max(1));
        entries(&self.query(&cmd).await?)
    }

    /// Entries in the stream now (`XLEN`).
    pub async fn len(&self) -> Result<u64, ManualQueueError> {
        let v = self.query(redis::cmd("XLEN").arg(&self.key)).await?;
        match v {
            Value::Int(n) => Ok(n.max(0) as u64),
            other => Err(err(format!("XLEN answered {other:?}"))),
        }
    }

    /// Whether the stream holds no entry.
    pub async fn is_empty(&self) -> Result<bool, ManualQueueError> {
        Ok(self.len().await? == 0)
    }

    /// Creates the consumer group (and the stream) when missing.
    async fn ensure_group(&self) -> Result<(), ManualQueueError> {
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("CREATE")
            .arg(&self.key)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM");
        match self.query(&cmd).await {
            Ok(_) => Ok(()),
            Err(e) if e.0.contains("BUSYGROUP") => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn read_group(
        &self,
        consumer: &str,
        count: usize,
        from: &str,
    ) -> Result<Vec<QueueItem>, ManualQueueError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(consumer)
            .arg("COUNT")
            .arg(count)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(from);
        let v = self.query(&cmd).await?;
        // [[key, [entries]]] (RESP2) or {key: [entries]} (RESP3); nil when none.
        let streams: Vec<Value> = match v {
            Value::Nil => return Ok(Vec::new()),
            Value::Array(a) => a
                .into_iter()
                .filter_map(|s| match s {
                    Value::Array(mut kv) if kv.len() == 2 => kv.pop(),
                    _ => None,
                })
                .collect(),
            Value::Map(m) => m.into_iter().map(|(_, v)| v).collect(),
            other => return Err(err(format!("XREADGROUP answered {other:?}"))),
        };
        let mut out = Vec::new();
        for s in &streams {
            out.extend(entries(s)?);
        }
        Ok(out)
    }

    /// Up to `count` entries for `consumer` of the group [`GROUP`]: its
    /// pending (delivered, unacknowledged) entries first, then new ones.
    /// With `ack`, they are acknowledged and deleted from the stream.
    pub async fn drain(
        &self,
        consumer: &str,
        count: usize,
        ack: bool,
    ) -> Result<Vec<QueueItem>, ManualQueueError> {
        let count = count.max(1);
        self.ensure_group().await?;
        // A pending entry deleted by a trim comes back without fields: skipped.
        let mut items = self.read_group(consumer, count, "0").await?;
        if items.len() < count {
            let more = self.read_group(consumer, count - items.len(), ">").await?;
            items.extend(more);
        }
        if ack && !items.is_empty() {
            let mut xack = redis::cmd("XACK");
            xack.arg(&self.key).arg(GROUP);
            let mut xdel = redis::cmd("XDEL");
            xdel.arg(&self.key);
            for i in &items {
                xack.arg(&i.id);
                xdel.arg(&i.id);
            }
            self.query(&xack).await?;
            self.query(&xdel).await?;
        }
        Ok(items)
    }
}

/// The consumer of the admin API's drains within [`GROUP`].
pub const ADMIN_CONSUMER: &str = "admin";

impl ManualQueue for RedisManualQueue {
    fn push<'a>(
        &'a self,
        use_case: &'a str,
        req: &'a ChatRequest,
    ) -> futures::future::BoxFuture<'a, Result<String, ManualQueueError>> {
        Box::pin(self.enqueue(use_case, req))
    }

    fn peek(&self, count: usize) -> futures::future::BoxFuture<'_, Result<Vec<Json>, ManualQueueError>> {
        Box::pin(async move { Ok(self.list(count).await?.iter().map(QueueItem::to_json).collect()) })
    }

    fn take(&self, count: usize) -> futures::future::BoxFuture<'_, Result<Vec<Json>, ManualQueueError>> {
        Box::pin(async move {
            let items = self.drain(ADMIN_CONSUMER, count, true).await?;
            Ok(items.iter().map(QueueItem::to_json).collect())
        })
    }
}

fn string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `[[id, [field, value, ...]], ...]` into items; entries without fields
/// (trimmed while pending) are skipped.
fn entries(v: &Value) -> Result<Vec<QueueItem>, ManualQueueError> {
    let list = match v {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(a) => a,
        other => return Err(err(format!("unexpected stream reply {other:?}"))),
    };
    let mut out = Vec::with_capacity(list.len());
    for e in list {
        let Value::Array(pair) = e else {
            return Err(err(format!("unexpected stream entry {e:?}")));
        };
        let (Some(id), Some(fields)) = (pair.first().and_then(string), pair.get(1)) else {
            return Err(err(format!("unexpected stream entry {e:?}")));
        };
        let flat: Vec<String> = match fields {
            Value::Array(f) => f.iter().filter_map(string).collect(),
            Value::Map(m) => m
                .iter()
                .flat_map(|(k, v)| [string(k), string(v)])
                .flatten()
                .collect(),
            _ => continue,
        };
        let enqueued_at = id.split('-').next().and_then(|ms| ms.parse().ok()).unwrap_or(0);
        let mut item = QueueItem {
            ticket: format!("mq-{id}"),
            id,
            use_case: String::new(),
            request: Json::Null,
            enqueued_at,
        };
        for kv in flat.chunks(2) {
            let [k, v] = kv else { break };
            match k.as_str() {
                "use_case" => item.use_case = v.clone(),
                "request" => {
                    item.request = serde_json::from_str(v).unwrap_or_else(|_| Json::String(v.clone()))
                }
                _ => {}
            }
        }
        out.push(item);
    }
    Ok(out)
}
