//! A Redis Cluster's slot map as the health reads it: which master serves
//! which hash slots (`CLUSTER SLOTS`), so a dead master puts only its own
//! slots in failure mode (`health.rs`). Read by the background task at
//! start, every few seconds, and while a shard is out (a failover gives
//! its slots a new master, which starts healthy).

use crate::conn::Conn;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;
use std::time::Duration;

/// Slot ranges: (first slot, last slot, master `host:port`).
pub(crate) type Ranges = Vec<(u16, u16, String)>;

/// Asks one node of the cluster for the slot map, within `timeout`.
/// `None` on a single Redis, or when no node answered in time.
pub(crate) async fn read(conn: &Conn, timeout: Duration) -> Option<Ranges> {
    let Conn::Cluster(c) = conn else {
        return None;
    };
    let mut c = c.clone();
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    let any = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
    match tokio::time::timeout(timeout, c.route_command(cmd, any)).await {
        Ok(Ok(reply)) => parse(reply).ok(),
        _ => None,
    }
}

/// The ranges of a `CLUSTER SLOTS` reply, each with its master's address.
pub(crate) fn parse(reply: Value) -> Result<Ranges, String> {
    let bad = |what: &str| format!("CLUSTER SLOTS: {what}");
    let Value::Array(ranges) = reply else {
        return Err(bad("not an array"));
    };
    let mut out = Ranges::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(items) = range else {
            return Err(bad("a range is not an array"));
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(node))) =
            (items.first(), items.get(1), items.get(2))
        else {
            return Err(bad("a range without its slots and master"));
        };
        let slot = |n: &i64| u16::try_from(*n).map_err(|_| bad("slot out of range"));
        let host = text(node.first()).ok_or_else(|| bad("a master without host"))?;
        let port = text(node.get(1)).ok_or_else(|| bad("a master without port"))?;
        out.push((slot(first)?, slot(last)?, format!("{host}:{port}")));
    }
    Ok(out)
}

/// A host, port or id field of a node entry as text.
pub(crate) fn text(v: Option<&Value>) -> Option<String> {
    match v {
        Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        Some(Value::Int(i)) => Some(i.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn ranges_name_their_master() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("127.0.0.1", 7001)]),
        ]);
        assert_eq!(
            parse(reply).expect("parsed"),
            vec![
                (0, 5460, "127.0.0.1:7000".to_owned()),
                (5461, 16383, "127.0.0.1:7001".to_owned())
            ]
        );
    }

    #[test]
    fn a_bad_reply_is_an_error_not_a_panic() {
        assert!(parse(Value::Nil).is_err());
        assert!(parse(Value::Array(vec![Value::Int(1)])).is_err());
        let huge = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(70_000),
            node("h", 1),
        ])]);
        assert!(parse(huge).is_err());
    }
}
