//! The Python binding's pytest suite (`bindings/python/tests`), run by
//! `cargo test` so that the workspace's tests cover it.
//!
//! A venv cached under the cargo target directory gets `pytest` (and
//! `maturin`, for developers) from the package index once
//! (`requirements-test.txt`). The binding is the extension module this
//! `cargo test` built (pressure-python is a dev-dependency of this
//! package), staged with the package's Python files as `pip install
//! ./bindings/python` lays them out, on `PYTHONPATH`. The tests then run
//! against a testkit `redis-server` and a 3-master Redis Cluster.
//!
//! When the venv cannot be had — no `python3`, no `venv` module
//! (Debian/Ubuntu: `python3-venv`), no package index to install from — the
//! test says in one line what it needs and passes without running; with
//! `PRESSURE_REQUIRE_PYTHON_BINDING=1` (set by `.ci/run`) that is a
//! failure. A build or test failure is always a failure.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set to `1` to make a missing Python / venv / package index a failure.
const REQUIRE: &str = "PRESSURE_REQUIRE_PYTHON_BINDING";
/// The test's name as the run shows it.
const TEST: &str = "bindings_python::the_python_binding_passes_its_pytest_suite";

/// Bounds of each step.
const VENV_TIMEOUT: Duration = Duration::from_secs(120);
const PIP_TIMEOUT: Duration = Duration::from_secs(300);
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

/// The binding as `pip install ./bindings/python` lays it out in
/// site-packages (`pyproject.toml`: module `pressure._pressure`, abi3),
/// staged in a fresh directory for `PYTHONPATH`: the package's Python
/// files and the extension module this `cargo test` built (pressure-python
/// is a dev-dependency of this package, so cargo builds its library, the
/// `cdylib` included, before this test). No nested build: maturin's cargo
/// build, in its own target directory (the outer run holds the lock of
/// this one), compiled every dependency a second time.
fn stage_binding(python: &Path) -> tempfile::TempDir {
    let ws = workspace();
    // The layout staged below is the one the package declares.
    let declared = |file: &str, line: &str| {
        let text = std::fs::read_to_string(ws.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(
            text.lines().any(|l| l.trim() == line),
            "{file} no longer has `{line}`: stage the binding as it now declares"
        );
    };
    declared(
        "bindings/python/pyproject.toml",
        r#"module-name = "pressure._pressure""#,
    );
    declared(
        "bindings/python/pyproject.toml",
        r#"python-packages = ["pressure"]"#,
    );
    declared("bindings/python/Cargo.toml", r#"name = "_pressure""#);
    let built = pressure_testkit::dev_dependency_library("lib_pressure.so");
    // Removed when the test ends, also on a failure.
    let stage = tempfile::Builder::new()
        .prefix("python-binding-")
        .tempdir_in(target_dir())
        .expect("create the staging directory");
    let package = stage.path().join("pressure");
    std::fs::create_dir_all(&package).expect("create the staging directory");
    let sources = ws.join("bindings/python/pressure");
    for entry in std::fs::read_dir(&sources).expect("bindings/python/pressure") {
        let entry = entry.expect("read bindings/python/pressure");
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::copy(entry.path(), package.join(entry.file_name())).expect("copy a package file");
        }
    }
    std::fs::copy(&built, package.join("_pressure.abi3.so")).expect("copy the extension module");
    let import = run(
        Command::new(python)
            .args(["-c", "import pressure"])
            .env("PYTHONPATH", stage.path()),
        VENV_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("running python: {e}"));
    assert!(
        import.ok,
        "the Python binding was staged but `import pressure` fails:\n{}",
        import.tail(30)
    );
    stage
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
    let python = venv.join("bin").join("python");
    let stage = stage_binding(&python);
    let redis = pressure_testkit::redis_url();
    let cluster = pressure_testkit::cluster_nodes().join(",");
    let out = run(
        // From `tests/`: `python -m` puts the working directory first on
        // `sys.path`, and in `bindings/python` the source package (without
        // the built module) would shadow the staged one.
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", "."])
            .current_dir(binding.join("tests"))
            .env("PYTHONPATH", stage.path())
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
