//! The chat calls the engine drives ([`Call`](super::engine::Call)):
//!
//! * [`chat`] — a complete chat answer ([`Complete`]), and what chat and
//!   stream share: the request sent to one model, the reservation of a
//!   chat request, the `rules` and `manualQueue` levels;
//! * [`stream`] — a streamed chat answer ([`Open`]), committed at its first
//!   output chunk (`Live`).
//!
//! The third kind, an embeddings request, is the engine's own
//! ([`Embed`](super::engine::Embed)): its `knn` levels make such calls.

pub(crate) mod chat;
pub(crate) mod stream;

pub(crate) use chat::Complete;
pub(crate) use stream::Open;
