//! # pressure-chaos
//!
//! The chaos stand: the provider will fail, and this crate shows whose
//! incident it becomes.
//!
//! The provider it fails with is `pressure-mock`: an OpenAI- and
//! Anthropic-compatible mock that misbehaves on demand (slow, rate-limited
//! with its own RPM/TPM, 500 storms, hangs, timed phases) and bills like a
//! provider, so a test can see what reached it.
//!
//! * [`driver`]: starts the mock and the gateway, loads the whole stack per
//!   scenario and checks the acceptance criteria.
//! * [`report`]: `report.json`, `report.md` and SVG plots of a run.
//!
//! The support-ticket triage example, which also runs against the mock, is
//! its own crate (`pressure-triage`).

#![warn(unreachable_pub)]

pub mod driver;
pub mod report;
