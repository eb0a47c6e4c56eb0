//! A `redis-server` of the test's own, on a free loopback port, that the
//! test may stop, pause and restart. Killed and cleaned up on drop.

#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An owned redis-server process.
pub struct RedisServer {
    /// The loopback port it listens on.
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let dir = std::env::temp_dir().join(format!("pressure-redis-test-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut s = Self {
            port,
            dir,
            child: None,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        self.child = Some(child);
        self.wait_ready();
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether the server answers PING.
    pub fn answers(&self) -> bool {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(100)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    fn wait_ready(&self) {
        for _ in 0..200 {
            if self.answers() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    /// Kills the server (SIGKILL): every connection drops at once.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port (empty: it keeps nothing on disk).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the server: it accepts no more
    /// work but keeps its sockets, like a server stalled on a slow disk.
    pub fn pause(&self, paused: bool) {
        if let Some(c) = &self.child {
            let sig = if paused { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").arg(sig).arg(c.id().to_string()).status();
        }
    }

    /// A plain connection for assertions.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connects")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.pause(false);
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
