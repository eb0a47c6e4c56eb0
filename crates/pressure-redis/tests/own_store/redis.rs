//! A `redis-server` of the test's own on a loopback port chosen before it
//! starts, so a backend can be pointed at it while nothing listens yet.
//! Killed (and its directory removed) on drop.

#![allow(dead_code, unreachable_pub)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A free loopback port (nothing listens on it when this returns).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// An owned redis-server process.
pub struct OwnRedis {
    /// The loopback port it listens on.
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

impl OwnRedis {
    /// Starts a server on `port` with `extra` arguments and waits until it
    /// accepts connections.
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("pressure-own-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        let s = Self { port, dir, child };
        for _ in 0..300 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server on port {port} did not start");
    }

    /// Starts a server on a free port.
    pub fn start() -> Self {
        Self::start_on(free_port(), &[])
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A plain connection for assertions.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("connects")
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
