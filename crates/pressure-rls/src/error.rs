//! The crate's errors: a config file that cannot be loaded, and a server
//! that cannot start.

/// A config file could not be loaded. Displays as `FILE: PATH: PROBLEM`,
/// e.g. `ratelimit.yaml: descriptors[0].rate_limit.unit: unknown unit
/// "weeks"`, so the operator knows where to look.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    /// The file, as given on the command line.
    pub file: String,
    /// Where in the file (`descriptors[0].rate_limit.unit`); empty for the
    /// whole file.
    pub path: String,
    /// What is wrong.
    pub problem: String,
}

impl ConfigError {
    /// An error at `path` of `file`.
    pub fn new(file: impl Into<String>, path: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            path: path.into(),
            problem: problem.into(),
        }
    }

    fn render(&self) -> String {
        if self.path.is_empty() {
            format!("{}: {}", self.file, self.problem)
        } else {
            format!("{}: {}: {}", self.file, self.path, self.problem)
        }
    }
}

/// The service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RlsError {
    /// A config file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The state backend could not be set up.
    #[error("backend: {0}")]
    Backend(#[from] pressure_core::BackendError),
}
