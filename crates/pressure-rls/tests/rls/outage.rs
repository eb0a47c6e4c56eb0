//! Redis down: failure mode `closed` answers gRPC UNAVAILABLE (Envoy's
//! `failure_mode_deny` decides) and `/healthz` says 503; `open` allows.
//! Redis back: decisions are exact again.

use crate::support::{ok, req, start_with};
use pressure_redis::{FailureMode, RedisConfig};
use pressure_testkit::RedisServer;
use std::time::Duration;

const YAML: &str =
    "domain: o\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";

fn config(url: &str, mode: FailureMode) -> RedisConfig {
    let mut rc = RedisConfig::new(url);
    rc.failure_mode = mode;
    rc.key_prefix = format!("rls-outage-{}", std::process::id());
    rc
}

async fn healthz(admin: &str) -> u16 {
    // A bare HTTP/1.1 GET on loopback: no client dependency for one line.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = admin.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("admin");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_answers_unavailable_and_open_allows() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let mut closed = start_with(&[YAML], Some(config(&url, FailureMode::Closed)), true).await;
    let mut open = start_with(&[YAML], Some(config(&url, FailureMode::Open)), false).await;
    let r = req("o", &[&[("k", "v")]]);
    assert_eq!(closed.admitted(&r, 4).await, 3, "exact while Redis is up");
    let admin = closed.admin.clone().expect("admin");
    assert_eq!(healthz(&admin).await, 200);

    redis.stop();
    // The exhausted counter is still refused from the local deny cache
    // (the store said until when); a fresh one needs the store.
    assert!(!ok(&closed.call(r.clone()).await));
    let r = req("o", &[&[("k", "fresh")]]);
    let err = closed
        .client
        .should_rate_limit(r.clone())
        .await
        .expect_err("closed");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
    let open_answer = open.call(r.clone()).await;
    assert!(ok(&open_answer), "open allows while Redis is down");
    assert_eq!(healthz(&admin).await, 503);
    assert!(closed.metrics().contains("pressure_rls_unavailable_total 1"));

    redis.restart();
    // Back: the backend reconnects by itself (bounded wait for the event).
    let back = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if closed.client.should_rate_limit(r.clone()).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(back.is_ok(), "the service answers again once Redis is back");
}
