//! The container image (`deploy/Containerfile`, `scripts/build-image.sh`)
//! serves: built from a statically linked `pressure` (dev profile here, so
//! the test's build stays a few minutes), started with `podman run` on a
//! read-only root as its non-root user, it proxies a request to an upstream
//! this test serves on the host (`--network host`, loopback only), refuses
//! past its limit, answers `/healthz`, `/readyz` and `/metrics` on its admin
//! listener, and stops cleanly on `SIGTERM` (`podman stop`). The container
//! is removed on every path, a failing assertion too.
//!
//! `PRESSURE_IMAGE` names a prebuilt image to test instead of building one.
//! Where podman cannot run a container (`scripts/container-probe.sh` says
//! why), the test skips through `PRESSURE_REQUIRE_CONTAINERS`; `.ci/run`
//! sets that variable to 1 only on a machine where the probe succeeds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use tokio::time::Instant;

const TEST: &str = "container::the_image_proxies_a_request_and_answers_its_probes";
const REQUIRE: &str = "PRESSURE_REQUIRE_CONTAINERS";
/// Requests a minute the test's route admits; the next one is a 429.
const LIMIT: u64 = 3;

/// The repository's root (this crate is `crates/pressure-cli`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the repository root")
        .to_path_buf()
}

/// `cmd`'s output; panics when it cannot be started at all.
fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// Podman with the global arguments the probe found to work (`--runtime
/// runc` on a host crun refuses).
struct Podman {
    global: Vec<String>,
}

impl Podman {
    fn cmd(&self) -> Command {
        let mut cmd = Command::new("podman");
        cmd.args(&self.global);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        output(self.cmd().args(args))
    }
}

/// A started container, removed (killed first) on drop.
struct Container<'a> {
    podman: &'a Podman,
    name: String,
}

impl Container<'_> {
    fn logs(&self) -> String {
        let out = self.podman.run(&["logs", &self.name]);
        let all = format!("{}\n{}", text(&out.stdout), text(&out.stderr));
        let lines: Vec<&str> = all.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn running(&self) -> bool {
        let out = self
            .podman
            .run(&["inspect", "--format", "{{.State.Running}}", &self.name]);
        text(&out.stdout) == "true"
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self.podman.run(&["rm", "-f", "-t", "0", &self.name]);
    }
}

/// The image under test; removed on drop when this test built it (a
/// `PRESSURE_IMAGE` is kept).
struct Image<'a> {
    podman: &'a Podman,
    name: String,
    built: bool,
}

impl Drop for Image<'_> {
    fn drop(&mut self) {
        if self.built {
            let _ = self.podman.run(&["rmi", "-f", &self.name]);
        }
    }
}

/// A loopback port nothing listens on a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// An upstream on a free loopback port answering every path with the path.
async fn upstream() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the upstream");
    let port = listener.local_addr().expect("upstream address").port();
    let app = axum::Router::new()
        .fallback(|uri: axum::http::Uri| async move { format!("upstream saw {}", uri.path()) });
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// The gateway's config: the memory backend, one upstream (`localhost`),
/// a route limited to `LIMIT` a minute.
fn config(proxy: u16, admin: u16, upstream: u16) -> serde_json::Value {
    serde_json::json!({"gateway": {
        "listen": format!("127.0.0.1:{proxy}"),
        "admin": {"listen": format!("127.0.0.1:{admin}")},
        "backend": {"type": "memory"},
        "shutdownGraceMs": 2000,
        // By name: the static glibc resolves it from the container's
        // /etc/hosts without any libnss_*.so.
        "upstreams": {"api": {"url": format!("http://localhost:{upstream}"), "pathPrefix": "/"}},
        "pressure": {
            "enabled": true,
            "perRoute": [{"resource": "gateway:route:limited", "pathPrefix": "/limited",
                          "limits": {"requestsPerMinute": LIMIT}}],
            "perTenant": {"enabled": false}
        }
    }})
}

/// The image to test: `PRESSURE_IMAGE`, or one built now by
/// `scripts/build-image.sh --profile dev` into this build's target dir.
fn image(podman: &Podman) -> Image<'_> {
    if let Some(name) = std::env::var("PRESSURE_IMAGE").ok().filter(|s| !s.is_empty()) {
        let out = podman.run(&["image", "exists", &name]);
        assert!(out.status.success(), "PRESSURE_IMAGE={name}: no such image");
        return Image {
            podman,
            name,
            built: false,
        };
    }
    let tag = format!("localhost/pressure:test-{}", std::process::id());
    // target/tmp's parent: the target dir this test was built in (the
    // static build goes to target/<triple>/debug beside it).
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target dir");
    let out = output(
        Command::new(repo_root().join("scripts/build-image.sh"))
            .args(["--profile", "dev", "--tag", &tag])
            .env("CARGO_TARGET_DIR", target)
            .env("CONTAINER_ENGINE", "podman")
            .env("PODMAN_ARGS", podman.global.join(" "))
            .current_dir(repo_root()),
    );
    assert!(
        out.status.success(),
        "scripts/build-image.sh failed:\n{}",
        text(&out.stderr)
    );
    Image {
        podman,
        name: tag,
        built: true,
    }
}

/// `GET url`: (status, body); (0, error) when nothing answers.
async fn get(client: &reqwest::Client, url: &str) -> (u16, String) {
    match client.get(url).send().await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_proxies_a_request_and_answers_its_probes() {
    let probe = output(&mut Command::new(repo_root().join("scripts/container-probe.sh")));
    if !probe.status.success() {
        pressure_testkit::skip(TEST, REQUIRE, &text(&probe.stderr));
        return;
    }
    let podman = Podman {
        global: text(&probe.stdout).split_whitespace().map(String::from).collect(),
    };
    let image = image(&podman);
    let image = image.name.as_str();

    // The image's own facts: a non-root user, the gateway by default.
    let out = podman.run(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}} {{.Size}}",
        image,
    ]);
    let facts = text(&out.stdout);
    let (user, size) = facts.split_once(' ').expect("user and size");
    assert_eq!(user, "65532:65532", "the image's user");
    let size: u64 = size.parse().expect("the image's size");
    eprintln!("{image}: {:.1} MB", size as f64 / 1e6);

    let upstream = upstream().await;
    let (proxy, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("temp dir");
    let config_path = dir.path().join("gateway.json");
    std::fs::write(
        &config_path,
        serde_json::to_vec_pretty(&config(proxy, admin, upstream)).unwrap(),
    )
    .expect("write the config");
    // Readable by the container's user 65532.
    std::fs::set_permissions(&config_path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod the config");

    let name = format!("pressure-test-{}-{proxy}", std::process::id());
    let mount = format!("{}:/etc/pressure/gateway.json:ro", config_path.display());
    let out = podman.run(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "host",
        "--read-only",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "-v",
        &mount,
        image,
    ]);
    let container = Container {
        podman: &podman,
        name,
    };
    assert!(out.status.success(), "podman run failed: {}", text(&out.stderr));

    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let admin_url = format!("http://127.0.0.1:{admin}");
    let proxy_url = format!("http://127.0.0.1:{proxy}");

    // Healthy within 30 s, or the container's log says why not.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if get(&client, &format!("{admin_url}/healthz")).await.0 == 200 {
            break;
        }
        assert!(container.running(), "the container exited:\n{}", container.logs());
        assert!(
            Instant::now() < deadline,
            "not healthy within 30 s:\n{}",
            container.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = get(&client, &format!("{admin_url}/readyz")).await;
    assert_eq!(status, 200, "/readyz: {body}");

    // Through the container to the host's upstream, and its limit.
    let (status, body) = get(&client, &format!("{proxy_url}/hello")).await;
    assert_eq!(
        (status, body.as_str()),
        (200, "upstream saw /hello"),
        "{}",
        container.logs()
    );
    for i in 0..LIMIT {
        let (status, body) = get(&client, &format!("{proxy_url}/limited/{i}")).await;
        assert_eq!(status, 200, "/limited/{i}: {body}");
    }
    let (status, _) = get(&client, &format!("{proxy_url}/limited/over")).await;
    assert_eq!(status, 429, "past the route's {LIMIT} a minute");

    let (status, metrics) = get(&client, &format!("{admin_url}/metrics")).await;
    assert_eq!(status, 200, "/metrics");
    assert!(metrics.contains("pressure_gateway_requests_total"), "{metrics}");

    // SIGTERM: the gateway drains (shutdownGraceMs 2000) and exits 0.
    let out = podman.run(&["stop", "-t", "10", &container.name]);
    assert!(out.status.success(), "podman stop: {}", text(&out.stderr));
    let out = podman.run(&["inspect", "--format", "{{.State.ExitCode}}", &container.name]);
    assert_eq!(
        text(&out.stdout),
        "0",
        "exit code after SIGTERM:\n{}",
        container.logs()
    );
    assert!(!container.running());
}
