//! # pressure-testkit
//!
//! Test support (a dev-dependency only): the Redis servers the workspace's
//! tests need, started by the tests themselves so that `cargo test
//! --workspace` needs nothing running beforehand — only `redis-server` (and
//! `redis-cli`, which comes with it) on `PATH`.
//!
//! * [`redis_url`]: a `redis-server` shared by the whole test binary,
//!   started on first use on a free loopback port.
//! * [`cluster_nodes`]: a 3-master Redis Cluster shared by the whole test
//!   binary, likewise.
//! * [`RedisServer`] / [`RedisCluster`]: servers of a test's own, to kill,
//!   freeze or restart.
//! * [`dev_dependency_library`]: a `cdylib` dev-dependency as this build
//!   made it (the bindings' tests load them).
//! * [`skip`]: how a test that cannot run here says so — one line on stderr
//!   that shows on a pass, appended to `PRESSURE_SKIP_LOG`, and a failure
//!   when the test's `PRESSURE_REQUIRE_*` variable is `1`.
//!
//! `PRESSURE_REDIS_URL` (a URL) and `PRESSURE_REDIS_CLUSTER` (comma-separated
//! node URLs) point the tests at existing servers instead; nothing is
//! started then.
//!
//! ## Lifetime
//!
//! Every server runs under a small `sh` watchdog whose stdin is a pipe from
//! the test process; when that pipe closes the watchdog kills the server
//! (`SIGKILL`) and removes its directory. A server of a test's own closes
//! the pipe when dropped (also while a panic unwinds); a shared one lives in
//! a `static`, which Rust never drops, and goes when the kernel closes the
//! pipe at process exit — normal end, `panic = "abort"`, `SIGKILL` alike.
//! No exit hook, no polling, no `unsafe`.
//!
//! ## Failure
//!
//! Without `redis-server` on `PATH`, every test that asks for a server fails
//! at once with one line naming the package to install.

#![warn(unreachable_pub)]

mod built;
mod cluster;
mod machine;
mod process;
mod resp;
mod server;
mod skip;

pub use built::dev_dependency_library;
pub use cluster::RedisCluster;
pub use machine::machine;
pub use server::{RedisServer, TlsFiles};
pub use skip::skip;

use std::sync::OnceLock;

/// The URL of the Redis the tests use: `PRESSURE_REDIS_URL` when set,
/// otherwise the test binary's shared `redis-server` (started now if this is
/// the first call).
///
/// # Panics
/// With one line naming the package to install when the server cannot be
/// started because `redis-server` is missing, or with the reason it did not
/// start.
#[track_caller]
pub fn redis_url() -> String {
    if let Some(url) = env_var("PRESSURE_REDIS_URL") {
        return url;
    }
    static SHARED: OnceLock<Result<RedisServer, String>> = OnceLock::new();
    match SHARED.get_or_init(RedisServer::try_start) {
        Ok(server) => server.url(),
        Err(e) => panic!("{e}"),
    }
}

/// The node URLs of the Redis Cluster the tests use: `PRESSURE_REDIS_CLUSTER`
/// (comma-separated) when set, otherwise the test binary's shared 3-master
/// cluster (started now if this is the first call).
///
/// # Panics
/// Like [`redis_url`]; also when `redis-cli` is missing.
#[track_caller]
pub fn cluster_nodes() -> Vec<String> {
    if let Some(nodes) = env_var("PRESSURE_REDIS_CLUSTER") {
        return nodes
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
    }
    static SHARED: OnceLock<Result<RedisCluster, String>> = OnceLock::new();
    match SHARED.get_or_init(RedisCluster::try_start) {
        Ok(cluster) => cluster.urls(),
        Err(e) => panic!("{e}"),
    }
}

/// The value, or a panic with the one-line reason, at the caller's line.
#[track_caller]
pub(crate) fn or_panic<T>(result: Result<T, String>) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// A non-empty environment variable.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The programs the testkit runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Program {
    Server,
    Cli,
}

/// The major version of `program`, or the one-line reason it cannot run
/// (checked once per process).
pub(crate) fn require(program: Program) -> Result<u32, String> {
    static SERVER: OnceLock<Result<u32, String>> = OnceLock::new();
    static CLI: OnceLock<Result<u32, String>> = OnceLock::new();
    let (cell, name, instead) = match program {
        Program::Server => (
            &SERVER,
            "redis-server",
            "PRESSURE_REDIS_URL / PRESSURE_REDIS_CLUSTER",
        ),
        Program::Cli => (&CLI, "redis-cli", "PRESSURE_REDIS_CLUSTER"),
    };
    cell.get_or_init(|| version_of(name, instead)).clone()
}

fn version_of(name: &str, instead: &str) -> Result<u32, String> {
    let missing = || {
        format!(
            "{name} is not on PATH: install the `redis-server` package (Debian/Ubuntu: \
             `sudo apt-get install redis-server`, which brings redis-cli too; macOS: \
             `brew install redis`), or set {instead} to a running Redis"
        )
    };
    let out = match std::process::Command::new(name).arg("--version").output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
        Err(e) => return Err(format!("{name} --version: {e}")),
    };
    if !out.status.success() {
        return Err(format!("{name} --version failed ({})", out.status));
    }
    // `Redis server v=7.0.15 sha=…` or `redis-cli 7.0.15`.
    let text = String::from_utf8_lossy(&out.stdout);
    let major = text
        .split_whitespace()
        .map(|w| w.trim_start_matches("v="))
        .find_map(|w| {
            w.split('.')
                .next()?
                .parse::<u32>()
                .ok()
                .filter(|_| w.contains('.'))
        });
    major.ok_or_else(|| format!("{name} --version: no version in {:?}", text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_server_answers_and_is_gone_after_drop() {
        let mut s = RedisServer::start();
        assert!(s.answers());
        let pid = s.pid().expect("running");
        let port = s.port();
        s.pause(true);
        assert!(!s.answers(), "a frozen server does not answer");
        s.pause(false);
        assert!(s.answers());
        s.restart();
        assert_eq!(s.port(), port);
        assert_ne!(s.pid(), Some(pid), "a new process");
        assert!(s.answers());
        drop(s);
        assert!(!resp::pings(port), "nothing answers on {port} after drop");
    }

    #[test]
    fn the_shared_server_is_started_once() {
        if env_var("PRESSURE_REDIS_URL").is_some() {
            crate::skip(
                "the_shared_server_is_started_once",
                "PRESSURE_REQUIRE_OWN_SERVERS",
                "PRESSURE_REDIS_URL points the tests at a server of its own",
            );
            return;
        }
        let urls: Vec<String> = (0..4)
            .map(|_| std::thread::spawn(redis_url))
            .map(|t| t.join().expect("no panic"))
            .collect();
        assert!(urls.windows(2).all(|w| w[0] == w[1]), "{urls:?}");
        let port: u16 = urls[0]
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        assert!(resp::pings(port));
    }

    #[test]
    fn the_cluster_is_ok_on_every_node() {
        if env_var("PRESSURE_REDIS_CLUSTER").is_some() {
            crate::skip(
                "the_cluster_is_ok_on_every_node",
                "PRESSURE_REQUIRE_OWN_SERVERS",
                "PRESSURE_REDIS_CLUSTER points the tests at a cluster of its own",
            );
            return;
        }
        let nodes = cluster_nodes();
        assert_eq!(nodes.len(), 3);
        for n in &nodes {
            let port: u16 = n.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
            assert_eq!(cluster::node_ok(port, 3), Ok(()), "{n}");
        }
    }

    #[test]
    fn clusters_of_one_and_two_masters_hold_every_slot() {
        for masters in [1, 2] {
            let cluster = RedisCluster::try_start_masters(masters).expect("starts");
            let urls = cluster.urls();
            assert_eq!(urls.len(), masters);
            for n in &urls {
                let port: u16 = n.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
                assert_eq!(cluster::node_ok(port, masters), Ok(()), "{n}");
            }
        }
        assert!(RedisCluster::try_start_masters(0).is_err());
    }

    #[test]
    fn a_missing_program_is_named_with_its_package_in_one_line() {
        let e = version_of("pressure-testkit-no-such-program", "PRESSURE_REDIS_URL").unwrap_err();
        assert!(e.contains("apt-get install redis-server"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
