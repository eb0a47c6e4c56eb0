//! A `pressure gateway` child process and a tiny upstream, for the
//! lifecycle tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// A temporary directory removed (with its contents) on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("pressure-lifecycle-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the temp dir");
        Self(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port that was free on loopback a moment ago, and not one this test
/// process was given before.
pub(crate) fn free_port() -> u16 {
    // The kernel may hand the same port out again once its listener is
    // closed: two calls of one test (the proxy's and the admin's port)
    // must never get the same one.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("local addr").port();
        let mut given = GIVEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// An upstream on `127.0.0.1:0`: `/hold` tells the test it arrived (see
/// [`Upstream::wait_held`]) and answers `released` only once the test
/// calls [`Upstream::release`]; anything else answers `ok` at once.
/// Aborted on drop.
pub(crate) struct Upstream {
    pub(crate) url: String,
    arrivals: tokio::sync::mpsc::UnboundedReceiver<()>,
    release: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    /// Waits (30 s at most, a bound on a hang) until one more `/hold`
    /// request has reached the upstream.
    pub(crate) async fn wait_held(&mut self) {
        tokio::time::timeout(Duration::from_secs(30), self.arrivals.recv())
            .await
            .expect("a /hold request reached the upstream within 30 s")
            .expect("the upstream is running");
    }

    /// Lets every `/hold` request, held now or arriving later, answer.
    pub(crate) fn release(&self) {
        self.release.send_replace(true);
    }
}

pub(crate) async fn upstream() -> Upstream {
    let (arrived, arrivals) = tokio::sync::mpsc::unbounded_channel();
    let (release, released) = tokio::sync::watch::channel(false);
    let handle = move |req: axum::extract::Request| {
        let (arrived, mut released) = (arrived.clone(), released.clone());
        async move {
            if req.uri().path() != "/hold" {
                return "ok".to_owned();
            }
            let _ = arrived.send(());
            let _ = released.wait_for(|r| *r).await;
            "released".to_owned()
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let app = axum::Router::new().fallback(handle);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Upstream {
        url,
        arrivals,
        release,
        task,
    }
}

/// What became of one new connection to a listener.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Dial {
    /// Nothing listens: the connection was refused.
    Refused,
    /// Connected, but the request got no answer (closed, reset or 5 s of
    /// silence).
    Unanswered,
    /// Connected and answered; the first bytes of the answer.
    Answered(String),
}

/// Opens a new connection to `127.0.0.1:port` and sends one `GET /` on it.
pub(crate) async fn dial(port: u16) -> Dial {
    use std::io::{Read, Write};
    tokio::task::spawn_blocking(move || {
        let mut s = match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Dial::Refused,
            // The kernel completed the handshake into the listener's backlog
            // and the listener closed before accepting it: a connection that
            // got no answer, as a close after `connect` would be.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Dial::Unanswered,
            Err(e) => panic!("connect to 127.0.0.1:{port}: {e}"),
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        if s.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").is_err() {
            return Dial::Unanswered;
        }
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(n) if n > 0 => Dial::Answered(String::from_utf8_lossy(&buf[..n]).into_owned()),
            _ => Dial::Unanswered,
        }
    })
    .await
    .expect("dial task")
}

/// A running `pressure gateway`, killed and reaped on drop.
pub(crate) struct Gateway {
    child: Child,
    config: PathBuf,
    log: PathBuf,
    pub(crate) proxy: String,
    pub(crate) admin: String,
    client: reqwest::Client,
}

impl Gateway {
    /// Writes `config` into `dir` and starts the binary on it with `args`.
    pub(crate) fn spawn(name: &str, dir: &Path, config: &serde_json::Value, args: &[&str]) -> Self {
        Self::spawn_with_fd_limit(name, dir, config, args, None)
    }

    /// Like [`spawn`](Self::spawn), under a hard `RLIMIT_NOFILE` of `nofile`
    /// (set by the shell before it execs the binary).
    pub(crate) fn spawn_with_fd_limit(
        name: &str,
        dir: &Path,
        config: &serde_json::Value,
        args: &[&str],
        nofile: Option<u32>,
    ) -> Self {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(config).expect("json")).expect("write config");
        let log = dir.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut command = match nofile {
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_pressure"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_pressure")),
        };
        let child = command
            .arg("gateway")
            .arg("--config")
            .arg(&path)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn the pressure binary");
        let addr = |key: &str| {
            let v = &config["gateway"];
            let a = if key == "admin" {
                &v["admin"]["listen"]
            } else {
                &v["listen"]
            };
            format!("http://{}", a.as_str().expect("listen address"))
        };
        Self {
            child,
            config: path,
            log,
            proxy: addr("listen"),
            admin: addr("admin"),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the gateway logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines the gateway logged.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    /// Replaces the config file at once (written beside it, then renamed
    /// over it), so a watcher never reads half a file.
    pub(crate) fn rewrite(&self, config: &serde_json::Value) {
        let next = self.config.with_extension("json.next");
        std::fs::write(&next, serde_json::to_vec_pretty(config).expect("json")).expect("write config");
        std::fs::rename(&next, &self.config).expect("replace config");
    }

    /// The log's lines that are JSON objects satisfying `pred`.
    pub(crate) fn log_json(&self, pred: impl Fn(&serde_json::Value) -> bool) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| pred(v))
            .collect()
    }

    /// The log's JSON lines whose `fields.message` satisfies `pred`.
    pub(crate) fn log_events(&self, pred: impl Fn(&str) -> bool) -> Vec<serde_json::Value> {
        self.log_json(|v| v["fields"]["message"].as_str().is_some_and(&pred))
    }

    /// Waits (30 s at most, a bound on a hang) until the log holds a JSON
    /// line satisfying `pred`; the first such line.
    pub(crate) async fn wait_json(
        &self,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(v) = self.log_json(&pred).into_iter().next() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} line within 30 s:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`wait_json`](Self::wait_json) for a line whose `fields.message`
    /// satisfies `pred`.
    pub(crate) async fn wait_event(&self, what: &str, pred: impl Fn(&str) -> bool) -> serde_json::Value {
        self.wait_json(what, |v| v["fields"]["message"].as_str().is_some_and(&pred))
            .await
    }

    /// The proxy listener's port.
    pub(crate) fn proxy_port(&self) -> u16 {
        self.proxy
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port in the proxy address")
    }

    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits (30 s at most, a bound on a hang) until `/readyz` answers 200.
    pub(crate) async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the gateway exited early ({status}):\n{}", self.log_tail());
            }
            if let Ok(r) = self.client.get(format!("{}/readyz", self.admin)).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "not ready within 30 s:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The exit code within `within`, `None` if it did not exit (or died by
    /// a signal).
    pub(crate) async fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Status and body of `GET path` on the proxy (0 when it failed).
    pub(crate) async fn get(&self, path: &str) -> (u16, String) {
        match self.client.get(format!("{}{path}", self.proxy)).send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        }
    }

    /// Status and body of `POST path` on the admin listener.
    pub(crate) async fn admin_post(&self, path: &str) -> (u16, String) {
        let r = self
            .client
            .post(format!("{}{path}", self.admin))
            .send()
            .await
            .expect("admin answers");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    /// Polls `GET path` on the admin listener until it answers `want` or
    /// `within` passes; the last status.
    pub(crate) async fn admin_get_until(&self, path: &str, want: u16, within: Duration) -> u16 {
        let deadline = Instant::now() + within;
        loop {
            let status = match self.client.get(format!("{}{path}", self.admin)).send().await {
                Ok(r) => r.status().as_u16(),
                Err(_) => 0,
            };
            if status == want || Instant::now() >= deadline {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The value of the unlabelled series `name` in `/metrics` (`None`
    /// when absent or the admin listener does not answer).
    #[allow(dead_code)] // the logging tests read it
    pub(crate) async fn metric(&self, name: &str) -> Option<f64> {
        let r = self
            .client
            .get(format!("{}/metrics", self.admin))
            .send()
            .await
            .ok()?;
        let text = r.text().await.ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// Waits (30 s at most, a bound on a hang) until `/metrics` holds `line`.
    pub(crate) async fn wait_metric(&self, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = self.client.get(format!("{}/metrics", self.admin)).send().await {
                if r.text().await.unwrap_or_default().lines().any(|l| l == line) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "`{line}` not in /metrics within 30 s:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `SIG<name>` to the gateway (with the system's `kill`).
pub(crate) fn send_signal(gw: &Gateway, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(gw.pid().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} failed");
}
