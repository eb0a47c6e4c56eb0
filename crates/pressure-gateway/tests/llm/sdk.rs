//! Compatibility with the official `openai` Python SDK: a venv (cached under
//! the cargo target directory) gets `openai` from the package index once,
//! and `openai_sdk.py` calls the gateway, streaming and not, and (its
//! `check_models` / `check_embeddings`) the models and embeddings endpoints.
//!
//! Offline-tolerant: once the venv is cached it needs no network. When the
//! venv cannot be had — no `python3`, no `venv` module (Debian/Ubuntu:
//! `python3-venv`), or no package index to install `openai` from — the test
//! says in one line what it needs and passes without running, so that
//! `cargo test --workspace` needs nothing but `redis-server`. With
//! `PRESSURE_REQUIRE_PYTHON_SDK=1` (set by `.ci/run`) that line is a
//! failure instead.

use super::embeddings::with_embeddings;
use super::{bounded_for, config, no_limits, Mock, TestGateway};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

/// Set to `1` to make a missing Python / venv / package index a failure.
const REQUIRE: &str = "PRESSURE_REQUIRE_PYTHON_SDK";

/// `<target>/openai-sdk-venv`, next to the `debug`/`release` directories.
fn venv_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // <target>/<profile>/deps/llm-<hash>
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("openai-sdk-venv")
}

/// Runs `cmd`; on failure, its last output line (or why it could not run).
async fn run(cmd: &mut Command) -> Result<(), String> {
    match cmd.output().await {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            Err(format!("{} ({})", last.trim(), out.status))
        }
        Err(e) => Err(format!("cannot run it: {e}")),
    }
}

/// The venv's python with `openai` importable; builds the venv when needed.
/// `Err` is one line saying what is missing.
async fn python_with_openai() -> Result<PathBuf, String> {
    let venv = venv_dir();
    let python = venv.join("bin").join("python");
    if python.exists()
        && run(Command::new(&python).args(["-c", "import openai"]))
            .await
            .is_ok()
    {
        return Ok(python);
    }
    // Build in a fresh directory, then move it into place, so an interrupted
    // build never leaves a half-made cache behind.
    let building = venv.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let cleanup = |e: String| {
        let _ = std::fs::remove_dir_all(&building);
        e
    };
    run(Command::new("python3").arg("-m").arg("venv").arg(&building))
        .await
        .map_err(|e| {
            cleanup(format!(
                "needs python3 with its venv module (Debian/Ubuntu: apt-get install python3-venv); \
                 python3 -m venv: {e}"
            ))
        })?;
    let pip = building.join("bin").join("pip");
    run(Command::new(&pip).args([
        "install",
        "--disable-pip-version-check",
        "--quiet",
        "--retries",
        "1",
        "--timeout",
        "20",
        "openai",
    ]))
    .await
    .map_err(|e| {
        cleanup(format!(
            "needs the package index once to install `openai` into {} (PyPI, or PIP_INDEX_URL / \
             PIP_FIND_LINKS for a mirror or a wheel directory); pip install openai: {e}",
            venv.display()
        ))
    })?;
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::rename(&building, &venv)
        .map_err(|e| cleanup(format!("cannot move the venv into place: {e}")))?;
    // A venv's scripts name its directory: rebuild them after the move.
    run(Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg("--upgrade")
        .arg(&venv))
    .await
    .map_err(|e| format!("python3 -m venv --upgrade {}: {e}", venv.display()))?;
    run(Command::new(&python).args(["-c", "import openai"]))
        .await
        .map_err(|e| {
            format!(
                "openai is not importable from the cached venv {}: {e}",
                venv.display()
            )
        })?;
    Ok(python)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_gets_valid_answers() {
    // Creating the venv downloads from PyPI: a longer bound than the others.
    bounded_for(Duration::from_secs(300), async {
        let python = match python_with_openai().await {
            Ok(python) => python,
            Err(need) => {
                pressure_testkit::skip(
                    "llm::sdk::the_openai_python_sdk_gets_valid_answers",
                    REQUIRE,
                    &need,
                );
                return;
            }
        };
        let mock = Mock::start().await;
        let gw = TestGateway::start(with_embeddings(config(&mock, no_limits()))).await;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/llm/openai_sdk.py");
        let out = Command::new(&python)
            .arg(&script)
            .arg(format!("http://{}/v1", gw.addr))
            .arg("support")
            .arg("search")
            .output()
            .await
            .expect("run openai_sdk.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.trim() == "ok",
            "openai_sdk.py failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // Non-streamed, four streams, and the 404 (which never reaches the mock).
        assert_eq!(mock.hits_of("good"), 5);
        // Three SDK attempts (max_retries=2), each one chain of two levels
        // with one attempt each: the gateway did not multiply them.
        assert_eq!((mock.hits_of("busy-a"), mock.hits_of("busy-b")), (3, 3));
        // Two embeddings calls (the empty input is refused by the gateway).
        assert_eq!(mock.hits_of("emb-a"), 2);
    })
    .await;
}
