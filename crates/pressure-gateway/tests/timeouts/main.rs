//! Client-side timeouts over raw sockets (docs/architecture.md#route-once-refuse-as-values): a connection that
//! never sends a byte, an h2c connection after its preface, a keep-alive
//! connection left idle and a half-sent head on the admin listener are all
//! closed; a client that stops reading a large response is dropped and its
//! slot released. Short timeouts keep every test within a few seconds.

use super::support;

use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;
use support::{bounded, TestGateway, TestUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Reads until the peer closes; how long that took (fails after `bound`).
async fn closed_within(stream: &mut TcpStream, bound: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 65_536];
    loop {
        match tokio::time::timeout_at(started + bound, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("the connection was still open after {bound:?}"),
        }
    }
}

fn config(up: &TestUpstream, timeouts: serde_json::Value) -> serde_json::Value {
    json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        "timeouts": timeouts,
        "pressure": { "perRoute": [{
            "resource": "gateway:route:big", "pathPrefix": "/big",
            "limits": { "maxConcurrentRequests": 1 } }] },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_connections_are_closed() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(config(&up, json!({ "idleMs": 300, "headerReadMs": 400 }))).await;

        // Never sends a byte.
        let mut silent = TcpStream::connect(gw.addr).await.expect("connect");
        let took = closed_within(&mut silent, Duration::from_secs(3)).await;
        assert!(took >= Duration::from_millis(250), "closed too early: {took:?}");

        // Keep-alive after one request.
        let mut kept = TcpStream::connect(gw.addr).await.expect("connect");
        kept.write_all(b"GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
            .await
            .expect("write");
        let mut buf = [0u8; 4096];
        let n = kept.read(&mut buf).await.expect("answer");
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        closed_within(&mut kept, Duration::from_secs(3)).await;

        // h2c: the preface and a SETTINGS frame, then nothing.
        let mut h2 = TcpStream::connect(gw.addr).await.expect("connect");
        h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await
            .expect("preface");
        closed_within(&mut h2, Duration::from_secs(3)).await;

        // Half a head on the admin listener.
        let mut half = TcpStream::connect(gw.admin).await.expect("connect");
        half.write_all(b"GET /healthz HTTP/1.1\r\nHost: a")
            .await
            .expect("write");
        closed_within(&mut half, Duration::from_secs(3)).await;

        // A request whose answer takes longer than idleMs is not idle.
        let late = gw.get("/late").await;
        assert_eq!(late.status, 200, "{:?}", late.body);

        // Still serving.
        assert_eq!(gw.get("/still").await.status, 200);
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// A head sent a byte at a time, each byte well within `idleMs`, is cut at
/// `headerReadMs` from its first byte (a slowloris), on a connection that
/// served a request before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_sent_byte_by_byte_is_cut_at_header_read() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(config(&up, json!({ "idleMs": 1000, "headerReadMs": 400 }))).await;
        let mut slow = TcpStream::connect(gw.addr).await.expect("connect");
        // One request served first: the head timer starts again with the
        // next head's first byte.
        slow.write_all(b"GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
            .await
            .expect("write");
        let mut buf = [0u8; 4096];
        let n = slow.read(&mut buf).await.expect("answer");
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(600)).await;
        let started = Instant::now();
        let head = b"GET /y HTTP/1.1\r\nHost: gw\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let mut cut = None;
        for byte in head {
            if slow.write_all(&[*byte]).await.is_err() {
                cut = Some(started.elapsed());
                break;
            }
            // Closed by the gateway: a read sees the end.
            match tokio::time::timeout(Duration::from_millis(100), slow.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    cut = Some(started.elapsed());
                    break;
                }
                Ok(Ok(n)) => panic!(
                    "answered a head still arriving: {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ),
                Err(_) => {}
            }
        }
        let cut = cut.expect("the trickled head was never cut");
        assert!(
            cut >= Duration::from_millis(350),
            "cut before headerReadMs: {cut:?}"
        );
        assert!(cut < Duration::from_secs(3), "cut late: {cut:?}");

        // Still serving.
        assert_eq!(gw.get("/still").await.status, 200);
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// Sends a request for a large response and never reads it.
async fn stalled_reader(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: gw\r\n\r\n").as_bytes())
        .await
        .expect("write");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_loses_its_slot() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(config(&up, json!({ "sendMs": 500 }))).await;
        let _stuck = stalled_reader(gw.addr, "/big").await;
        // The slot is held while the response is being written...
        tokio::time::sleep(Duration::from_millis(200)).await;
        let busy = gw.get("/big").await;
        assert_eq!(busy.status, 429, "the one slot is held by the stuck reader");
        // ...and given back once the write has been blocked for sendMs.
        let s = gw.await_idle("gateway:route:big", Duration::from_secs(5)).await;
        assert_eq!(s.active, Some(0));
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// A request that outlives `leaseTtlMs` keeps counting toward
/// `maxConcurrentRequests`: its lease is renewed while it is in flight.
async fn lease_outlives_its_ttl(backend: serde_json::Value) {
    let up = TestUpstream::demo().await;
    let gw = TestGateway::start(json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        "backend": backend,
        "pressure": { "perRoute": [{
            "resource": "gateway:route:late", "pathPrefix": "/late",
            "limits": { "maxConcurrentRequests": 2, "leaseTtlMs": 250 } }] },
    }))
    .await;
    let url = gw.url("/late");
    let held: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { reqwest_status(&url).await })
        })
        .collect();
    // Past the TTL (twice over), both slots are still held.
    tokio::time::sleep(Duration::from_millis(650)).await;
    let third = gw.get("/late").await;
    assert_eq!(
        third.status, 429,
        "a third request got in while two held their slots"
    );
    for h in held {
        assert_eq!(h.await.expect("task"), 200);
    }
    gw.await_idle("gateway:route:late", Duration::from_secs(3)).await;
    gw.stop().await;
    up.stop().await;
}

async fn reqwest_status(url: &str) -> u16 {
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let req = http::Request::get(url)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    client.request(req).await.map_or(0, |r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_longer_than_the_lease_ttl_keeps_its_slot_in_memory() {
    bounded(lease_outlives_its_ttl(json!({ "type": "memory" }))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_longer_than_the_lease_ttl_keeps_its_slot_in_redis() {
    let url = pressure_testkit::redis_url();
    bounded(lease_outlives_its_ttl(json!({
        "type": "redis", "url": url,
        "keyPrefix": format!("lease-ttl-{}", std::process::id()),
    })))
    .await;
}
