//! Compatibility with the official `openai` Python SDK: a venv (cached under
//! the cargo target directory) gets `openai` from PyPI, and
//! `openai_sdk.py` calls the gateway, streaming and not. No network to PyPI
//! (or no `python3`) fails the test; it never skips.

use crate::{bounded_for, config, no_limits, Mock, TestGateway};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

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

async fn run(cmd: &mut Command, what: &str) -> bool {
    match cmd.output().await {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "{what} failed ({}):\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            false
        }
        Err(e) => {
            eprintln!("{what}: cannot run: {e}");
            false
        }
    }
}

/// The venv's python with `openai` importable; builds the venv when needed.
async fn python_with_openai() -> PathBuf {
    let venv = venv_dir();
    let python = venv.join("bin").join("python");
    let ready = python.exists()
        && run(
            Command::new(&python).args(["-c", "import openai"]),
            "import openai",
        )
        .await;
    if ready {
        return python;
    }
    // Build in a fresh directory, then move it into place, so an interrupted
    // build never leaves a half-made cache behind.
    let building = venv.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    assert!(
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&building),
            "python3 -m venv"
        )
        .await,
        "python3 -m venv must work"
    );
    let pip = building.join("bin").join("pip");
    assert!(
        run(
            Command::new(&pip).args(["install", "--disable-pip-version-check", "--quiet", "openai"]),
            "pip install openai"
        )
        .await,
        "pip install openai (from PyPI) must work"
    );
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::rename(&building, &venv).expect("move the venv into place");
    // A venv's scripts name its directory: rebuild them after the move.
    assert!(
        run(
            Command::new("python3")
                .arg("-m")
                .arg("venv")
                .arg("--upgrade")
                .arg(&venv),
            "python3 -m venv --upgrade"
        )
        .await,
        "venv upgrade"
    );
    assert!(
        run(
            Command::new(&python).args(["-c", "import openai"]),
            "import openai"
        )
        .await,
        "openai importable from the cached venv"
    );
    python
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_gets_valid_answers() {
    // Creating the venv downloads from PyPI: a longer bound than the others.
    bounded_for(Duration::from_secs(300), async {
        let python = python_with_openai().await;
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/llm/openai_sdk.py");
        let out = Command::new(&python)
            .arg(&script)
            .arg(format!("http://{}/v1", gw.addr))
            .arg("support")
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
        // Non-streamed, streamed, and the 404 (which never reaches the mock).
        assert_eq!(mock.hits_of("good"), 2);
    })
    .await;
}
