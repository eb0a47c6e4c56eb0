//! The Python binding's pytest suite (`bindings/python/tests`), run by
//! `cargo test` so that the workspace's tests cover it.
//!
//! A venv cached under the cargo target directory gets `maturin` and
//! `pytest` from the package index once (`requirements-test.txt`), then the
//! binding is built into it with `pip install ./bindings/python` — again
//! only when its sources (or the core's, or `Cargo.lock`) changed, keyed by
//! a hash of them. The nested cargo build uses `<target>/bindings`: the
//! outer `cargo test` holds the lock of `<target>` itself. The tests then
//! run against a testkit `redis-server` and a 3-master Redis Cluster.
//!
//! When the venv cannot be had — no `python3`, no `venv` module
//! (Debian/Ubuntu: `python3-venv`), no package index to install from — the
//! test says in one line what it needs and passes without running; with
//! `PRESSURE_REQUIRE_PYTHON_BINDING=1` (set by `.ci/run`) that is a
//! failure. A build or test failure is always a failure.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set to `1` to make a missing Python / venv / package index a failure.
const REQUIRE: &str = "PRESSURE_REQUIRE_PYTHON_BINDING";
/// The test's name as the run shows it.
const TEST: &str = "bindings_python::the_python_binding_passes_its_pytest_suite";

/// Bounds of each step. The first build of the binding compiles the core,
/// the Redis backend and PyO3 from scratch (minutes on a small machine).
const VENV_TIMEOUT: Duration = Duration::from_secs(120);
const PIP_TIMEOUT: Duration = Duration::from_secs(300);
const BUILD_TIMEOUT: Duration = Duration::from_secs(1500);
const PYTEST_TIMEOUT: Duration = Duration::from_secs(400);

/// The workspace root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cargo target directory this test runs from.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // <target>/<profile>/deps/bindings_python-<hash>
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workspace().join("target"))
}

/// What a command printed and how it ended.
struct Outcome {
    ok: bool,
    status: String,
    text: String,
}

impl Outcome {
    /// The last non-empty line, for one-line reasons.
    fn last_line(&self) -> String {
        let last = self
            .text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        format!("{last} ({})", self.status)
    }

    /// The last `n` lines.
    fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// Runs `cmd` (stdout and stderr merged in order of reading), killing it
/// after `timeout`. `Err`: it could not be started.
fn run(cmd: &mut Command, timeout: Duration) -> Result<Outcome, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    let readers: Vec<_> = [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut pipe| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    })
    .collect();
    // Bounded by a count of polls, not a clock (the workspace reads time
    // only through injected clocks).
    let step = Duration::from_millis(50);
    let mut polls_left = timeout.as_millis() / step.as_millis();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if polls_left == 0 => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => {
                polls_left -= 1;
                std::thread::sleep(step);
            }
            Err(e) => return Err(format!("waiting for {:?}: {e}", cmd.get_program())),
        }
    };
    let text: Vec<String> = readers
        .into_iter()
        .map(|r| r.join().unwrap_or_default())
        .collect();
    let text = text.join("\n");
    Ok(match status {
        Some(s) => Outcome {
            ok: s.success(),
            status: s.to_string(),
            text,
        },
        None => Outcome {
            ok: false,
            status: format!("killed after {timeout:?}"),
            text,
        },
    })
}

/// `Ok` when `cmd` ran and succeeded; otherwise one line saying why.
fn run_ok(cmd: &mut Command, timeout: Duration) -> Result<Outcome, String> {
    let out = run(cmd, timeout)?;
    if out.ok {
        Ok(out)
    } else {
        Err(out.last_line())
    }
}

/// A hash of every file under `paths` (recursively; names and contents).
fn fingerprint(paths: &[PathBuf]) -> String {
    fn walk(path: &Path, files: &mut Vec<PathBuf>) {
        if path.is_dir() {
            let Ok(entries) = std::fs::read_dir(path) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                let name = e.file_name();
                // Build output and Python caches are not sources.
                if name == "__pycache__" || name == "target" || name == ".pytest_cache" {
                    continue;
                }
                walk(&p, files);
            }
        } else if path.is_file() {
            files.push(path.to_path_buf());
        }
    }
    let mut files = Vec::new();
    for p in paths {
        walk(p, &mut files);
    }
    files.sort();
    let mut h = DefaultHasher::new();
    for f in &files {
        f.hash(&mut h);
        std::fs::read(f).unwrap_or_default().hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

/// The cached venv with `maturin` and `pytest`; `Err` is one line saying
/// what is missing (the test is skipped then).
fn venv_with_tools(requirements: &Path) -> Result<PathBuf, String> {
    let venv = target_dir().join("python-binding-venv");
    let stamp = venv.join("requirements.stamp");
    let wanted =
        std::fs::read_to_string(requirements).map_err(|e| format!("{}: {e}", requirements.display()))?;
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(venv);
    }
    // Made in a fresh directory and moved into place, so an interrupted
    // run never leaves a half-made cache behind.
    let building = venv.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let cleanup = |e: String| {
        let _ = std::fs::remove_dir_all(&building);
        e
    };
    run_ok(
        Command::new("python3").arg("-m").arg("venv").arg(&building),
        VENV_TIMEOUT,
    )
    .map_err(|e| {
        cleanup(format!(
            "needs python3 with its venv module (Debian/Ubuntu: apt-get install python3-venv); \
             python3 -m venv: {e}"
        ))
    })?;
    run_ok(
        Command::new(building.join("bin").join("pip"))
            .args(["install", "--disable-pip-version-check", "--quiet"])
            .args(["--retries", "1", "--timeout", "20", "-r"])
            .arg(requirements),
        PIP_TIMEOUT,
    )
    .map_err(|e| {
        cleanup(format!(
            "needs the package index once to install maturin and pytest ({}); pip install: {e}",
            requirements.display()
        ))
    })?;
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::rename(&building, &venv)
        .map_err(|e| cleanup(format!("cannot move the venv into place: {e}")))?;
    // A venv's scripts name its directory: rebuild them after the move.
    run_ok(
        Command::new("python3")
            .args(["-m", "venv", "--upgrade"])
            .arg(&venv),
        VENV_TIMEOUT,
    )
    .map_err(|e| format!("python3 -m venv --upgrade {}: {e}", venv.display()))?;
    std::fs::write(&stamp, wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(venv)
}

/// `PATH` with the venv's scripts (maturin) and the running cargo first.
fn path_with(venv: &Path) -> std::ffi::OsString {
    let mut dirs = vec![venv.join("bin")];
    if let Some(cargo_dir) = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .and_then(|c| c.parent().map(Path::to_path_buf))
    {
        dirs.push(cargo_dir);
    }
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap_or_default()
}

/// Builds the binding into the venv unless the installed one was built from
/// the same sources. Panics (a failure, not a skip) when the build fails,
/// with what is missing in its first line.
fn install_binding(venv: &Path) {
    let ws = workspace();
    let sources: Vec<PathBuf> = [
        "bindings/python/src",
        "bindings/python/pressure",
        "bindings/python/Cargo.toml",
        "bindings/python/pyproject.toml",
        "crates/pressure-core/src",
        "crates/pressure-core/Cargo.toml",
        "crates/pressure-redis/src",
        "crates/pressure-redis/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ]
    .iter()
    .map(|p| ws.join(p))
    .collect();
    let print = fingerprint(&sources);
    let stamp = venv.join("binding.stamp");
    let python = venv.join("bin").join("python");
    let importable = || {
        run(
            Command::new(&python).args(["-c", "import pressure"]),
            VENV_TIMEOUT,
        )
        .is_ok_and(|o| o.ok)
    };
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == print) && importable() {
        return;
    }
    let path = path_with(venv);
    for (tool, need) in [
        ("cargo", "the Rust toolchain (cargo) on PATH"),
        ("maturin", "maturin in the venv (pip install maturin)"),
    ] {
        let found = run(
            Command::new(tool).arg("--version").env("PATH", &path),
            VENV_TIMEOUT,
        )
        .is_ok_and(|o| o.ok);
        assert!(found, "building the Python binding needs {need}");
    }
    let _ = std::fs::remove_file(&stamp);
    let out = run(
        // `python -m pip`: the venv was made under another name and moved,
        // so its `pip` script's `#!` line names a directory that is gone.
        Command::new(venv.join("bin").join("python"))
            .args(["-m", "pip", "install", "--disable-pip-version-check"])
            .arg("--no-build-isolation")
            .args(["--no-deps", "--force-reinstall"])
            .arg(ws.join("bindings/python"))
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", target_dir().join("bindings"))
            // A debug build: this compiles quicker, and tests need no speed.
            .env("MATURIN_PEP517_ARGS", "--profile dev"),
        BUILD_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("building the Python binding: {e}"));
    assert!(
        out.ok,
        "building the Python binding failed ({}):\n{}",
        out.status,
        out.tail(60)
    );
    assert!(
        importable(),
        "the Python binding was built but `import pressure` fails"
    );
    std::fs::write(&stamp, print).expect("write the build stamp");
}

#[test]
fn the_python_binding_passes_its_pytest_suite() {
    let ws = workspace();
    let binding = ws.join("bindings/python");
    let venv = match venv_with_tools(&binding.join("requirements-test.txt")) {
        Ok(v) => v,
        Err(need) => {
            pressure_testkit::skip(TEST, REQUIRE, &need);
            return;
        }
    };
    install_binding(&venv);
    let redis = pressure_testkit::redis_url();
    let cluster = pressure_testkit::cluster_nodes().join(",");
    let out = run(
        // From `tests/`: `python -m` puts the working directory first on
        // `sys.path`, and in `bindings/python` the source package (without
        // the built module) would shadow the installed one.
        Command::new(venv.join("bin").join("python"))
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", "."])
            .current_dir(binding.join("tests"))
            .env("PRESSURE_TEST_REDIS_URL", &redis)
            .env("PRESSURE_TEST_REDIS_CLUSTER_URL", &cluster)
            // Inside this test a missing store is a failure, not a skip.
            .env(REQUIRE, "1"),
        PYTEST_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("running pytest: {e}"));
    assert!(out.ok, "pytest failed ({}):\n{}", out.status, out.tail(200));
    println!("{}", out.tail(3));
}
