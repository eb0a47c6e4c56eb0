//! Relative file names in the config (`pressure.manifestsDir`,
//! `auth.jwt.publicKeyFile`, the TLS files, a local LLM provider's
//! `modelDir`, a `knn` chain level's `examples`): resolved against the
//! config file's directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use pressure_llm::pipeline::ChainLevel;

use super::error::ConfigError;
use super::types::GatewayConfig;

/// The directory relative names in the file at `path` are resolved against.
pub(crate) fn base_dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// `name` relative to `base_dir` unless it is absolute.
pub(crate) fn resolve(base_dir: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

/// Makes the file names of `gateway.llm` absolute (relative to `base_dir`,
/// itself made absolute against the current directory): every `local`
/// provider's `modelDir` and every `knn` level's `examples`. Empty names
/// are left for validation to refuse.
pub(crate) fn resolve_llm_files(cfg: &mut GatewayConfig, base_dir: &Path) {
    let Some(llm) = cfg.llm.as_mut() else { return };
    let fix = |name: &mut String| {
        if !name.trim().is_empty() {
            let joined = resolve(base_dir, name);
            let absolute = std::path::absolute(&joined).unwrap_or(joined);
            *name = absolute.to_string_lossy().into_owned();
        }
    };
    for p in llm.providers.values_mut() {
        if let Some(dir) = p.model_dir.as_mut() {
            fix(dir);
        }
    }
    for uc in llm.use_cases.values_mut() {
        for level in &mut uc.chain {
            if let ChainLevel::Knn(knn) = level {
                fix(&mut knn.examples);
            }
        }
    }
}

/// The value of the environment variable `var` that the config names at
/// `path`: it must be set and non-empty now, so that a gateway that would
/// start without its secret is refused at startup rather than at the
/// first request.
pub(crate) fn env_value(var: &str, path: &str) -> Result<OsString, ConfigError> {
    if var.is_empty() {
        return Err(ConfigError::new(path, "must not be empty"));
    }
    match std::env::var_os(var) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(ConfigError::new(
            path,
            format!("environment variable {var} is not set"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::resolve_llm_files;
    use crate::settings::parse_shape;
    use pressure_llm::pipeline::ChainLevel;
    use std::path::Path;

    #[test]
    fn llm_model_dirs_and_knn_examples_become_absolute_against_the_config_directory() {
        let mut cfg = parse_shape(
            r#"{"gateway": {"listen": "127.0.0.1:1", "upstreams": {}, "llm": {
                "providers": {"local": {"kind": "local", "modelDir": "models/minilm"},
                              "abs": {"kind": "local", "modelDir": "/abs/minilm"}},
                "useCases": {"t": {"chain": [{"knn": {"examples": "ex.jsonl", "model": "local/m"}}]}}}}}"#,
        )
        .expect("parses");
        resolve_llm_files(&mut cfg, Path::new("/etc/pressure"));
        let llm = cfg.llm.expect("llm");
        assert_eq!(
            llm.providers["local"].model_dir.as_deref(),
            Some("/etc/pressure/models/minilm")
        );
        assert_eq!(llm.providers["abs"].model_dir.as_deref(), Some("/abs/minilm"));
        let ChainLevel::Knn(knn) = &llm.use_cases["t"].chain[0] else {
            panic!("a knn level")
        };
        assert_eq!(knn.examples, "/etc/pressure/ex.jsonl");
    }
}
