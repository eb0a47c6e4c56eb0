//! The gateway's lifecycle as an operator sees it, against the real
//! `pressure` binary on loopback: SIGTERM drains requests in flight and exits
//! 0; SIGHUP and `POST /admin/pressure/reload` swap the limits live and keep
//! the usage; an invalid file changes nothing; a second process on the same
//! port fails with exit code 2. Every process is killed on drop and every
//! wait is bounded.

mod support;

use serde_json::json;
use std::time::Duration;
use support::{free_port, send_signal, upstream, Gateway, TempDir};

/// The config of a gateway in front of `upstream` with one route limited to
/// `per_minute` requests per minute.
fn config(upstream: &str, proxy: u16, admin: u16, per_minute: u64) -> serde_json::Value {
    json!({ "gateway": {
        "listen": format!("127.0.0.1:{proxy}"),
        "admin": { "listen": format!("127.0.0.1:{admin}") },
        "upstreams": { "app": { "url": upstream, "pathPrefix": "/" } },
        "shutdownGraceMs": 10000,
        "pressure": { "perRoute": [{
            "resource": "gateway:route:limited", "pathPrefix": "/limited",
            "limits": { "requestsPerMinute": per_minute } }] }
    }})
}

async fn statuses(gw: &Gateway, path: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(gw.get(path).await.0);
    }
    out
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_request_in_flight_finish_and_exits_0() {
    let up = upstream().await;
    let dir = TempDir::new("sigterm");
    let (proxy, admin) = (free_port(), free_port());
    let mut gw = Gateway::spawn("drain", dir.path(), &config(&up.url, proxy, admin, 100), &[]);
    gw.wait_ready().await;

    let slow = {
        let url = format!("{}/slow?ms=2000", gw.proxy);
        tokio::spawn(async move {
            let r = reqwest::get(url).await.expect("the slow request is answered");
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    send_signal(&gw, "TERM");
    // While it drains, readiness says so and the admin listener still answers.
    let ready = gw.admin_get_until("/readyz", 503, Duration::from_secs(1)).await;
    assert_eq!(ready, 503, "/readyz during the drain:\n{}", gw.log_tail());
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .expect("the slow request finishes within its time")
        .expect("task");
    assert_eq!(status, 200, "{body}\n{}", gw.log_tail());
    assert_eq!(body, "slept 2000 ms");
    let code = gw.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(code, Some(0), "exit status after SIGTERM:\n{}", gw.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_raises_a_limit_and_keeps_the_usage() {
    let up = upstream().await;
    let dir = TempDir::new("sighup");
    let (proxy, admin) = (free_port(), free_port());
    let mut gw = Gateway::spawn("reload", dir.path(), &config(&up.url, proxy, admin, 2), &[]);
    gw.wait_ready().await;

    let first = statuses(&gw, "/limited", 3).await;
    assert_eq!(first, [200, 200, 429], "{}", gw.log_tail());
    gw.rewrite(&config(&up.url, proxy, admin, 5));
    send_signal(&gw, "HUP");
    gw.wait_metric("pressure_config_reloads_total{result=\"ok\"} 1")
        .await;
    // 2 of the new 5 are used: exactly 3 more pass.
    let after = statuses(&gw, "/limited", 5).await;
    assert_eq!(
        (count(&after, 200), count(&after, 429)),
        (3, 2),
        "{after:?}\n{}",
        gw.log_tail()
    );
    assert!(gw.is_running(), "SIGHUP must not stop the gateway");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_reload_names_the_path_and_changes_nothing() {
    let up = upstream().await;
    let dir = TempDir::new("badreload");
    let (proxy, admin) = (free_port(), free_port());
    let mut gw = Gateway::spawn("bad", dir.path(), &config(&up.url, proxy, admin, 2), &[]);
    gw.wait_ready().await;
    assert_eq!(statuses(&gw, "/limited", 1).await, [200]);

    gw.rewrite(&config(&up.url, proxy, admin, 0));
    let (status, body) = gw.admin_post("/admin/pressure/reload").await;
    assert_eq!(status, 400, "{body}");
    let err: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        err["error"]["path"], "gateway.pressure.perRoute[0].limits.requestsPerMinute",
        "{body}"
    );
    assert_eq!(err["error"]["type"], "invalid_config");
    gw.wait_metric("pressure_config_reloads_total{result=\"error\"} 1")
        .await;
    // The old limit (2 per minute) still holds.
    assert_eq!(
        statuses(&gw, "/limited", 2).await,
        [200, 429],
        "{}",
        gw.log_tail()
    );

    // A listener change needs a restart: refused, also with its path.
    let mut moved = config(&up.url, proxy, admin, 2);
    moved["gateway"]["listen"] = json!(format!("127.0.0.1:{}", free_port()));
    gw.rewrite(&moved);
    let (status, body) = gw.admin_post("/admin/pressure/reload").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("gateway.listen"), "{body}");
    assert!(gw.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gateway_on_the_same_port_exits_2() {
    let up = upstream().await;
    let dir = TempDir::new("twice");
    let (proxy, admin) = (free_port(), free_port());
    let mut first = Gateway::spawn("first", dir.path(), &config(&up.url, proxy, admin, 100), &[]);
    first.wait_ready().await;
    let mut second = Gateway::spawn(
        "second",
        dir.path(),
        &config(&up.url, proxy, free_port(), 100),
        &[],
    );
    let code = second.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(2), "{}", second.log_tail());
    let log = second.log_tail();
    assert!(
        log.contains("address already in use") || log.contains("Address already in use"),
        "{log}"
    );
    assert!(log.contains(&format!("127.0.0.1:{proxy}")), "{log}");
    assert!(first.is_running());
    assert_eq!(first.get("/anything").await.0, 200);
}

/// With 64 file descriptors, a flood of silent connections takes the
/// listener to `EMFILE`: accept failures back off and are logged at most
/// about once a second, and once the idle timeout closes the flood the
/// gateway serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fd_exhausting_flood_backs_off_and_recovers() {
    let up = upstream().await;
    let dir = TempDir::new("emfile");
    let (proxy, admin) = (free_port(), free_port());
    let mut cfg = config(&up.url, proxy, admin, 100);
    cfg["gateway"]["timeouts"] = json!({ "idleMs": 1500 });
    let mut gw = Gateway::spawn_with_fd_limit("emfile", dir.path(), &cfg, &[], Some(64));
    gw.wait_ready().await;
    let mut flood = Vec::new();
    for _ in 0..120 {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", proxy)).await {
            flood.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let failures = gw.log().matches("accept failed").count();
    assert!(
        (1..=4).contains(&failures),
        "{failures} accept-failure lines in ~1 s:\n{}",
        gw.log_tail()
    );
    // The idle timeout frees the descriptors; the gateway serves again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    loop {
        if gw.get("/after").await.0 == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never recovered:\n{}",
            gw.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(flood);
    assert!(gw.is_running());
}
