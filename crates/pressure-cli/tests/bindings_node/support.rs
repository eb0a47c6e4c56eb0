//! Running `node` and `npm`, each a child in its own process group, killed
//! (the whole group) past its time bound, its output kept and printed when
//! it fails; and the addon of this build put where `index.js` loads it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

/// What a child does, for its time bound and messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step {
    /// `npm ci`.
    Install,
    /// `npm test`.
    Test,
}

impl Step {
    fn bound(self) -> Duration {
        match self {
            Step::Install => Duration::from_secs(300),
            Step::Test => Duration::from_secs(300),
        }
    }
}

/// The workspace root.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// `Ok` when `node` (20 or later) and `npm` run; otherwise why not.
pub(crate) fn node_tools() -> Result<(), String> {
    let version = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| format!("node is not on PATH ({e}); install Node.js 20 or later with npm (Debian 12's own nodejs package is 18, too old)"))?;
    let v = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let major: u32 = v
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 20 {
        return Err(format!("node {v} is too old: the binding needs Node.js 20+"));
    }
    Command::new("npm")
        .arg("--version")
        .output()
        .map_err(|e| format!("npm is not on PATH ({e}); install npm"))?;
    Ok(())
}

/// The environment every Node test sees: the Redis servers of this test
/// binary and the `pressure` binary of this build.
fn test_env() -> Vec<(&'static str, String)> {
    vec![
        ("PRESSURE_TEST_REDIS_URL", pressure_testkit::redis_url()),
        (
            "PRESSURE_TEST_REDIS_CLUSTER_URL",
            pressure_testkit::cluster_nodes().join(","),
        ),
        ("PRESSURE_BIN", env!("CARGO_BIN_EXE_pressure").to_owned()),
    ]
}

/// Runs `npm <args>` in `dir`; panics with its output unless it exits 0.
pub(crate) fn npm(dir: &Path, args: &[&str], step: Step) {
    let mut cmd = Command::new("npm");
    cmd.args(args).current_dir(dir);
    if matches!(step, Step::Test) {
        cmd.envs(test_env());
    }
    run(cmd, step, &format!("npm {} in {}", args.join(" "), dir.display()));
}

/// `bindings/node` ready to use, once per test binary: `npm ci` there and
/// this build's addon copied to `pressure-node.node`, what `npm run build`
/// would make. The tests share it, so they must not reinstall it while
/// another runs.
pub(crate) fn binding() -> PathBuf {
    static READY: Mutex<bool> = Mutex::new(false);
    let pkg = workspace().join("bindings/node");
    let mut ready = READY.lock().unwrap_or_else(|e| e.into_inner());
    if !*ready {
        npm(&pkg, &["ci", "--no-audit", "--no-fund"], Step::Install);
        install_addon(&pkg);
        *ready = true;
    }
    pkg
}

/// Copies the addon that this `cargo test` built (pressure-node is a
/// dev-dependency of this package, so cargo builds its library, the
/// `cdylib` included, before this test) to `pressure-node.node`, through a
/// temporary name as `scripts/build.js` does. No nested cargo build: one
/// in its own target directory (the outer run holds the lock of this one)
/// compiled every dependency a second time, a minute and a half of CI.
fn install_addon(pkg: &Path) {
    let built = pressure_testkit::dev_dependency_library("libpressure_node.so");
    let dest = pkg.join("pressure-node.node");
    let tmp = pkg.join(format!("pressure-node.node.{}.tmp", std::process::id()));
    std::fs::copy(&built, &tmp)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", built.display(), tmp.display()));
    std::fs::rename(&tmp, &dest)
        .unwrap_or_else(|e| panic!("rename {} to {}: {e}", tmp.display(), dest.display()));
}

fn run(mut cmd: Command, step: Step, what: &str) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    // A watchdog kills the whole group (npm, its node, the test runner's
    // children) when the bound passes before the child ends.
    let (done, ended) = mpsc::channel::<()>();
    let group = child.id();
    let bound = step.bound();
    let watchdog = std::thread::spawn(move || {
        if ended.recv_timeout(bound) == Err(RecvTimeoutError::Timeout) {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{group}")])
                .status();
            return true;
        }
        false
    });
    let status = child.wait().expect("wait for the child");
    let _ = done.send(());
    let killed = watchdog.join().unwrap_or(false);
    let status = (!killed).then_some(status);
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    match status {
        Some(s) if s.success() => {
            if matches!(step, Step::Test) {
                // The runner's summary, visible with --nocapture.
                println!("{out}");
            }
        }
        Some(s) => panic!("{what} failed ({s}):\n--- stdout\n{out}\n--- stderr\n{err}"),
        None => panic!(
            "{what} did not finish within {:?}; killed:\n--- stdout\n{out}\n--- stderr\n{err}",
            step.bound()
        ),
    }
}
