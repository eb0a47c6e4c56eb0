//! `pressure rls` as an operator runs it, against the real binary on
//! loopback with a real tonic client: bad YAML exits 2 naming the file and
//! the path; a file edit (watched) and SIGHUP apply live and keep the
//! counters; two processes on one Redis share one limit exactly; Envoy's
//! own generated messages (Python `grpcio` + `xds-protos`, a client we did
//! not write) get the answers Envoy expects. Every
//! process is killed on drop; every wait is for an event, under a deadline
//! that only bounds a hang.

use pressure_rls::proto::{Code, RateLimitDescriptor, RateLimitRequest};
use pressure_rls::RateLimitClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A directory of this test's own, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pressure-rls-{name}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `pressure rls`, killed on drop.
struct Rls {
    child: Child,
    log: PathBuf,
    url: String,
}

impl Drop for Rls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn yaml(domain: &str, n: u32) -> String {
    format!("domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: {n}\n")
}

impl Rls {
    /// Starts the binary on `config` with `extra` arguments and waits for
    /// the line naming its bound address.
    fn spawn(dir: &Path, name: &str, config: &Path, extra: &[&str]) -> Self {
        let log = dir.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_pressure"))
            .arg("rls")
            .arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn pressure");
        let mut rls = Self {
            child,
            log,
            url: String::new(),
        };
        // 20 ms apart, 20 s at most.
        for _ in 0..1_000 {
            let text = std::fs::read_to_string(&rls.log).unwrap_or_default();
            if let Some(addr) = text
                .lines()
                .find_map(|l| l.strip_prefix("rls on grpc://"))
                .map(|rest| rest.split_whitespace().next().unwrap_or_default().to_owned())
            {
                rls.url = format!("http://{addr}");
                return rls;
            }
            if let Ok(Some(status)) = rls.child.try_wait() {
                panic!("pressure rls exited early ({status}):\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "no address within 20 s:\n{}",
            std::fs::read_to_string(&rls.log).unwrap_or_default()
        );
    }

    async fn client(&self) -> RateLimitClient {
        RateLimitClient::connect(self.url.clone()).await.expect("connect")
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }
}

fn request(domain: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor::of([("k", value)])],
        hits_addend: 0,
    }
}

async fn admitted(c: &mut RateLimitClient, r: &RateLimitRequest, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        let a = c.should_rate_limit(r.clone()).await.expect("answer");
        ok += usize::from(a.overall_code == Code::Ok as i32);
    }
    ok
}

/// Waits (bounded) until a probe descriptor reports `n` per unit: the
/// reload has been applied.
async fn wait_limit(c: &mut RateLimitClient, domain: &str, n: u32) {
    let probe = request(domain, "probe");
    let applied = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let a = c.should_rate_limit(probe.clone()).await.expect("answer");
            if a.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit) == Some(n) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(applied.is_ok(), "limit {n} not applied within 20 s");
}

#[test]
fn bad_yaml_exits_2_naming_the_file_and_the_path() {
    let dir = TempDir::new("bad");
    let cases = [
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: weeks\n      requests_per_unit: 1\n",
            "ratelimit.yaml: descriptors[0].rate_limit.unit: unknown unit \"weeks\"",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n",
            "ratelimit.yaml: descriptors[0].rate_limt: unknown field `rate_limt`",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(dir.0.join("ratelimit.yaml"), text).expect("write");
        let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
            .current_dir(&dir.0)
            .args(["rls", "--config", "ratelimit.yaml", "--listen", "127.0.0.1:0"])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    // Two files with one domain.
    std::fs::write(dir.0.join("a.yaml"), "domain: same\n").expect("write");
    std::fs::write(dir.0.join("b.yaml"), "domain: same\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .current_dir(&dir.0)
        .args([
            "rls",
            "--config",
            "a.yaml",
            "--config",
            "b.yaml",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("b.yaml: domain: duplicate domain \"same\""),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_a_file_edit_apply_live_and_keep_the_counters() {
    let dir = TempDir::new("reload");
    // SIGHUP, no watch.
    let file = dir.0.join("hup.yaml");
    std::fs::write(&file, yaml("hup", 2)).expect("write");
    let rls = Rls::spawn(&dir.0, "hup", &file, &["--no-watch"]);
    let mut c = rls.client().await;
    let r = request("hup", "v");
    assert_eq!(admitted(&mut c, &r, 3).await, 2);
    std::fs::write(&file, yaml("hup", 5)).expect("edit");
    rls.signal("HUP");
    wait_limit(&mut c, "hup", 5).await;
    assert_eq!(admitted(&mut c, &r, 5).await, 3, "2 used of 5: 3 more");

    // The file watched (the default): an edit alone.
    let file = dir.0.join("watch.yaml");
    std::fs::write(&file, yaml("watch", 2)).expect("write");
    let rls = Rls::spawn(&dir.0, "watch", &file, &[]);
    let mut c = rls.client().await;
    let r = request("watch", "v");
    assert_eq!(admitted(&mut c, &r, 3).await, 2);
    std::fs::write(&file, yaml("watch", 4)).expect("edit");
    wait_limit(&mut c, "watch", 4).await;
    assert_eq!(admitted(&mut c, &r, 4).await, 2, "2 used of 4: 2 more");
    let log = std::fs::read_to_string(&rls.log).unwrap_or_default();
    assert!(log.contains("reloaded"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_redis_share_one_limit_exactly() {
    let url = pressure_testkit::redis_url();
    let dir = TempDir::new("fleet");
    // A domain of this run's own: its counters are new in the shared Redis.
    let domain = format!(
        "fleet{}x{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let file = dir.0.join("fleet.yaml");
    std::fs::write(&file, yaml(&domain, 30)).expect("write");
    let a = Rls::spawn(&dir.0, "a", &file, &["--redis", &url]);
    let b = Rls::spawn(&dir.0, "b", &file, &["--redis", &url]);
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let r = request(&domain, "shared");
    let mut ok = [0usize; 2];
    for i in 0..100 {
        let c = if i % 2 == 0 { &mut ca } else { &mut cb };
        let answer = c.should_rate_limit(r.clone()).await.expect("answer");
        if answer.overall_code == Code::Ok as i32 {
            ok[i % 2] += 1;
        }
    }
    assert_eq!(ok[0] + ok[1], 30, "admitted by a and b: {ok:?}");
    assert!(ok[0] > 0 && ok[1] > 0, "both served: {ok:?}");
}

/// The last non-empty output line of a failed command, or why it could
/// not run.
fn run_quiet(cmd: &mut Command) -> Result<(), String> {
    match cmd.output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            Err(format!("{} ({})", last.trim(), out.status))
        }
        Err(e) => Err(format!("cannot run it: {e}")),
    }
}

const XDS_IMPORT: &str = "import grpc, envoy.service.ratelimit.v3.rls_pb2_grpc";

/// A python with `grpcio` and `xds-protos` importable: the system's, or a
/// venv cached as `<target>/rls-envoy-venv` (built once from the package
/// index, into a fresh directory moved into place when complete).
fn python_with_xds_protos() -> Result<PathBuf, String> {
    if run_quiet(Command::new("python3").args(["-c", XDS_IMPORT])).is_ok() {
        return Ok(PathBuf::from("python3"));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // <target>/<profile>/deps/rls-<hash>
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .ok_or("no target directory")?;
    let venv = target.join("rls-envoy-venv");
    let python = venv.join("bin").join("python");
    if run_quiet(Command::new(&python).args(["-c", XDS_IMPORT])).is_ok() {
        return Ok(python);
    }
    let building = venv.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let built = (|| {
        run_quiet(Command::new("python3").arg("-m").arg("venv").arg(&building))
            .map_err(|e| format!("needs python3 with its venv module (python3-venv): {e}"))?;
        run_quiet(Command::new(building.join("bin").join("pip")).args([
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "--retries",
            "1",
            "--timeout",
            "20",
            "grpcio",
            "xds-protos",
        ]))
        .map_err(|e| format!("needs the package index once (pip install grpcio xds-protos): {e}"))?;
        let _ = std::fs::remove_dir_all(&venv);
        std::fs::rename(&building, &venv).map_err(|e| format!("cannot move the venv into place: {e}"))?;
        // A venv's scripts name its directory: rebuild them after the move.
        run_quiet(
            Command::new("python3")
                .args(["-m", "venv", "--upgrade"])
                .arg(&venv),
        )?;
        run_quiet(Command::new(&python).args(["-c", XDS_IMPORT]))
    })();
    let _ = std::fs::remove_dir_all(&building);
    built.map(|()| python)
}

#[test]
fn envoys_generated_client_gets_the_answers_envoy_expects() {
    let test = "rls::envoys_generated_client_gets_the_answers_envoy_expects";
    let python = match python_with_xds_protos() {
        Ok(p) => p,
        Err(need) => {
            pressure_testkit::skip(test, "PRESSURE_REQUIRE_XDS_PROTOS", &need);
            return;
        }
    };
    let dir = TempDir::new("envoy");
    let file = dir.0.join("py.yaml");
    std::fs::write(
        &file,
        "domain: py\ndescriptors:\n  - key: k\n    rate_limit:\n      name: per_k\n      unit: minute\n      requests_per_unit: 3\n",
    )
    .expect("write");
    let rls = Rls::spawn(&dir.0, "py", &file, &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rls_envoy_client.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(rls.url.trim_start_matches("http://"))
        .arg("py")
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let calls: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(calls.len(), 8, "{stdout}");
    let overall: Vec<&str> = calls
        .iter()
        .map(|c| c["overall"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        overall,
        ["OK", "OK", "OK", "OVER_LIMIT", "OK", "OK", "OK", "OVER_LIMIT"],
        "{stdout}"
    );
    let first = &calls[0]["statuses"][0];
    assert_eq!(first["limit"], 3);
    assert_eq!(first["unit"], "MINUTE");
    assert_eq!(first["name"], "per_k");
    assert_eq!(first["remaining"], 2);
    assert_eq!(first["reset_s"], 60);
    assert_eq!(calls[0]["headers"]["ratelimit"], "\"requestsPerMinute\";r=2;t=60");
    assert_eq!(calls[3]["statuses"][0]["code"], "OVER_LIMIT");
    assert!(calls[3]["headers"]["retry-after"].is_string(), "{stdout}");
    // A descriptor's hits_addend (UInt64Value, field 3): 3 at once.
    assert_eq!(calls[4]["statuses"][0]["remaining"], 0);
    // The request's hits_addend (field 3).
    assert_eq!(calls[5]["statuses"][0]["remaining"], 1);
    // Envoy's override (field 2): 1 per second.
    assert_eq!(calls[6]["statuses"][0]["limit"], 1);
    assert_eq!(calls[6]["statuses"][0]["unit"], "SECOND");
}

/// A loopback port nothing listens on a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `GET url` on loopback with a bare HTTP/1.1 request: (status, body).
async fn get(url: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("http://");
    let (addr, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    let req = format!("GET /{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_serves_rls_on_its_own_broker_and_metrics() {
    let dir = TempDir::new("gateway");
    std::fs::write(dir.0.join("gw.yaml"), yaml("gw", 2)).expect("write");
    let (proxy, admin, rls) = (free_port(), free_port(), free_port());
    let config = serde_json::json!({ "gateway": {
        "listen": format!("127.0.0.1:{proxy}"),
        "admin": { "listen": format!("127.0.0.1:{admin}") },
        "upstreams": { "app": { "url": "http://127.0.0.1:9", "pathPrefix": "/" } },
        "rls": { "listen": format!("127.0.0.1:{rls}"), "files": ["gw.yaml"] }
    }});
    let path = dir.0.join("gateway.json");
    std::fs::write(&path, serde_json::to_vec(&config).expect("json")).expect("write");
    let log = dir.0.join("gateway.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .arg("gateway")
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn");
    let guard = KillOnDrop(&mut child);
    let url = format!("http://127.0.0.1:{rls}");
    let connected = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(c) = RateLimitClient::connect(url.clone()).await {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let Ok(mut c) = connected else {
        panic!(
            "gateway.rls not up within 20 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    let r = request("gw", "v");
    assert_eq!(admitted(&mut c, &r, 3).await, 2);
    let (status, metrics) = get(&format!("http://127.0.0.1:{admin}/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("pressure_rls_total_hits{domain=\"gw\",descriptor=\"k\"} 3"),
        "{metrics}"
    );
    let (_, stats) = get(&format!("http://127.0.0.1:{admin}/admin/pressure/stats")).await;
    assert!(
        stats.contains("rls:gw:k=v"),
        "the descriptor counts on the gateway's broker: {stats}"
    );
    drop(guard);
}

struct KillOnDrop<'a>(&'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
