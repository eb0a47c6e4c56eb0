//! [`Dialect`]: what differs between the agents' two APIs — how a body is
//! read, which headers reach a provider of the same wire, how an answer,
//! a stream and a failure are written — so one handler serves both
//! ([`Messages`], [`Responses`]).

use crate::rejection::{self, Rejection};
use http::HeaderMap;
use pressure_llm::ingress::{messages, responses, write_event as event, IngressError, Parsed};
use pressure_llm::provider::{ChatChunk, ChatResponse, NativeWire};
use serde_json::{json, Map, Value};

/// One agent API at the gateway's door.
pub(crate) trait Dialect: Send + Sync + 'static {
    /// `messages` or `responses`, for the logs.
    const NAME: &'static str;
    /// The provider wire that speaks it natively.
    const WIRE: NativeWire;
    /// Writes a chat chunk stream as the dialect's events.
    type Encoder: Send + 'static;

    /// The request headers a provider of the same wire gets too.
    fn passed_headers(headers: &HeaderMap) -> Vec<(String, String)>;
    /// The body, checked and translated.
    fn parse(body: Map<String, Value>, headers: Vec<(String, String)>) -> Result<Parsed, IngressError>;
    /// A whole chat answer in the dialect (`request`: the body as received).
    fn render(resp: &ChatResponse, model: &str, request: &Map<String, Value>) -> Value;
    /// The encoder of one stream.
    fn encoder(model: &str, request: &Map<String, Value>, input_estimate: u64) -> Self::Encoder;
    /// One chunk of a translated stream.
    fn chunk(enc: &mut Self::Encoder, chunk: &ChatChunk, out: &mut Vec<u8>);
    /// The end of a translated stream.
    fn finish(enc: &mut Self::Encoder, out: &mut Vec<u8>);
    /// A failure after a translated stream started.
    fn fail(enc: &mut Self::Encoder, rejection: &Rejection, out: &mut Vec<u8>);
    /// A failure after the provider's own stream started and before it sent
    /// a failure of its own (a cut connection, a read timeout): the encoder
    /// wrote nothing, the provider's events did; `seen` is the data of the
    /// first and the last of them.
    fn fail_native(rejection: &Rejection, seen: (Option<&str>, Option<&str>), out: &mut Vec<u8>);
    /// What keeps an idle connection open between events.
    fn keep_alive(out: &mut Vec<u8>);
}

/// Anthropic's Messages API.
pub(crate) struct Messages;

/// OpenAI's Responses API.
pub(crate) struct Responses;

/// Anthropic's error type and message for a failure.
fn anthropic_error(r: &Rejection) -> (&'static str, String) {
    let body: Value = serde_json::from_str(&r.body(rejection::Dialect::Anthropic)).unwrap_or(Value::Null);
    let ty = match body.pointer("/error/type").and_then(Value::as_str) {
        Some("overloaded_error") => "overloaded_error",
        Some("rate_limit_error") => "rate_limit_error",
        Some("invalid_request_error") => "invalid_request_error",
        Some("request_too_large") => "request_too_large",
        _ => "api_error",
    };
    let message = body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map_or_else(|| r.message(), str::to_owned);
    (ty, message)
}

/// OpenAI's error code for a failure inside a Responses stream.
fn responses_code(r: &Rejection) -> String {
    let body: Value = serde_json::from_str(&r.body(rejection::Dialect::Responses)).unwrap_or(Value::Null);
    body.pointer("/error/code")
        .and_then(Value::as_str)
        .unwrap_or("server_error")
        .to_owned()
}

impl Dialect for Messages {
    const NAME: &'static str = "messages";
    const WIRE: NativeWire = NativeWire::Messages;
    type Encoder = messages::StreamEncoder;

    /// `anthropic-version` and `anthropic-beta` (each value as sent; a
    /// value that is not text is left out).
    fn passed_headers(headers: &HeaderMap) -> Vec<(String, String)> {
        ["anthropic-version", "anthropic-beta"]
            .into_iter()
            .flat_map(|name| {
                headers
                    .get_all(name)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .map(move |v| (name.to_owned(), v.to_owned()))
            })
            .take(8)
            .collect()
    }

    fn parse(body: Map<String, Value>, headers: Vec<(String, String)>) -> Result<Parsed, IngressError> {
        messages::parse(body, headers)
    }

    fn render(resp: &ChatResponse, model: &str, _request: &Map<String, Value>) -> Value {
        messages::render(resp, model)
    }

    fn encoder(model: &str, _request: &Map<String, Value>, input_estimate: u64) -> Self::Encoder {
        messages::StreamEncoder::new(model, input_estimate)
    }

    fn chunk(enc: &mut Self::Encoder, chunk: &ChatChunk, out: &mut Vec<u8>) {
        enc.chunk(chunk, out);
    }

    fn finish(enc: &mut Self::Encoder, out: &mut Vec<u8>) {
        enc.finish(out);
    }

    fn fail(enc: &mut Self::Encoder, rejection: &Rejection, out: &mut Vec<u8>) {
        let (ty, message) = anthropic_error(rejection);
        enc.fail(ty, &message, out);
    }

    fn fail_native(rejection: &Rejection, _seen: (Option<&str>, Option<&str>), out: &mut Vec<u8>) {
        let (ty, message) = anthropic_error(rejection);
        event(out, "error", &messages::error_body(ty, &message));
    }

    fn keep_alive(out: &mut Vec<u8>) {
        messages::StreamEncoder::ping(out);
    }
}

impl Dialect for Responses {
    const NAME: &'static str = "responses";
    const WIRE: NativeWire = NativeWire::Responses;
    type Encoder = responses::StreamEncoder;

    /// None: OpenAI's wire has no feature headers to pass.
    fn passed_headers(_headers: &HeaderMap) -> Vec<(String, String)> {
        Vec::new()
    }

    fn parse(body: Map<String, Value>, _headers: Vec<(String, String)>) -> Result<Parsed, IngressError> {
        responses::parse(body)
    }

    fn render(resp: &ChatResponse, model: &str, request: &Map<String, Value>) -> Value {
        responses::render(resp, model, request)
    }

    fn encoder(model: &str, request: &Map<String, Value>, _input_estimate: u64) -> Self::Encoder {
        responses::StreamEncoder::new(model, request)
    }

    fn chunk(enc: &mut Self::Encoder, chunk: &ChatChunk, out: &mut Vec<u8>) {
        enc.chunk(chunk, out);
    }

    fn finish(enc: &mut Self::Encoder, out: &mut Vec<u8>) {
        enc.finish(out);
    }

    fn fail(enc: &mut Self::Encoder, rejection: &Rejection, out: &mut Vec<u8>) {
        enc.fail(&responses_code(rejection), &rejection.message(), out);
    }

    /// `response.failed`, numbered after the provider's last event, for the
    /// response its `response.created` named.
    fn fail_native(rejection: &Rejection, seen: (Option<&str>, Option<&str>), out: &mut Vec<u8>) {
        let parse = |d: Option<&str>| d.and_then(|d| serde_json::from_str::<Value>(d).ok());
        let (first, last) = (parse(seen.0), parse(seen.1));
        let mut response = first
            .as_ref()
            .and_then(|f| f.get("response"))
            .cloned()
            .unwrap_or_else(|| json!({"object": "response"}));
        if let Some(r) = response.as_object_mut() {
            r.insert("status".into(), Value::from("failed"));
            r.insert(
                "error".into(),
                json!({"code": responses_code(rejection), "message": rejection.message()}),
            );
        }
        let sequence = last
            .as_ref()
            .and_then(|l| l.get("sequence_number"))
            .and_then(Value::as_u64)
            .map_or(0, |n| n.saturating_add(1));
        let data = json!({"type": "response.failed", "sequence_number": sequence, "response": response});
        event(out, "response.failed", &data);
    }

    /// An SSE comment: the Responses API has no ping event.
    fn keep_alive(out: &mut Vec<u8>) {
        out.extend_from_slice(b": keep-alive\n\n");
    }
}
