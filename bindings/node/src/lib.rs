//! # pressure-node
//!
//! The native half of `@pressure-rs/broker`: the `pressure-core`
//! `ResourceBroker` (memory or Redis, through `pressure_redis::AnyBackend`)
//! exposed to Node.js with napi-rs. It is a thin shell: limits, queues,
//! priorities and retries are the core's; this crate only converts options,
//! results and errors. The JavaScript API (`index.js`, `index.d.ts`) wraps
//! these classes into the original design's TypeScript interface.
//!
//! * Options arrive as JSON text (parsed with serde into the core's own
//!   types, so unknown keys are errors naming the key, exactly as in the
//!   gateway's config).
//! * Errors leave as JSON text in the message of a thrown `Error`
//!   (`{"code": "ERR_PRESSURE_…", "message": …}`); `index.js` turns them into
//!   typed `Error` subclasses.
//! * Every call that may touch Redis is an `async fn` (a Promise in
//!   JavaScript) run on napi's tokio runtime; nothing blocks the event loop.

pub mod acquisition;
pub mod broker;
mod error;
mod options;
mod runtime;
mod task;
