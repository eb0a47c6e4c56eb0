//! Real nginx and Caddy (Debian packages `nginx`, `caddy`) as child
//! processes on free loopback ports, each with a config written to a temp
//! dir (logs there too) that asks the gateway's `/v1/forward-auth` before
//! proxying to a test upstream; and a raw HTTP/1.1 client that sends a
//! path exactly as written (`/a/../x`, `//x`, `%2e`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Which proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// nginx with `auth_request` and the `403` → `429` recipe.
    Nginx,
    /// Caddy with `forward_auth`.
    Caddy,
}

impl Kind {
    /// The binary.
    pub(crate) fn binary(self) -> &'static str {
        match self {
            Kind::Nginx => "nginx",
            Kind::Caddy => "caddy",
        }
    }

    /// The variable that makes a missing binary a failure.
    pub(crate) fn require_env(self) -> &'static str {
        match self {
            Kind::Nginx => "PRESSURE_REQUIRE_NGINX",
            Kind::Caddy => "PRESSURE_REQUIRE_CADDY",
        }
    }
}

/// `binary` on `PATH` (or in the sbin directories nginx lives in).
pub(crate) fn find(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(binary))
        .find(|p| p.is_file())
}

/// A free loopback port (bound and released: a short race, fine in tests).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A running proxy, killed when stopped or dropped.
pub(crate) struct FrontProxy {
    pub(crate) port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

/// nginx: `auth_request` to the decision listener with the original
/// method and URI, the service token, and `X-Pressure-Deny-Status: 403`;
/// a `403` becomes a `429` with the `Retry-After` the subrequest answered.
/// One process (`master_process off`): killing the child kills nginx, where
/// a master killed outright left its worker running, orphaned, listening.
fn nginx_conf(dir: &Path, port: u16, decisions: SocketAddr, upstream: SocketAddr, token: &str) -> String {
    let d = dir.display();
    format!(
        r#"master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            auth_request /_pressure;
            auth_request_set $pressure_retry_after $upstream_http_retry_after;
            auth_request_set $pressure_ratelimit $upstream_http_ratelimit;
            auth_request_set $pressure_ratelimit_policy $upstream_http_ratelimit_policy;
            add_header RateLimit $pressure_ratelimit;
            add_header RateLimit-Policy $pressure_ratelimit_policy;
            error_page 403 = @pressure_limited;
            proxy_pass http://{upstream};
        }}
        location = /_pressure {{
            internal;
            proxy_pass http://{decisions}/v1/forward-auth;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Pressure-Token "{token}";
            proxy_set_header X-Pressure-Deny-Status 403;
        }}
        location @pressure_limited {{
            add_header Retry-After $pressure_retry_after always;
            add_header RateLimit $pressure_ratelimit always;
            add_header RateLimit-Policy $pressure_ratelimit_policy always;
            return 429;
        }}
    }}
}}
"#
    )
}

/// Caddy: `forward_auth` to the decision listener (it sends
/// `X-Forwarded-Method` / `X-Forwarded-Uri`), then `reverse_proxy`.
fn caddyfile(port: u16, decisions: SocketAddr, upstream: SocketAddr, token: &str) -> String {
    format!(
        r#"{{
	admin off
	auto_https off
}}

http://127.0.0.1:{port} {{
	forward_auth {decisions} {{
		uri /v1/forward-auth
		header_up X-Pressure-Token "{token}"
	}}
	reverse_proxy {upstream}
}}
"#
    )
}

impl FrontProxy {
    /// Starts `kind` (found at `binary`) in front of `upstream`, asking
    /// `decisions` with `token`; waits until it accepts connections.
    pub(crate) async fn start(
        kind: Kind,
        binary: &Path,
        decisions: SocketAddr,
        upstream: SocketAddr,
        token: &str,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("stderr.log")).expect("log file");
        let mut cmd = Command::new(binary);
        match kind {
            Kind::Nginx => {
                let conf = dir.path().join("nginx.conf");
                std::fs::write(&conf, nginx_conf(dir.path(), port, decisions, upstream, token))
                    .expect("conf");
                cmd.arg("-p")
                    .arg(dir.path())
                    .arg("-e")
                    .arg(dir.path().join("error.log"))
                    .arg("-c")
                    .arg(&conf)
                    .args(["-g", "daemon off;"]);
            }
            Kind::Caddy => {
                let conf = dir.path().join("Caddyfile");
                std::fs::write(&conf, caddyfile(port, decisions, upstream, token)).expect("Caddyfile");
                cmd.args(["run", "--adapter", "caddyfile", "--config"])
                    .arg(&conf)
                    .env("HOME", dir.path())
                    .env("XDG_DATA_HOME", dir.path().join("data"))
                    .env("XDG_CONFIG_HOME", dir.path().join("config"));
            }
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut proxy = Self { port, child, dir };
        proxy.wait_ready().await;
        proxy
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the proxy exited ({status}) before listening:\n{}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "the proxy never listened:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its stderr and error log, for a failure message.
    pub(crate) fn logs(&self) -> String {
        ["stderr.log", "error.log"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.dir.path().join(f)).ok())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `GET path` (sent exactly as written) with `headers`.
    pub(crate) async fn get(&self, path: &str, headers: &[(&str, &str)]) -> RawReply {
        raw_get(self.port, path, headers).await
    }

    /// Kills it and waits for the exit.
    pub(crate) async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A response read off the wire.
#[derive(Debug)]
pub(crate) struct RawReply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl RawReply {
    /// The first value of header `name` (case-insensitive).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One `GET` over a fresh connection (`Connection: close`), read to EOF.
pub(crate) async fn raw_get(port: u16, path: &str, headers: &[(&str, &str)]) -> RawReply {
    let mut tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect proxy");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut raw))
        .await
        .expect("the proxy answers within 10 s")
        .expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    RawReply {
        status,
        headers,
        body: body.to_owned(),
    }
}
