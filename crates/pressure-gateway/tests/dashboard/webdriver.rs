//! A headless Chromium driven over the W3C WebDriver HTTP protocol: finds
//! `chromium` and `chromedriver`, starts chromedriver in its own process
//! group on a port it picks, opens one session with a temporary profile,
//! and speaks the five commands the dashboard test needs (navigate,
//! execute script, screenshot, delete session). Dropping a [`Driver`] ends
//! the session's processes (the whole group) and removes the profile.

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Longest wait for one WebDriver command (a session start included).
const COMMAND_BOUND: Duration = Duration::from_secs(60);

/// The browser and its driver, as found on this machine.
#[derive(Debug, Clone)]
pub(crate) struct Browser {
    chromium: PathBuf,
    chromedriver: PathBuf,
}

impl Browser {
    /// `PRESSURE_CHROMIUM` / `PRESSURE_CHROMEDRIVER` (when set, the only
    /// candidates), else the first of the usual names on `PATH`; `Err` says
    /// what is missing.
    pub(crate) fn find() -> Result<Self, String> {
        let chromium = from_env_or_path(
            "PRESSURE_CHROMIUM",
            &[
                "chromium",
                "chromium-browser",
                "google-chrome",
                "google-chrome-stable",
            ],
        )
        .ok_or(
            "no chromium (PRESSURE_CHROMIUM, or on PATH; Debian: apt-get install chromium chromium-driver)",
        )?;
        let chromedriver = from_env_or_path("PRESSURE_CHROMEDRIVER", &["chromedriver"]).ok_or(
            "no chromedriver (PRESSURE_CHROMEDRIVER, or on PATH; Debian: apt-get install chromium-driver)",
        )?;
        Ok(Self {
            chromium,
            chromedriver,
        })
    }

    /// Starts chromedriver and a headless session of `width` × `height`.
    pub(crate) async fn start(&self, width: u32, height: u32) -> Driver {
        let profile = tempfile::Builder::new()
            .prefix("pressure-dashboard-chromium-")
            .tempdir()
            .expect("temporary user-data-dir");
        let child = Command::new(&self.chromedriver)
            .arg("--port=0")
            .arg("--log-level=WARNING")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.chromedriver.display()));
        let pgid = child.id().expect("chromedriver pid");
        let mut driver = Driver {
            base: String::new(),
            session: String::new(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            child,
            pgid,
            _profile: profile,
        };
        let port = tokio::time::timeout(Duration::from_secs(20), driver_port(&mut driver.child))
            .await
            .expect("chromedriver says its port within 20 s");
        driver.base = format!("http://127.0.0.1:{port}");
        let caps = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": self.chromium,
                    "args": [
                        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                        "--disable-background-networking", "--disable-breakpad", "--disable-crash-reporter", "--hide-scrollbars", "--force-device-scale-factor=1",
                        format!("--window-size={width},{height}"),
                        format!("--user-data-dir={}", driver._profile.path().display()),
                    ],
                },
            } }
        });
        let value = driver.command(Method::POST, "/session", Some(caps)).await;
        driver.session = value["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {value}"))
            .to_owned();
        driver
    }
}

fn from_env_or_path(var: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        let p = PathBuf::from(p);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Reads chromedriver's stdout up to "... started successfully on port N.".
async fn driver_port(child: &mut Child) -> u16 {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await.expect("chromedriver stdout") {
        if let Some(rest) = line.split("on port ").nth(1) {
            if line.contains("successfully") {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                return digits.parse().unwrap_or_else(|_| panic!("port in {line:?}"));
            }
        }
    }
    panic!("chromedriver exited before saying its port");
}

/// A chromedriver process with one browser session.
pub(crate) struct Driver {
    base: String,
    session: String,
    client: Client<HttpConnector, Full<Bytes>>,
    child: Child,
    pgid: u32,
    _profile: tempfile::TempDir,
}

impl Driver {
    /// Sends one command; the `value` of its answer. Panics on a WebDriver
    /// error (with its message).
    async fn command(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let uri = format!("{}{path}", self.base);
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let req = Request::builder()
            .method(method)
            .uri(&uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .expect("webdriver request");
        let resp = tokio::time::timeout(COMMAND_BOUND, self.client.request(req))
            .await
            .unwrap_or_else(|_| panic!("{uri}: no answer within {COMMAND_BOUND:?}"))
            .unwrap_or_else(|e| panic!("{uri}: {e}"));
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .expect("webdriver body")
            .to_bytes();
        let value: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{uri}: {e}: {}", String::from_utf8_lossy(&bytes)));
        assert!(status.is_success(), "{uri}: {status} {value}");
        value["value"].clone()
    }

    fn session_path(&self, tail: &str) -> String {
        format!("/session/{}{tail}", self.session)
    }

    /// Loads `url` (waits for the page's load event).
    pub(crate) async fn goto(&self, url: &str) {
        self.command(
            Method::POST,
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        )
        .await;
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.command(
            Method::POST,
            &self.session_path("/execute/sync"),
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// A PNG of the viewport.
    pub(crate) async fn screenshot(&self) -> Vec<u8> {
        let value = self
            .command(Method::GET, &self.session_path("/screenshot"), None)
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(value.as_str().expect("base64 screenshot"))
            .expect("valid base64")
    }

    /// Ends the session (the browser exits) and chromedriver.
    pub(crate) async fn quit(mut self) {
        let path = self.session_path("");
        let _ =
            tokio::time::timeout(Duration::from_secs(10), self.command(Method::DELETE, &path, None)).await;
        self.kill_group();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }

    /// `kill -KILL -<pgid>`: chromedriver and every browser process it started.
    fn kill_group(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .arg(format!("-{}", self.pgid))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.start_kill();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.kill_group();
    }
}
