//! The endpoints the mock answers, each an [`Endpoint`]: how its request is
//! read, counted and answered. Everything between reading and answering
//! (the bad-request marker, the quota, the fault draw, the latency, billing
//! and recording) is the one step in `decide.rs`, alike for all of them.
//!
//! * [`chat::Chat`]: OpenAI's `POST /v1/chat/completions` (JSON and SSE);
//! * [`responses::Responses`]: OpenAI's `POST /v1/responses` (JSON and SSE events);
//! * [`messages::Messages`]: Anthropic's `POST /v1/messages` (JSON and SSE events);
//! * [`embeddings::Embeddings`]: OpenAI's `POST /v1/embeddings`.
//!
//! Anthropic's `POST /v1/messages/count_tokens` ([`messages::count_tokens`])
//! is no [`Endpoint`]: it is neither billed nor limited, only recorded.

pub(crate) mod chat;
pub(crate) mod embeddings;
pub(crate) mod messages;
pub(crate) mod responses;

use bytes::Bytes;

use crate::cache::{CacheProbe, CacheUse};
use crate::dialect::Dialect;
use crate::responder::Turn;
use crate::text::split_even;

/// At most this many content chunks in a stream.
const MAX_CONTENT_CHUNKS: usize = 8;

/// One endpoint of the mock; see the module docs.
pub(crate) trait Endpoint: 'static {
    /// Where it is served and in whose format it answers.
    const ROUTE: Route;
    /// The request as the endpoint reads it.
    type Request: Send + Sync + 'static;

    /// Reads a request, or says why it is refused (a 400, worded as the
    /// provider words it).
    fn read(body: &[u8]) -> Result<Call<Self::Request>, String>;

    /// The answer to a request that gets one.
    fn answer(call: &Call<Self::Request>, out: &Output) -> Reply;

    /// The event that ends a stream failing midway (the phase's
    /// `streamErrorShare`), after `sent` events of the reply.
    fn stream_error(call: &Call<Self::Request>, out: &Output, sent: usize) -> Bytes;
}

/// An endpoint's path and dialect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route {
    /// The path, as arrivals record it.
    pub(crate) path: &'static str,
    /// Whose error bodies and quota headers it answers with.
    pub(crate) dialect: Dialect,
}

impl Route {
    /// `path`, answering in `dialect`.
    const fn new(path: &'static str, dialect: Dialect) -> Self {
        Self { path, dialect }
    }
}

/// A request that was read: what the decision step needs of it.
#[derive(Debug)]
pub(crate) struct Call<R> {
    /// The request's `model`.
    pub(crate) model: String,
    /// Whether it asks for a stream.
    pub(crate) stream: bool,
    /// Whether one of its texts carries [`BAD_REQUEST_MARKER`](crate::BAD_REQUEST_MARKER).
    pub(crate) marked: bool,
    /// Its input tokens, as the provider counts them.
    pub(crate) input: u64,
    /// The most output tokens it allows; `None`: the phase's `outputTokens`.
    /// Its quota cost is `input` plus this.
    pub(crate) max_output: Option<u64>,
    /// The conversation, for an endpoint that generates text (the
    /// [`Responder`](crate::Responder) answers it); `None` for embeddings.
    pub(crate) turns: Option<Vec<Turn>>,
    /// The output decided by the endpoint instead of the responder's text
    /// (a tool call's arguments), billed in full.
    pub(crate) fixed_output: Option<String>,
    /// The request's cacheable prompt prefix, if any.
    pub(crate) cache: Option<CacheProbe>,
    /// The request itself.
    pub(crate) request: R,
}

/// What the decision step hands an endpoint to answer with.
#[derive(Debug)]
pub(crate) struct Output {
    /// The arrival's sequence number (for the answer's id).
    pub(crate) seq: usize,
    /// Seconds since the mock started (OpenAI's `created`).
    pub(crate) created: u64,
    /// Input tokens (every cache class).
    pub(crate) input: u64,
    /// Of `input`, what was written to and read from the prompt cache.
    pub(crate) cache: CacheUse,
    /// The generated text, cut to the request's budget.
    pub(crate) text: String,
    /// Its tokens.
    pub(crate) tokens: u64,
    /// Whether the request's own cap cut it (`length` / `max_tokens`).
    pub(crate) capped: bool,
}

/// An endpoint's answer: the JSON body, and the events of a stream when
/// the request asked for one.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) json: Bytes,
    pub(crate) events: Vec<Event>,
}

/// One event of a stream.
#[derive(Debug)]
pub(crate) struct Event {
    /// When it is due.
    pub(crate) at: Due,
    pub(crate) bytes: Bytes,
    /// Generation is complete once it is sent: the output is billed then.
    pub(crate) bill: bool,
}

impl Event {
    /// An event at `at`, not the billing one.
    pub(crate) fn new(at: Due, bytes: Bytes) -> Self {
        Self {
            at,
            bytes,
            bill: false,
        }
    }
}

/// When an event of a stream is due, within the answer's latency: at once
/// (the head), the `index`-th of `of` content events spread from 20 % of the
/// latency to its end, or at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    Start,
    Content { index: usize, of: usize },
    End,
}

/// The content events of `text`: at most [`MAX_CONTENT_CHUNKS`] parts at
/// word boundaries, each made an event by `event`.
pub(crate) fn content_events(text: &str, event: impl Fn(&str) -> Bytes) -> Vec<Event> {
    let parts = split_even(text, MAX_CONTENT_CHUNKS);
    let of = parts.len();
    parts
        .iter()
        .enumerate()
        .map(|(index, part)| Event::new(Due::Content { index, of }, event(part)))
        .collect()
}
