//! The three kinds of call the engine drives ([`Call`](super::engine::Call)):
//!
//! * [`chat`] — a complete chat answer ([`Complete`]), and what chat and
//!   stream share: the request sent to one model, the reservation of a
//!   chat request, the `rules` and `manualQueue` levels;
//! * [`stream`] — a streamed chat answer ([`Open`]), committed at its first
//!   output chunk (`Live`);
//! * [`embed`] — an embeddings request ([`Embed`]).

pub(crate) mod chat;
pub(crate) mod embed;
pub(crate) mod stream;

pub(crate) use chat::Complete;
pub(crate) use embed::Embed;
pub(crate) use stream::Open;
