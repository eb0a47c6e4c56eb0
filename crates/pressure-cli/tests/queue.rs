//! `pressure queue list|drain` against a real Redis: the test binary's own
//! `redis-server` from `pressure-testkit`, or `PRESSURE_REDIS_URL` (FAILS
//! when none can be had).

use pressure_gateway::manual_queue::RedisManualQueue;
use pressure_redis::RedisConfig;
use serde_json::{json, Value};
use std::process::Command;

fn run(args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .args(args)
        .output()
        .expect("run pressure");
    assert!(
        out.status.success(),
        "pressure {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_list_and_drain_print_json_lines() {
    let url = pressure_testkit::redis_url();
    // Random per call (no wall clock needed).
    let nanos = {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    let prefix = format!("mqcli-{}-{nanos}", std::process::id());
    let cfg = RedisConfig {
        url: url.clone(),
        key_prefix: prefix.clone(),
        ..RedisConfig::default()
    };
    let q = RedisManualQueue::new(&cfg);
    let mut tickets = Vec::new();
    for i in 0..3 {
        let req = serde_json::from_value(json!({
            "model": "support", "messages": [ { "role": "user", "content": format!("q{i}") } ]
        }))
        .expect("request");
        tickets.push(
            q.enqueue("support", &req)
                .await
                .unwrap_or_else(|e| panic!("no Redis answers at {url}: {e}")),
        );
    }
    let dir = std::env::temp_dir().join(format!("pressure-queue-test-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join("gateway.json");
    let config = json!({ "gateway": {
        "listen": "127.0.0.1:0",
        "backend": { "type": "redis", "url": url, "keyPrefix": prefix },
        "upstreams": { "api": { "url": "http://127.0.0.1:9", "pathPrefix": "/api" } }
    }});
    std::fs::write(&file, config.to_string()).expect("write config");
    let file = file.to_str().expect("path");

    let listed = run(&["queue", "list", "--config", file]);
    assert_eq!(listed.len(), 3);
    for (i, item) in listed.iter().enumerate() {
        assert_eq!(item["ticket"], tickets[i].as_str());
        assert_eq!(item["use_case"], "support");
        assert_eq!(item["request"]["messages"][0]["content"], format!("q{i}"));
    }
    assert_eq!(run(&["queue", "list", "--config", file, "--count", "1"]).len(), 1);

    let drained = run(&["queue", "drain", "--config", file, "--count", "2", "--ack"]);
    assert_eq!(drained.len(), 2);
    assert_eq!(drained[0]["ticket"], tickets[0].as_str());
    assert_eq!(drained[1]["ticket"], tickets[1].as_str());
    let left = run(&["queue", "list", "--config", file]);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["ticket"], tickets[2].as_str());
    // Without --ack the item stays queued.
    assert_eq!(run(&["queue", "drain", "--config", file]).len(), 1);
    assert_eq!(run(&["queue", "list", "--config", file]).len(), 1);
    assert_eq!(run(&["queue", "drain", "--config", file, "--ack"]).len(), 1);
    assert!(run(&["queue", "list", "--config", file]).is_empty());

    let _ = std::fs::remove_dir_all(&dir);
}
