//! The two priority classes a caller asks for: the queue serves them by the
//! starvation rule ("Queue order" in the crate docs) and the backend caps
//! `Batch` below the resource's batch headroom, on both strategies.

use serde::{Deserialize, Serialize};

/// Priority class of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// A person is waiting: served first.
    #[default]
    Interactive,
    /// Background work: served after interactive, but never starved.
    Batch,
}
