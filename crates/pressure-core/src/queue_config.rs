//! The queue settings of a `queue` resource, validated at registration; what
//! the bounds mean is in the crate docs ("Queue order").

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Queue settings of a `queue` resource (JSON names in camelCase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Most requests waiting at once.
    pub max_queued: usize,
    /// Longest a request waits for capacity, in milliseconds.
    pub max_wait_ms: u64,
    /// Consecutive interactive grants after which a waiting batch request
    /// goes next.
    pub interactive_burst: u32,
    /// Share of every limit kept free of batch traffic (0 ≤ h < 1).
    pub batch_headroom: f64,
    /// Transparent retries when the task reports a rate limit.
    pub max_rate_limit_retries: u32,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            max_queued: 1024,
            max_wait_ms: 30_000,
            interactive_burst: 8,
            batch_headroom: 0.0,
            max_rate_limit_retries: 3,
        }
    }
}

impl QueueConfig {
    /// The default max wait as a duration.
    pub fn max_wait(&self) -> Duration {
        Duration::from_millis(self.max_wait_ms)
    }

    pub(crate) fn validate(&self) -> Result<(), crate::FieldError> {
        if self.max_queued == 0 {
            return Err(crate::FieldError::new("maxQueued", "must be > 0"));
        }
        if self.max_wait_ms == 0 {
            return Err(crate::FieldError::new("maxWaitMs", "must be > 0"));
        }
        if self.interactive_burst == 0 {
            return Err(crate::FieldError::new("interactiveBurst", "must be > 0"));
        }
        if !(0.0..1.0).contains(&self.batch_headroom) {
            return Err(crate::FieldError::new(
                "batchHeadroom",
                "must be at least 0 and below 1",
            ));
        }
        Ok(())
    }
}
