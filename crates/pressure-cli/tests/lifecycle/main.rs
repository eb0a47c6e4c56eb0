//! The gateway's lifecycle as an operator sees it, against the real
//! `pressure` binary on loopback: SIGTERM and SIGINT drain (in `drain`);
//! SIGHUP, `POST /admin/pressure/reload` and `--watch` swap the limits live
//! and keep the usage; an invalid file changes nothing; a second process on
//! the same port fails with exit code 2; a flood that exhausts the file
//! descriptors backs off and recovers; `--share-cores` changes no answer.
//! Every process is killed on drop; every wait is for an event, under a
//! deadline that only bounds a hang.

mod drain;
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
    raised_to_five_keeping_usage(&gw).await;
    assert!(gw.is_running(), "SIGHUP must not stop the gateway");
}

/// After a reload from 2 to 5 per window with 2 used: exactly 3 of the next
/// 5 pass (the usage was kept, the new limit applies).
async fn raised_to_five_keeping_usage(gw: &Gateway) {
    let after = statuses(gw, "/limited", 5).await;
    assert_eq!(
        (count(&after, 200), count(&after, 429)),
        (3, 2),
        "{after:?}\n{}",
        gw.log_tail()
    );
}

/// With `--watch`, an edit of the config file is a reload: no signal, no
/// admin call. The new limit applies and the usage is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reloads_an_edited_file_without_sighup() {
    let up = upstream().await;
    let dir = TempDir::new("watch");
    let (proxy, admin) = (free_port(), free_port());
    let mut gw = Gateway::spawn(
        "watch",
        dir.path(),
        &config(&up.url, proxy, admin, 2),
        &["--watch"],
    );
    gw.wait_ready().await;

    let first = statuses(&gw, "/limited", 3).await;
    assert_eq!(first, [200, 200, 429], "{}", gw.log_tail());
    gw.rewrite(&config(&up.url, proxy, admin, 5));
    gw.wait_metric("pressure_config_reloads_total{result=\"ok\"} 1")
        .await;
    gw.wait_event("watch reload", |m| {
        m.starts_with("config or certificate file changed")
    })
    .await;
    raised_to_five_keeping_usage(&gw).await;
    assert!(
        gw.log_events(|m| m.starts_with("SIGHUP")).is_empty(),
        "{}",
        gw.log_tail()
    );
}

/// `--share-cores` reaches the server threads (the start line says so) and
/// changes no answer: of 48 concurrent requests to a route limited to 10
/// per minute, exactly 10 pass and the rest are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_cores_changes_no_answer() {
    let up = upstream().await;
    let dir = TempDir::new("share");
    let (proxy, admin) = (free_port(), free_port());
    let mut gw = Gateway::spawn(
        "share",
        dir.path(),
        &config(&up.url, proxy, admin, 10),
        &["--share-cores"],
    );
    gw.wait_ready().await;
    let start = gw.wait_event("start", |m| m == "gateway listening").await;
    assert_eq!(start["fields"]["share_cores"], true, "{start}");

    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..48 {
        let url = format!("http://127.0.0.1:{proxy}/limited");
        tasks.spawn(async move { reqwest::get(url).await.map(|r| r.status().as_u16()).unwrap_or(0) });
    }
    let all = tasks.join_all().await;
    assert_eq!(
        (count(&all, 200), count(&all, 429)),
        (10, 38),
        "{all:?}\n{}",
        gw.log_tail()
    );
    assert_eq!(statuses(&gw, "/", 3).await, [200; 3], "{}", gw.log_tail());
}

/// Without the flag the start line says the cores are not shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cores_are_not_shared_by_default() {
    let up = upstream().await;
    let dir = TempDir::new("noshare");
    let (proxy, admin) = (free_port(), free_port());
    let mut gw = Gateway::spawn("noshare", dir.path(), &config(&up.url, proxy, admin, 10), &[]);
    gw.wait_ready().await;
    let start = gw.wait_event("start", |m| m == "gateway listening").await;
    assert_eq!(start["fields"]["share_cores"], false, "{start}");
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
    let code = second.wait_exit(Duration::from_secs(30)).await;
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
/// about once a second (with the count of the suppressed ones), and once the
/// idle timeout closes the flood the gateway serves again.
///
/// The rate is read from the lines' own timestamps, so a slow machine
/// cannot make it look higher: failures come every few milliseconds at
/// first (the backoff starts at 5 ms), so a line per failure would put
/// lines milliseconds apart.
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
    gw.wait_event("accept failure", |m| m.starts_with("accept failed"))
        .await;
    // The idle timeout frees the descriptors; the gateway serves again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
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
    let lines = gw.log_events(|m| m.starts_with("accept failed"));
    for line in &lines {
        assert!(line["fields"]["suppressed"].is_u64(), "{line}");
    }
    let stamps: Vec<f64> = lines
        .iter()
        .map(|l| unix_seconds(l["timestamp"].as_str().expect("a timestamp")))
        .collect();
    for pair in stamps.windows(2) {
        assert!(
            pair[1] - pair[0] >= 0.9,
            "two accept-failure lines {:.3} s apart:\n{}",
            pair[1] - pair[0],
            gw.log_tail()
        );
    }
}

/// Seconds since the Unix epoch of an RFC 3339 UTC timestamp
/// (`2026-12-01T12:30:43.125Z`, any number of fraction digits).
fn unix_seconds(stamp: &str) -> f64 {
    parse_utc(stamp).unwrap_or_else(|| panic!("not an RFC 3339 UTC timestamp: {stamp}"))
}

fn parse_utc(stamp: &str) -> Option<f64> {
    let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let numbers = |s: &str, sep: char| -> Option<Vec<i64>> { s.split(sep).map(|p| p.parse().ok()).collect() };
    let (d, t) = (numbers(date, '-')?, numbers(hms, ':')?);
    let (&[y, m, day], &[h, min, sec]) = (d.as_slice(), t.as_slice()) else {
        return None;
    };
    let frac: f64 = format!("0.{frac}").parse().ok()?;
    // Days from the civil date (Howard Hinnant's `days_from_civil`).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + min * 60 + sec) as f64 + frac)
}

#[test]
fn rfc3339_timestamps_read_as_unix_seconds() {
    assert_eq!(unix_seconds("1970-01-01T00:00:01.5Z"), 1.5);
    assert_eq!(unix_seconds("2000-03-01T00:00:00Z"), 951_868_800.0);
    let t = unix_seconds("2026-12-01T20:47:12.089381Z");
    assert!((t - 1_796_158_032.089_381).abs() < 1e-5, "{t}");
    assert!(parse_utc("2026-12-01 20:47:12Z").is_none());
}
