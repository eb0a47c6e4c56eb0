//! [`FieldError`]: the one shape of "this setting is wrong" across the
//! workspace — where (a JSON path such as `limits.requestsPerSecond`) and
//! what — so that every crate's config problems reach the operator with the
//! full path of the offending value.

use std::fmt;

/// A problem with one setting: `path` names where, `problem` says what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted, indexed JSON path (`perRoute[1].limits.requestsPerSecond`),
    /// relative to whatever the caller validated.
    pub path: String,
    /// What is wrong, e.g. `must be > 0`.
    pub problem: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            problem: problem.into(),
        }
    }

    /// The same problem seen from `parent`: its path becomes
    /// `parent.path` (or `parent` for a problem of the whole object, whose
    /// path is empty).
    #[must_use]
    pub fn under(mut self, parent: &str) -> Self {
        self.path = match (parent.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => parent.to_owned(),
            (false, false) if self.path.starts_with('[') => format!("{parent}{}", self.path),
            (false, false) => format!("{parent}.{}", self.path),
        };
        self
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

impl std::error::Error for FieldError {}

#[cfg(test)]
mod tests {
    use super::FieldError;

    #[test]
    fn paths_nest() {
        let e = FieldError::new("requestsPerSecond", "must be > 0")
            .under("limits")
            .under("perRoute[1]");
        assert_eq!(e.to_string(), "perRoute[1].limits.requestsPerSecond: must be > 0");
        assert_eq!(
            FieldError::new("", "bad").under("gateway.backend").path,
            "gateway.backend"
        );
        assert_eq!(FieldError::new("[2]", "bad").under("models").path, "models[2]");
    }
}
