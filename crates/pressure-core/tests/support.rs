//! Shared helpers of the integration tests.

#![allow(dead_code, unreachable_pub)]

use pressure_core::clock::TokioClock;
use pressure_core::{MemoryBackend, ResourceBroker};
use std::sync::Arc;

/// A broker whose backend follows tokio's (pausable) time.
pub fn paused_broker() -> ResourceBroker<MemoryBackend> {
    let clock = Arc::new(TokioClock::new());
    ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock)
        .build()
}
