//! # pressure-triage
//!
//! The support-ticket triage example (`examples/triage/`): a use case whose
//! chain is primary model → cheaper model → keyword rules → manual queue,
//! a golden dataset of labelled tickets, and the evaluation that measures
//! each degradation level's accuracy on it, so the cost of each level is
//! known in accuracy and not only in money.
//!
//! * [`Dataset`]: load and check the JSONL golden set.
//! * [`prompt`]: the system prompt and the robust label parser.
//! * [`LexicalClassifier`]: the mock provider's stand-in
//!   for a model (a lexicon, not a model: CI needs no network).
//! * [`eval`]: `pressure triage eval`, one measurement per chain level.
//! * [`endpoint`]: `--provider URL --model NAME`, any OpenAI-compatible
//!   endpoint as the chain's model levels.
//!
//! It is a crate of its own, not part of the chaos stand: the stand proves
//! the gateway's guarantees under a misbehaving provider, while this
//! measures what each level of one use case's chain is worth in accuracy.
//! Both use the mock provider (`pressure-mock`); the CLI's `pressure triage`
//! prints what [`eval`] measures.

#![warn(unreachable_pub)]

mod classifier;
mod dataset;
pub mod endpoint;
pub mod eval;
pub mod prompt;
mod render;

pub use classifier::LexicalClassifier;
pub use dataset::{Dataset, DatasetError, Ticket, LABELS};
pub use eval::{evaluate, EvalError, EvalOptions, EvalReport, LevelKind, LevelReport};
