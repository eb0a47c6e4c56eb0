//! [`RedisServer`]: one `redis-server` on a free loopback port.

use crate::process::{fresh_dir, StartError, Watched};
use crate::{require, resp, Program};
use std::net::TcpListener;
use std::path::PathBuf;

/// Attempts at finding a free port before giving up.
const PORT_ATTEMPTS: usize = 10;

/// A `redis-server` of the caller's own on `127.0.0.1:<free port>`, with no
/// persistence (`--save "" --appendonly no`) and its own temporary
/// directory. It is killed, and its directory removed, when the value is
/// dropped — or, for a server kept in a `static`, when the test process
/// ends in any way (see the crate docs).
///
/// Tests that stop, freeze or restart a server use one of their own;
/// tests that only need *a* Redis use the shared one ([`crate::redis_url`]).
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    extra: Vec<String>,
    tls: Option<TlsFiles>,
    process: Option<Watched>,
}

/// The PEM files of a TLS-only server ([`RedisServer::try_start_tls`]);
/// the test makes them (e.g. with `rcgen`) for `127.0.0.1`.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate chain.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
    /// The CA that signed it (Redis requires one even when it does not
    /// ask clients for certificates).
    pub ca: PathBuf,
}

/// How [`RedisServer::try_start_tls`]'s `Err` starts when the server has no TLS.
const NO_TLS: &str = "this redis-server has no TLS";

/// Why a failed TLS start (its message, with the server's log) shows a
/// redis-server without TLS, when it does; `None` for every other failure.
///
/// Only the server's own words count, never the argument list (which always
/// holds `--tls-port`):
/// * up to 7.0 the `tls-*` options exist only in a build with TLS, and
///   before 6.0 not at all: the config loader rejects the first of them,
///   `>>> 'tls-port "<port>"'` followed by `Bad directive or wrong number
///   of arguments`. (A build with TLS knows `tls-port`; it rejects another
///   option it does not know in the same words, which is not this case.)
/// * from 7.2, built without TLS or with TLS as a module not loaded, the
///   options are known and the start ends with `Failed finding TLS
///   support.`
fn tls_missing(failure: &str) -> Option<&'static str> {
    if failure.contains(">>> 'tls-port ") && failure.contains("Bad directive or wrong number of arguments") {
        Some("its config loader does not know `tls-port` (built without TLS, or older than 6.0)")
    } else if failure.contains("Failed finding TLS support") {
        Some("it says \"Failed finding TLS support\" (built without TLS, or its TLS module not loaded)")
    } else {
        None
    }
}

/// Ports that were free a moment ago, all distinct (each listener is held
/// until every port is chosen).
pub(crate) fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers.
    ///
    /// # Panics
    /// With one line naming the package to install when `redis-server` is
    /// not on `PATH`, or with the server's log when it does not start.
    #[track_caller]
    pub fn start() -> Self {
        crate::or_panic(Self::try_start())
    }

    /// [`start`](Self::start), with the reason as one line instead of a panic.
    pub fn try_start() -> Result<Self, String> {
        Self::try_start_with(&[])
    }

    /// Starts a server that speaks TLS only (`--port 0 --tls-port <free
    /// port>`, clients not asked for certificates) with `files`; its
    /// [`url`](Self::url) is `rediss://127.0.0.1:<port>`.
    /// [`answers`](Self::answers) does not work on it (plain `PING`).
    ///
    /// An `Err` that starts with `this redis-server has no TLS` means just
    /// that: the server refused to start in words only a build without TLS
    /// writes (up to 7.0: its config loader rejects `tls-port`; from 7.2:
    /// "Failed finding TLS support"), never because the argument list
    /// mentions TLS. Every other `Err` is a failure to start, to be
    /// reported as one.
    pub fn try_start_tls(files: &TlsFiles) -> Result<Self, String> {
        require(Program::Server)?;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_ports(1).map_err(|e| format!("no free loopback port: {e}"))?[0];
            let mut server = Self {
                port,
                extra: Vec::new(),
                tls: Some(files.clone()),
                process: None,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(StartError::PortTaken) => continue,
                Err(StartError::Failed(e)) => {
                    return Err(match tls_missing(&e) {
                        Some(why) => format!("{NO_TLS}: {why}"),
                        None => e,
                    })
                }
            }
        }
        Err(format!(
            "redis-server: no free port after {PORT_ATTEMPTS} attempts"
        ))
    }

    /// Starts a server with `extra` arguments (e.g. `--cluster-enabled yes`),
    /// retrying on another port when the chosen one is taken meanwhile.
    pub(crate) fn try_start_with(extra: &[String]) -> Result<Self, String> {
        require(Program::Server)?;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_ports(1).map_err(|e| format!("no free loopback port: {e}"))?[0];
            match Self::try_start_on(port, extra) {
                Ok(server) => return Ok(server),
                Err(StartError::PortTaken) => continue,
                Err(StartError::Failed(e)) => return Err(e),
            }
        }
        Err(format!(
            "redis-server: no free port after {PORT_ATTEMPTS} attempts"
        ))
    }

    /// Starts a server on `port` with `extra` arguments.
    pub(crate) fn try_start_on(port: u16, extra: &[String]) -> Result<Self, StartError> {
        let mut server = Self {
            port,
            extra: extra.to_vec(),
            tls: None,
            process: None,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), StartError> {
        let dir = fresh_dir().map_err(|e| StartError::Failed(format!("temp dir: {e}")))?;
        let mut args: Vec<String> = [
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            "",
            "--dir",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.push(dir.to_string_lossy().into_owned());
        if let Some(tls) = &self.tls {
            // Later arguments win: the plain port is switched off.
            for (flag, value) in [
                ("--port", "0".to_owned()),
                ("--tls-port", self.port.to_string()),
                ("--tls-cert-file", tls.cert.to_string_lossy().into_owned()),
                ("--tls-key-file", tls.key.to_string_lossy().into_owned()),
                ("--tls-ca-cert-file", tls.ca.to_string_lossy().into_owned()),
                ("--tls-auth-clients", "no".to_owned()),
            ] {
                args.push(flag.to_owned());
                args.push(value);
            }
        }
        args.extend(self.extra.iter().cloned());
        match Watched::start("redis-server", &args, &dir) {
            Ok(p) => {
                self.process = Some(p);
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` for a TLS server).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The server's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Watched::pid)
    }

    /// Whether the server answers `PING`.
    pub fn answers(&self) -> bool {
        resp::pings(self.port)
    }

    /// The last lines the server logged (for a test's failure message).
    pub fn log_tail(&self) -> String {
        self.process.as_ref().map(Watched::log_tail).unwrap_or_default()
    }

    /// Kills the server (`SIGKILL`): every connection drops at once. Returns
    /// when it is gone.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop();
        }
    }

    /// Starts it again on the same port, empty (it keeps nothing on disk).
    ///
    /// # Panics
    /// When it does not come back (e.g. the port was taken meanwhile).
    #[track_caller]
    pub fn restart(&mut self) {
        self.stop();
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match self.spawn() {
                Ok(()) => return,
                Err(StartError::PortTaken) => {
                    last = format!("port {} is taken", self.port);
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(StartError::Failed(e)) => {
                    last = e;
                    break;
                }
            }
        }
        panic!("redis-server did not restart on port {}: {last}", self.port);
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the server: it accepts no
    /// more work but keeps its sockets, like a server stalled on a slow disk.
    pub fn pause(&self, paused: bool) {
        if let Some(p) = &self.process {
            p.signal_pause(paused);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of a failure message: the argument list, as `Watched` writes it.
    const ARGS: &str = "redis-server --port 0 --bind 127.0.0.1 --dir /tmp/d --port 0 --tls-port 45678 \
                        --tls-cert-file /tmp/s/redis.crt --tls-key-file /tmp/s/redis.key \
                        --tls-ca-cert-file /tmp/s/redis-ca.pem --tls-auth-clients no exited with status 1";

    #[test]
    fn only_a_tls_less_servers_own_words_mean_no_tls() {
        // Redis 7.0.15 built with BUILD_TLS=no (its stderr, verbatim).
        let v70 = format!(
            "{ARGS}; its log:  | *** FATAL CONFIG FILE ERROR (Redis 7.0.15) *** | Reading the \
             configuration file, at line 10 | >>> 'tls-port \"45678\"' | Bad directive or wrong \
             number of arguments"
        );
        assert!(tls_missing(&v70).is_some(), "{v70}");
        // Redis 7.2 built with BUILD_TLS=no.
        let v72 = format!(
            "{ARGS}; its log: 1:C 01 Dec 2026 20:46:07.942 # Configuration loaded | 1:M 01 Dec \
             2026 20:46:07.950 # Failed finding TLS support."
        );
        assert!(tls_missing(&v72).is_some(), "{v72}");

        // A server with TLS that fails for another reason: a failure.
        for log in [
            // Redis 7.0.15 with TLS, a bad certificate (verbatim).
            "1:M 01 Dec 2026 20:46:07.942 # Failed to load certificate: /tmp/s/redis.crt: \
             error:0480006C:PEM routines::no start line | 1:M 01 Dec 2026 20:46:07.955 # \
             Failed to configure TLS. Check logs for more info.",
            // Redis 7.0.15 with TLS, an option it does not know.
            "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) *** | Reading the configuration file, at \
             line 3 | >>> 'tls-bogus \"1\"' | Bad directive or wrong number of arguments",
            "1:M 01 Dec 2026 20:46:07.955 # Failed listening on port 45678 (TLS), aborting.",
            "",
        ] {
            let failure = format!("{ARGS}; its log: {log}");
            assert_eq!(tls_missing(&failure), None, "{failure}");
        }
        assert_eq!(tls_missing("redis-server was not ready within 30 s"), None);
    }
}
