//! Relative file names in the config (`pressure.manifestsDir`,
//! `auth.jwt.publicKeyFile`, the TLS files): resolved against the config
//! file's directory.

use std::path::{Path, PathBuf};

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
