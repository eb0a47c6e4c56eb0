//! The OpenAI-compatible endpoints `POST /v1/chat/completions`,
//! `POST /v1/embeddings` (`embeddings`) and `GET /v1/models[/{id}]`
//! (`models`), served by the gateway itself through the LLM pipeline
//! ([`LlmClient`](pressure_llm::LlmClient)) when `gateway.llm` is configured.
//!
//! `crate::answer::Answer`, which hands them their requests, sits where the proxy sits, *inside* the release, pre-auth
//! and tenant layers: a request to the endpoint is limited like any other
//! (a `perRoute` entry on `/v1/chat/completions` floors it, and a tenant's
//! `gateway:tenant:<id>` quota is charged by its LLM and its HTTP traffic
//! alike); every other request goes on to the proxy. The router decides
//! which is which, once ([`crate::plan::Endpoint`]).
//!
//! * The body is an OpenAI chat request; its `model` names a use case
//!   (`gateway.llm.useCases`). Malformed JSON, a body that is not an object,
//!   or a missing `model`/`messages` answer `400` in OpenAI's error shape
//!   (`{"error":{"message","type","param","code"}}`) before any provider is
//!   touched, and so does a request OpenAI itself would refuse (`validate`:
//!   empty `messages`, `max_tokens` < 1, wrong types, with OpenAI's `param`
//!   and `code`); an unknown use case answers `404`; a prompt that fits no model
//!   of the chain `400 context_length_exceeded`.
//! * `"stream": true` answers with server-sent events (`sse`).
//! * An answer: `200` with the completion plus a top-level
//!   `"pressure": {"degradation", "level", "attempts"}` field, or `202`
//!   when the manual queue took it, still a chat completion an SDK parses
//!   (`id` = ticket, `choices[0].message.content` says it was queued,
//!   `pressure.ticket` and the header `x-pressure-ticket` carry the ticket);
//!   both carry the header
//!   `x-pressure-degradation: primary|backup|knn|rules|manual_queue`.
//! * A streamed answer carries the usage chunk only when the client asked
//!   (`stream_options.include_usage`).
//! * A refusal the SDKs retry (`429`, `503`) carries `Retry-After` and
//!   `retry-after-ms`: when the soonest level of the chain could answer.
//! * A failure: a [`crate::rejection::Rejection`], returned to the route
//!   layer, which counts, logs and renders it in the OpenAI dialect.

mod body;
mod embeddings;
mod handler;
mod models;
mod sse;
mod validate;

pub(crate) use body::read_object;
pub(crate) use embeddings::embeddings;
pub(crate) use handler::chat_completions;
pub use handler::REQUEST_ID_HEADER;
pub(crate) use handler::{allow, respond, Event};
pub(crate) use models::{list as list_models, retrieve as retrieve_model};

use axum::body::Body;
use http::Response;

/// The header naming the chain level that answered.
pub const DEGRADATION_HEADER: &str = "x-pressure-degradation";

/// The header naming the deployment (`provider/model`) that answered: the
/// member of a pool level, or the model of a model level.
pub const DEPLOYMENT_HEADER: &str = "x-pressure-deployment";

/// Sets [`DEPLOYMENT_HEADER`] to `model` (`provider/model`), when a model
/// answered.
pub(crate) fn set_deployment(headers: &mut http::HeaderMap, model: Option<&str>) {
    if let Some(v) = model.and_then(|m| http::HeaderValue::from_str(m).ok()) {
        headers.insert(DEPLOYMENT_HEADER, v);
    }
}

/// The header carrying the manual-queue ticket of a queued request.
pub const TICKET_HEADER: &str = "x-pressure-ticket";

/// The gateway's LLM client, shared by every server thread.
pub use crate::plan::Llm;

/// A `200` JSON answer of the LLM endpoints, with the degradation header
/// naming the chain level that answered and the deployment header naming
/// the model that did (`provider/model`, when a model did).
fn json_answer(body: impl Into<Body>, degradation: &'static str, model: Option<&str>) -> Response<Body> {
    let mut resp = Response::new(body.into());
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    h.insert(DEGRADATION_HEADER, http::HeaderValue::from_static(degradation));
    set_deployment(h, model);
    resp
}
