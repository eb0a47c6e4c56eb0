//! The one error type of config loading: where the problem is (a JSON path
//! such as `gateway.pressure.perRoute[1].limits.requestsPerSecond`, or a file
//! name) and what it is, so that an operator can fix the file without reading
//! the code. Its `Display` is `"{path}: {problem}"`.

use std::path::{Path, PathBuf};

/// A config problem: `path` names where, `problem` says what.
///
/// * Problems in the main config carry its JSON path in the dotted, indexed
///   form: `gateway.upstreams.rest.url`, `gateway.pressure.perRoute[1].limits`.
/// * Problems inside a plugin manifest carry the manifest's file name, then
///   the path inside it: `manifests/github.json: routes[0].limits.requestsPerSecond`.
/// * Problems reading a file (the config, the manifest directory, a manifest,
///   a key file) also set [`ConfigError::file`], so callers can tell "cannot
///   read" from "invalid".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct ConfigError {
    /// Where: a JSON path, or a file name (optionally followed by a path in it).
    pub path: String,
    /// What is wrong, e.g. `must be > 0`.
    pub problem: String,
    /// The file that could not be read, for I/O errors; `None` when the
    /// content is at fault.
    pub file: Option<PathBuf>,
}

impl ConfigError {
    /// A problem with the content at `path`. Control characters (from keys
    /// or values of the file) are escaped in both, so an error message can
    /// never rewrite the operator's terminal or forge a log line.
    pub fn new(path: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            path: escape_controls(path.into()),
            problem: escape_controls(problem.into()),
            file: None,
        }
    }

    /// Marks the error as an I/O error on `file` (see [`ConfigError::file`]).
    pub fn with_file(mut self, file: &Path) -> Self {
        self.file = Some(file.to_path_buf());
        self
    }

    /// Whether this error is about reading a file rather than its content.
    pub fn is_io(&self) -> bool {
        self.file.is_some()
    }
}

impl From<pressure_core::FieldError> for ConfigError {
    fn from(e: pressure_core::FieldError) -> Self {
        Self::new(e.path, e.problem)
    }
}

/// `s` with every control character written as `\u{..}`.
fn escape_controls(s: String) -> String {
    if !s.chars().any(char::is_control) {
        return s;
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Every problem of a config that did not build, in the order of its
/// sections (at least one). Each is a [`ConfigError`]: a JSON path and a
/// problem (a `FieldError`), and the file when one could not be read. The
/// first is what the loader returns and `pressure check-config` reports;
/// the others are what a fix of it would run into next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0[0])]
pub struct ConfigErrors(Vec<ConfigError>);

impl ConfigErrors {
    /// The problems, or `None` when there are none.
    pub fn new(errors: Vec<ConfigError>) -> Option<Self> {
        (!errors.is_empty()).then_some(Self(errors))
    }

    /// The first problem.
    pub fn first(&self) -> &ConfigError {
        &self.0[0]
    }

    /// Every problem, in order.
    pub fn all(&self) -> &[ConfigError] {
        &self.0
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        Self(vec![e])
    }
}

impl From<ConfigErrors> for ConfigError {
    /// The first problem.
    fn from(mut e: ConfigErrors) -> Self {
        e.0.swap_remove(0)
    }
}
