//! [`LimitsError`]: what is wrong with a limits value, by the JSON name of
//! the offending field; every check of a limit's settings (the limits
//! themselves, their quota leasing) answers with it.

/// What is wrong with a [`Limits`](crate::Limits) value; `field` is the JSON name so callers
/// can prefix their own path (`gateway.pressure.perRoute[1].limits.<field>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct LimitsError {
    /// JSON name of the offending field, or `limits` for the whole object.
    pub field: &'static str,
    /// Human-readable problem.
    pub problem: String,
}

impl LimitsError {
    pub(crate) fn at(field: &'static str, problem: impl Into<String>) -> Self {
        Self::new(field, problem)
    }

    pub(crate) fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }
}
