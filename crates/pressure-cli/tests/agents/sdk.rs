//! The vendors' Python SDKs (`anthropic`, `openai`) in a venv cached under
//! the cargo target directory (`agents-sdk-venv`), built once from the
//! package index, and the scripts beside this file that drive them.
//!
//! The venv is this test target's own (the gateway's `openai-sdk-venv` of
//! `crates/pressure-gateway/tests/llm/sdk.rs` holds `openai` only): built in
//! a fresh directory and moved into place, so an interrupted build leaves
//! no half-made cache.

use crate::stack::{run, Run};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The packages the scripts import.
const PACKAGES: [&str; 2] = ["anthropic", "openai"];

/// `<target>/agents-sdk-venv`, beside the `debug`/`release` directories.
fn venv_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // <target>/<profile>/deps/agents-<hash>
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("agents-sdk-venv")
}

/// `Ok` when `cmd` exits 0, else one line of why.
async fn step(cmd: &mut Command, limit: Duration) -> Result<(), String> {
    let out = run(cmd, limit).await;
    if out.ok() {
        return Ok(());
    }
    let text = out.all();
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    Err(format!("{} (exit {:?})", last.trim(), out.code))
}

/// Whether `python` imports every package.
async fn imports(python: &Path) -> bool {
    let import = format!("import {}", PACKAGES.join(", "));
    python.exists()
        && step(
            Command::new(python).args(["-c", &import]),
            Duration::from_secs(60),
        )
        .await
        .is_ok()
}

/// Builds the venv; `Err` says what is missing.
async fn build(venv: &Path) -> Result<(), String> {
    let building = venv.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    let result = async {
        step(
            Command::new("python3").arg("-m").arg("venv").arg(&building),
            Duration::from_secs(120),
        )
        .await
        .map_err(|e| format!("needs python3 with its venv module (python3-venv): {e}"))?;
        step(
            Command::new(building.join("bin").join("pip"))
                .args(["install", "--disable-pip-version-check", "--quiet"])
                .args(["--retries", "1", "--timeout", "20"])
                .args(PACKAGES),
            Duration::from_secs(300),
        )
        .await
        .map_err(|e| format!("needs the package index once to install {PACKAGES:?}: {e}"))?;
        let _ = std::fs::remove_dir_all(venv);
        std::fs::rename(&building, venv).map_err(|e| format!("cannot move the venv into place: {e}"))?;
        // A venv's scripts name its directory: rebuild them after the move.
        step(
            Command::new("python3")
                .arg("-m")
                .arg("venv")
                .arg("--upgrade")
                .arg(venv),
            Duration::from_secs(120),
        )
        .await
    }
    .await;
    let _ = std::fs::remove_dir_all(&building);
    result
}

/// The venv's python with both SDKs, or `None` after a skip.
pub(crate) async fn python(test: &str) -> Option<PathBuf> {
    // The tests of this binary run in parallel in one process: one builds,
    // the others wait and find the venv built.
    static BUILDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = BUILDING.lock().await;
    let venv = venv_dir();
    let python = venv.join("bin").join("python");
    if imports(&python).await {
        return Some(python);
    }
    let outcome = match build(&venv).await {
        Ok(()) if imports(&python).await => return Some(python),
        Ok(()) => format!("{PACKAGES:?} not importable from {}", venv.display()),
        Err(e) => e,
    };
    pressure_testkit::skip(test, crate::REQUIRE, &outcome);
    None
}

/// Runs `script` (beside this file) against the gateway at `proxy` with
/// `key` and `model`; it prints `ok` and exits 0 when every check held.
pub(crate) async fn run_script(python: &Path, script: &str, proxy: &str, key: &str, model: &str) -> Run {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/agents")
        .join(script);
    run(
        Command::new(python).arg(path).args([proxy, key, model]),
        Duration::from_secs(120),
    )
    .await
}
