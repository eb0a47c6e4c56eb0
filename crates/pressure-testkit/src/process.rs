//! One `redis-server` child that cannot outlive the test process.
//!
//! The server runs under a tiny `sh` wrapper whose stdin is a pipe from the
//! test process. A watcher in the wrapper blocks reading that pipe; the
//! read ends only when the test process closes its end — on [`Watched::stop`],
//! on a normal exit, on a panic that aborts, on `SIGKILL` — and then kills
//! the server with `SIGKILL` and removes its directory. The kernel closes
//! the pipe however the test process ends, so no exit hook (which Rust does
//! not run for statics) and no `unsafe` (`prctl(PR_SET_PDEATHSIG)`) is
//! needed, and nothing is polled.
//!
//! The server logs to the wrapper's stdout; a reader thread keeps the last
//! lines (for error messages) and reports "ready" when the server says it
//! accepts connections, and the server's exit status when it ends.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The wrapper: `sh -c WRAPPER sh <dir> <program> <args…>`.
///
/// fd 3 keeps the lifeline (the test process's pipe) for the watcher only;
/// the server gets `/dev/null` as stdin and no fd 3. The wrapper's own lines
/// start with `@testkit `; everything else on its stdout is the server's log.
const WRAPPER: &str = r#"
dir=$1; shift
exec 3<&0 </dev/null
"$@" 3<&- 2>&1 &
pid=$!
( read -r _ <&3; kill -9 "$pid" 2>/dev/null ) &
watcher=$!
exec 3<&-
echo "@testkit pid $pid"
wait "$pid"
code=$?
kill "$watcher" 2>/dev/null
rm -rf -- "$dir"
echo "@testkit exit $code"
"#;

/// How long a server may take to say it is ready, on a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stop may take before the wrapper is killed outright.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Log lines kept for error messages.
const LOG_LINES: usize = 40;

/// What the reader thread saw on the wrapper's stdout.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// The server's pid.
    Pid(u32),
    /// The server logged "Ready to accept connections".
    Ready,
    /// The server ended with this status (137: killed by `SIGKILL`).
    Exit(i32),
}

/// Why a server did not start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// Its port was taken between choosing it and binding it: try another.
    PortTaken,
    /// Anything else, as one line.
    Failed(String),
}

/// A running server under the wrapper.
#[derive(Debug)]
pub(crate) struct Watched {
    wrapper: Child,
    /// The lifeline: dropping it kills the server.
    lifeline: Option<ChildStdin>,
    pid: u32,
    events: Mutex<Receiver<Event>>,
    log: Arc<Mutex<VecDeque<String>>>,
}

/// A fresh, empty directory for one server: `<tmp>/pressure-testkit-<pid>-<n>`.
pub(crate) fn fresh_dir() -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pressure-testkit-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

impl Watched {
    /// Starts `program args…` in `dir` under the wrapper and waits until it
    /// is ready. `dir` is removed when the server ends.
    pub(crate) fn start(program: &str, args: &[String], dir: &Path) -> Result<Self, StartError> {
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("sh")
            .arg(dir)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| StartError::Failed(format!("cannot run sh to start {program}: {e}")))?;
        let lifeline = wrapper.stdin.take();
        let stdout = wrapper.stdout.take();
        let log: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let (tx, rx) = mpsc::channel();
        if let Some(stdout) = stdout {
            let log = Arc::clone(&log);
            std::thread::Builder::new()
                .name(format!("testkit-{program}-log"))
                .spawn(move || read_output(stdout, &tx, &log))
                .map_err(|e| StartError::Failed(format!("cannot start a log reader: {e}")))?;
        }
        let mut w = Self {
            wrapper,
            lifeline,
            pid: 0,
            events: Mutex::new(rx),
            log,
        };
        // The pid line and the server's "ready" may come in either order.
        let mut ready = false;
        let failure = loop {
            match w.next_event(READY_TIMEOUT) {
                Some(Event::Pid(pid)) => w.pid = pid,
                Some(Event::Ready) => ready = true,
                Some(Event::Exit(code)) => break format!("exited with status {code}"),
                None => break format!("was not ready within {} s", READY_TIMEOUT.as_secs()),
            }
            if ready && w.pid != 0 {
                return Ok(w);
            }
        };
        w.stop();
        let log = w.log_tail();
        if log.contains("Address already in use") {
            return Err(StartError::PortTaken);
        }
        Err(StartError::Failed(format!(
            "{program} {} {failure}; its log: {}",
            args.join(" "),
            log.replace('\n', " | ")
        )))
    }

    fn next_event(&self, timeout: Duration) -> Option<Event> {
        let rx = self.events.lock().unwrap_or_else(|p| p.into_inner());
        // A timeout and a closed channel (the wrapper is gone) end the wait alike.
        rx.recv_timeout(timeout).ok()
    }

    /// The server's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The last lines the server logged.
    pub(crate) fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        Vec::from(log.clone()).join("\n")
    }

    /// Sends `SIGSTOP` (`paused`) or `SIGCONT` to the server.
    pub(crate) fn signal_pause(&self, paused: bool) {
        if self.pid != 0 {
            let sig = if paused { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill")
                .arg(sig)
                .arg(self.pid.to_string())
                .stderr(Stdio::null())
                .status();
            // A signal to a process running on another CPU lands a moment
            // later: wait (bounded) until the kernel shows the new state, so
            // a caller that pauses and then sends knows the server is frozen.
            for _ in 0..1_000 {
                if stopped(self.pid) == Some(paused) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }

    /// Kills the server (`SIGKILL`, every connection drops at once) and
    /// waits until it and its wrapper are gone and its directory removed.
    pub(crate) fn stop(&mut self) {
        let Some(lifeline) = self.lifeline.take() else {
            return;
        };
        drop(lifeline);
        // Wait for the wrapper's "exit" line (it comes after the cleanup).
        loop {
            match self.next_event(STOP_TIMEOUT) {
                Some(Event::Exit(_)) | None => break,
                Some(_) => {}
            }
        }
        // The wrapper ends right after that line; if it hangs, kill it and
        // the server outright.
        for _ in 0..100 {
            if matches!(self.wrapper.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.pid != 0 {
            let _ = Command::new("kill")
                .args(["-9", &self.pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.wrapper.kill();
        let _ = self.wrapper.wait();
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The reader thread: log lines into `log`, wrapper lines and readiness
/// into `tx`, until the wrapper's stdout closes.
fn read_output(stdout: std::process::ChildStdout, tx: &mpsc::Sender<Event>, log: &Mutex<VecDeque<String>>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let event = if let Some(rest) = line.strip_prefix("@testkit ") {
            match rest.split_once(' ') {
                Some(("pid", pid)) => pid.trim().parse().ok().map(Event::Pid),
                Some(("exit", code)) => Some(Event::Exit(code.trim().parse().unwrap_or(-1))),
                _ => None,
            }
        } else {
            let ready = line.contains("Ready to accept connections");
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            if log.len() == LOG_LINES {
                log.pop_front();
            }
            log.push_back(line);
            ready.then_some(Event::Ready)
        };
        if let Some(e) = event {
            // The receiver is gone once the server was stopped: keep
            // draining the pipe anyway so the server never blocks on a log
            // write.
            let _ = tx.send(e);
        }
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`);
/// `None` when that cannot be read (not Linux, or gone).
fn stopped(pid: u32) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": the state follows the last ')'.
    let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
    Some(matches!(state, 'T' | 't'))
}
