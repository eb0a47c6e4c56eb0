//! Stopping the gateway, as README "Change a limit live, stop without
//! dropping a request" and docs/decisions.md "Drain" promise: `SIGTERM` or
//! Ctrl-C (`SIGINT`) makes `/readyz` answer 503, closes the listener and idle
//! keep-alive connections, lets requests in flight finish and exits 0; a
//! request that does not finish within `gateway.shutdownGraceMs` is dropped
//! and the process exits 0 all the same.
//!
//! Every step waits for an event — the upstream saying a request reached
//! it, `/readyz` turning 503, a connection refused, a socket closed, the
//! process gone — under a generous deadline that only bounds a hang. A
//! request "in flight" is one the upstream holds until the test lets it go,
//! so "it was still in flight" is a fact, not a guess about timing.

use super::config;
use crate::support::{dial, free_port, send_signal, upstream, Dial, Gateway, TempDir, Upstream};
use serde_json::json;
use std::io::{Read, Write};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The bound on every wait for an event: only a hang reaches it.
const HANG: Duration = Duration::from_secs(30);

/// A ready gateway with one `GET /hold` in flight: it has reached the
/// upstream, which holds it until [`Held::finish`].
struct Held {
    up: Upstream,
    gw: Gateway,
    request: JoinHandle<Result<(u16, String), String>>,
    _dir: TempDir,
}

impl Held {
    /// Starts a gateway whose `shutdownGraceMs` is `grace_ms` and sends it
    /// one `/hold` request; returns once the upstream holds it.
    async fn start(name: &str, grace_ms: u64) -> Self {
        let mut up = upstream().await;
        let dir = TempDir::new(name);
        let (proxy, admin) = (free_port(), free_port());
        let mut cfg = config(&up.url, proxy, admin, 100);
        cfg["gateway"]["shutdownGraceMs"] = grace_ms.into();
        // No timeout of the gateway's own ends a held request or an idle
        // connection before the test's deadlines do: only the drain does.
        cfg["gateway"]["timeouts"] = json!({
            "totalMs": 600_000, "headerReadMs": 600_000, "idleMs": 600_000, "sendMs": 600_000 });
        let mut gw = Gateway::spawn(name, dir.path(), &cfg, &[]);
        gw.wait_ready().await;
        let url = format!("{}/hold", gw.proxy);
        let request = tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .map_err(|e| e.to_string())?;
            let r = client.get(url).send().await.map_err(|e| e.to_string())?;
            let status = r.status().as_u16();
            Ok((status, r.text().await.map_err(|e| e.to_string())?))
        });
        up.wait_held().await;
        Self {
            up,
            gw,
            request,
            _dir: dir,
        }
    }

    /// Asserts the held request is still in flight (the gateway has not
    /// dropped it), then lets the upstream answer it; its status and body.
    async fn finish(self) -> (Gateway, Result<(u16, String), String>) {
        assert!(
            !self.request.is_finished(),
            "the held request ended before the upstream answered it: {:?}\n{}",
            self.request.await,
            self.gw.log_tail()
        );
        self.up.release();
        let answer = tokio::time::timeout(HANG, self.request)
            .await
            .expect("the released request is answered within 30 s")
            .expect("request task");
        (self.gw, answer)
    }
}

/// Dials the proxy port until a connection is refused; panics after
/// [`HANG`]. What the attempts before the refusal got (answered or not) is
/// returned: a stop signal takes a moment to be handled, so they say
/// nothing on their own.
async fn until_refused(gw: &Gateway) -> Vec<Dial> {
    let deadline = Instant::now() + HANG;
    let mut before = Vec::new();
    loop {
        match dial(gw.proxy_port()).await {
            Dial::Refused => return before,
            other => before.push(other),
        }
        assert!(
            Instant::now() < deadline,
            "the proxy port still accepted connections 30 s after the stop signal \
             (last attempts: {:?}):\n{}",
            &before[before.len().saturating_sub(3)..],
            gw.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The drain every stop signal must give: `/readyz` 503 while the admin
/// listener still answers, the proxy port refusing new connections,
/// `/healthz` still 200, the request in flight answered 200 when its
/// upstream answers, exit code 0.
async fn drains_on(signal: &str) {
    let held = Held::start(&format!("drain-{signal}"), 60_000).await;
    send_signal(&held.gw, signal);
    let ready = held.gw.admin_get_until("/readyz", 503, HANG).await;
    assert_eq!(ready, 503, "/readyz after SIG{signal}:\n{}", held.gw.log_tail());
    until_refused(&held.gw).await;
    // Liveness is not readiness: `/healthz` stays 200 through the drain.
    let live = held.gw.admin_get_until("/healthz", 200, HANG).await;
    assert_eq!(live, 200, "/healthz during the drain:\n{}", held.gw.log_tail());
    let (mut gw, answer) = held.finish().await;
    assert_eq!(
        answer,
        Ok((200, "released".to_owned())),
        "the request in flight at SIG{signal}:\n{}",
        gw.log_tail()
    );
    let code = gw.wait_exit(HANG).await;
    assert_eq!(code, Some(0), "exit status after SIG{signal}:\n{}", gw.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_request_in_flight_finish_and_exits_0() {
    drains_on("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_drains_like_sigterm() {
    drains_on("INT").await;
}

/// Right after `SIGTERM`, while a request is still in flight, a new
/// connection is refused, further ones too, and an idle keep-alive
/// connection opened before the signal is closed by the gateway: the
/// listener does not wait for the drain to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_closes_at_once_on_sigterm() {
    let held = Held::start("listener", 60_000).await;
    // An idle keep-alive connection: one request answered, then silence.
    let port = held.gw.proxy_port();
    let mut idle = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(HANG)).expect("timeout");
        s.write_all(b"GET /before HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .expect("write");
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.ends_with(b"\r\n\r\nok") {
            let n = s.read(&mut buf).expect("an answer on the keep-alive connection");
            assert!(
                n > 0,
                "closed before answering: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        s
    })
    .await
    .expect("keep-alive task");

    send_signal(&held.gw, "TERM");
    until_refused(&held.gw).await;
    // Refused from then on, not once by chance.
    for _ in 0..3 {
        assert_eq!(dial(port).await, Dial::Refused, "{}", held.gw.log_tail());
    }
    let closed = tokio::task::spawn_blocking(move || idle.read(&mut [0u8; 64]))
        .await
        .expect("read task");
    assert!(
        matches!(closed, Ok(0))
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the idle keep-alive connection was not closed by the drain: {closed:?}\n{}",
        held.gw.log_tail()
    );
    // All of this happened while the request was in flight, which still
    // finishes.
    let (gw, answer) = held.finish().await;
    assert_eq!(answer, Ok((200, "released".to_owned())), "{}", gw.log_tail());
}

/// A request that never finishes is dropped when `shutdownGraceMs` is over
/// and the process exits with the code a drain promises, 0: not before the
/// grace (less a little), and well within ten times it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_period_ends_a_drain_that_does_not_finish_and_exits_0() {
    const GRACE_MS: u64 = 1500;
    let Held {
        up,
        mut gw,
        request,
        _dir,
    } = Held::start("grace", GRACE_MS).await;
    let signalled = Instant::now();
    send_signal(&gw, "TERM");
    let code = gw.wait_exit(Duration::from_millis(GRACE_MS * 10)).await;
    let took = signalled.elapsed();
    assert_eq!(
        code,
        Some(0),
        "exit status within 10 × the grace after SIGTERM ({took:?}):\n{}",
        gw.log_tail()
    );
    assert!(
        took >= Duration::from_millis(GRACE_MS - 200),
        "exited {took:?} after SIGTERM, before the {GRACE_MS} ms grace:\n{}",
        gw.log_tail()
    );
    // The held request was cut, not answered.
    let answer = tokio::time::timeout(HANG, request)
        .await
        .expect("the cut request ends")
        .expect("request task");
    assert!(answer.is_err(), "the request that never finished: {answer:?}");
    let cut = gw
        .log_events(|m| m.starts_with("grace period over"))
        .into_iter()
        .map(|v| v["fields"]["dropped"].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert_eq!(
        cut,
        1,
        "one connection dropped at the grace's end:\n{}",
        gw.log_tail()
    );
    drop(up);
}
