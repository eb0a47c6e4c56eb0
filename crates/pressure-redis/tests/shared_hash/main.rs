//! `pressure_redis::SharedHash` against real servers (the test binary's own
//! `redis-server` and 3-master cluster from `pressure-testkit`): a watcher
//! first gets the whole hash with its version, then every write in order
//! with a growing version, whatever the field holds; on a cluster the
//! script's two keys share a slot and announcements reach a watcher
//! subscribed on one seed; a `replace` writes only a field still there.

#[path = "../support.rs"]
mod support;

use pressure_redis::{RedisConfig, SharedHash, SharedHashEvent};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The next event of `rx`, within 5 s.
async fn next(rx: &mut mpsc::UnboundedReceiver<SharedHashEvent>) -> SharedHashEvent {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("an event within 5 s")
        .expect("the watcher runs")
}

async fn writes_reach_a_watcher_in_order(config: RedisConfig) {
    let hash = Arc::new(SharedHash::new(&config, "tenant-overrides"));
    let v1 = hash.set("before", "1").await.expect("set");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let watcher = {
        let hash = Arc::clone(&hash);
        tokio::spawn(async move { hash.watch(move |e| drop(tx.send(e))).await })
    };
    let mut entries = BTreeMap::new();
    entries.insert("before".to_owned(), "1".to_owned());
    assert_eq!(
        next(&mut rx).await,
        SharedHashEvent::Snapshot { version: v1, entries }
    );

    // A field with spaces, a colon and non-ASCII; a value with spaces.
    let field = "a b:c 日";
    let v2 = hash.set(field, r#"{"requestsPerMinute": 5}"#).await.expect("set");
    let v3 = hash.remove("before").await.expect("remove");
    assert!(v1 < v2 && v2 < v3, "{v1} {v2} {v3}");
    assert_eq!(
        next(&mut rx).await,
        SharedHashEvent::Set {
            version: v2,
            field: field.into(),
            value: r#"{"requestsPerMinute": 5}"#.into()
        }
    );
    assert_eq!(
        next(&mut rx).await,
        SharedHashEvent::Removed {
            version: v3,
            field: "before".into()
        }
    );
    let (version, all) = hash.snapshot().await.expect("snapshot");
    assert_eq!(version, v3);
    assert_eq!(all.keys().collect::<Vec<_>>(), [field]);

    // `replace` writes only a field that is there: never back a removed one.
    let v4 = hash.replace(field, "2").await.expect("replace").expect("there");
    assert!(v4 > v3);
    assert_eq!(
        next(&mut rx).await,
        SharedHashEvent::Set {
            version: v4,
            field: field.into(),
            value: "2".into()
        }
    );
    assert_eq!(hash.replace("before", "3").await.expect("replace"), None);
    let (version, all) = hash.snapshot().await.expect("snapshot");
    assert_eq!(version, v4, "a refused replace writes nothing");
    assert_eq!(all.get("before"), None);
    watcher.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_single_redis() {
    let config = RedisConfig {
        key_prefix: format!("{}-shared", support::run_id()),
        ..support::config(support::redis_url())
    };
    writes_reach_a_watcher_in_order(config).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster() {
    let config = RedisConfig {
        cluster_nodes: support::cluster_nodes(),
        key_prefix: format!("{}-sharedc", support::run_id()),
        ..support::config("")
    };
    writes_reach_a_watcher_in_order(config).await;
}
