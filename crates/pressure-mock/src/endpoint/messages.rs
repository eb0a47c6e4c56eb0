//! `POST /v1/messages` in Anthropic's wire format (the Messages API), with
//! the same phases, quota, faults, billing and recording as the other
//! endpoints (`decide.rs`), and `POST /v1/messages/count_tokens`.
//!
//! The request is read as Anthropic reads it: malformed JSON, no `model`,
//! no (or a non-positive) `max_tokens`, no `messages`, a role other than
//! `user` / `assistant` → `400 invalid_request_error`; `system` is a string
//! or text blocks, content a string or blocks. Its input tokens are counted
//! like a chat prompt (the tool definitions as one `tools` turn of their
//! JSON when there are any, the system prompt and the text of every block,
//! the model's encoding, OpenAI's chat framing). The answer is a `message`
//! body, or the events `message_start`, `content_block_start`, `ping`,
//! `content_block_delta`s, `content_block_stop`, `message_delta`
//! (`stop_reason`, `usage`), `message_stop`; `stop_reason` is `max_tokens`
//! when the request's `max_tokens` cut the answer, else `end_turn`. Errors
//! are Anthropic-shaped; the quota headers are `anthropic-ratelimit-*`;
//! overloaded is 529; a stream failing midway ends with an `error` event.
//!
//! ## Prompt caching
//!
//! A request whose `tools`, `system` blocks or message content blocks
//! carry a (non-null) `cache_control` has a cacheable prefix: in
//! Anthropic's order (tools, then system, then messages), everything up to
//! and including the last block carrying it. The prefix is counted like
//! the prompt without the reply priming: the tools before and at the mark
//! as one `tools` turn of their JSON, then each turn before the mark in
//! full, then the marked turn's blocks up to the mark (the text of those
//! blocks, as the whole prompt is counted), each turn with its framing;
//! at most the request's input tokens. Its key hashes the model and the
//! prefix turns' roles and texts. First sight (per model, in the mock's
//! bounded prompt cache) → `cache_creation_input_tokens` = the prefix's
//! tokens; later sights → `cache_read_input_tokens`; `input_tokens` is
//! the rest. Both cache fields are always in `usage` (0 without
//! `cache_control`), in the body, in `message_start` and in
//! `message_delta` (whose `usage` carries the input fields too).
//!
//! ## count_tokens
//!
//! `POST /v1/messages/count_tokens` takes a Messages body (`max_tokens`
//! not needed) and answers `{"input_tokens": N}`, N counted as above (every
//! input token, cached or not). Anthropic does not bill it: it costs no
//! quota, draws no fault and bills nothing, but is recorded as an arrival
//! of its own path (and counted in its model's `requests`).

use std::sync::Arc;

use axum::body::Bytes as AxumBytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use super::{content_events, Call, Due, Endpoint, Event, Output, Reply, Route};
use crate::cache::{CacheKind, CacheProbe};
use crate::dialect::Dialect;
use crate::key::key_of;
use crate::record::{Outcome, BAD_REQUEST_MARKER};
use crate::responder::Turn;
use crate::state::{Draft, Shared, Tracker};
use crate::tokens::{count_prompt, Counted, REPLY_PRIMING};
use crate::wire::anthropic::{
    AnthropicErrorDetail, Content, MessageObject, MessageUsage, MessagesRequest, StopDelta, StreamEvent,
    TextBlock,
};
use crate::wire::json_bytes;

/// The path of Anthropic's token counting.
pub(crate) const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";

/// The role of the tool definitions' turn, as counted.
const TOOLS_ROLE: &str = "tools";

/// The Messages endpoint.
#[derive(Debug)]
pub(crate) struct Messages;

/// What the mock reads of a Messages request.
#[derive(Debug)]
pub(crate) struct Checked {
    model: String,
    max_tokens: u64,
    stream: bool,
    /// The system prompt (as a `system` turn) and the turns, as text.
    turns: Vec<Turn>,
    /// The tool definitions' JSON, when there are any.
    tools: Option<String>,
    /// The turns before the cache mark and the marked turn up to it.
    cache_prefix: Option<Vec<Turn>>,
}

impl Checked {
    /// The turns as counted: the tools' turn, then the conversation.
    fn counted(&self) -> Vec<Counted<'_>> {
        let tools = self.tools.as_deref().map(|text| Counted {
            role: TOOLS_ROLE,
            text,
            name: None,
        });
        tools
            .into_iter()
            .chain(self.turns.iter().map(|t| Counted {
                role: &t.role,
                text: &t.text,
                name: None,
            }))
            .collect()
    }

    /// Input tokens as Anthropic would bill them (every cache class).
    fn input(&self) -> u64 {
        count_prompt(&self.model, &self.counted())
    }

    /// The cacheable prefix as a probe of the prompt cache; see the module docs.
    fn cache_probe(&self, input: u64) -> Option<CacheProbe> {
        let prefix = self.cache_prefix.as_ref()?;
        let counted: Vec<Counted<'_>> = prefix
            .iter()
            .map(|t| Counted {
                role: &t.role,
                text: &t.text,
                name: None,
            })
            .collect();
        let tokens = count_prompt(&self.model, &counted)
            .saturating_sub(REPLY_PRIMING)
            .min(input);
        let parts = std::iter::once(self.model.as_bytes())
            .chain(std::iter::once(&b"cache_control"[..]))
            .chain(prefix.iter().flat_map(|t| [t.role.as_bytes(), t.text.as_bytes()]));
        Some(CacheProbe {
            key: key_of(parts),
            tokens,
            kind: CacheKind::Explicit,
        })
    }
}

/// Whether a JSON block carries a `cache_control`.
fn marked_for_cache(block: &Value) -> bool {
    block.get("cache_control").is_some_and(|c| !c.is_null())
}

/// The index of the last block of `blocks` (when an array) carrying a `cache_control`.
fn last_mark(blocks: Option<&Value>) -> Option<usize> {
    blocks?.as_array()?.iter().rposition(marked_for_cache)
}

/// The text of the first `upto + 1` blocks of `blocks`, read as content.
fn blocks_text(blocks: &Value, upto: usize) -> String {
    let part: Vec<Value> = blocks
        .as_array()
        .map(|b| b.iter().take(upto.saturating_add(1)).cloned().collect())
        .unwrap_or_default();
    serde_json::from_value::<Content>(Value::Array(part))
        .map(|c| c.text())
        .unwrap_or_default()
}

/// The JSON text of tool definitions.
fn tools_json(tools: &[Value]) -> String {
    serde_json::to_string(tools).unwrap_or_default()
}

/// The cacheable prefix of a request (`raw` its JSON, `turns` its
/// conversation with the system turn first when `has_system`); see the
/// module docs.
fn cache_prefix(raw: &Value, turns: &[Turn], has_system: bool) -> Option<Vec<Turn>> {
    let tools: &[Value] = raw
        .get("tools")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let messages: &[Value] = raw
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let message_turns = &turns[usize::from(has_system)..];
    let mut prefix = Vec::new();
    let all_tools = (!tools.is_empty()).then(|| Turn::new(TOOLS_ROLE, tools_json(tools)));
    // The last mark wins: look from the end (messages, system, tools).
    if let Some((m, b)) = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(m, msg)| last_mark(msg.get("content")).map(|b| (m, b)))
    {
        prefix.extend(all_tools);
        prefix.extend(turns.iter().take(usize::from(has_system) + m).cloned());
        let role = message_turns.get(m).map_or("user", |t| t.role.as_str());
        let content = messages.get(m).and_then(|msg| msg.get("content"));
        prefix.push(Turn::new(
            role,
            content.map(|c| blocks_text(c, b)).unwrap_or_default(),
        ));
        return Some(prefix);
    }
    if let Some(j) = last_mark(raw.get("system")) {
        prefix.extend(all_tools);
        prefix.push(Turn::new(
            "system",
            raw.get("system").map(|s| blocks_text(s, j)).unwrap_or_default(),
        ));
        return Some(prefix);
    }
    let i = tools.iter().rposition(marked_for_cache)?;
    prefix.push(Turn::new(TOOLS_ROLE, tools_json(&tools[..=i])));
    Some(prefix)
}

/// The request, or the message of a 400 (worded like Anthropic's);
/// `max_tokens` is required unless counting tokens.
fn parse(body: &[u8], need_max_tokens: bool) -> Result<Checked, String> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let req: MessagesRequest = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_data() && path != "." {
            format!("{path}: {inner}")
        } else {
            format!("Invalid JSON in the request body: {inner}")
        }
    })?;
    let model = match req.model {
        Some(m) if !m.is_empty() => m,
        _ => return Err("model: Field required".into()),
    };
    let max_tokens = match req.max_tokens {
        None if need_max_tokens => return Err("max_tokens: Field required".into()),
        None => 0,
        Some(n) => u64::try_from(n)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or("max_tokens: Input should be a valid integer greater than or equal to 1")?,
    };
    let messages = match req.messages {
        Some(m) if !m.is_empty() => m,
        Some(_) => return Err("messages: at least one message is required".into()),
        None => return Err("messages: Field required".into()),
    };
    let mut turns = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = &req.system {
        turns.push(Turn::new("system", system.text()));
    }
    for (i, m) in messages.iter().enumerate() {
        let role = m.role.as_deref().unwrap_or("");
        // Claude Code (2.1) sends system turns inside the conversation.
        if !matches!(role, "user" | "assistant" | "system") {
            return Err(format!(
                "messages.{i}.role: Input should be 'user', 'assistant' or 'system'"
            ));
        }
        let content = m
            .content
            .as_ref()
            .ok_or_else(|| format!("messages.{i}.content: Field required"))?;
        turns.push(Turn::new(role, content.text()));
    }
    // The body parsed as a request: it is JSON.
    let raw: Value = serde_json::from_slice(body).unwrap_or_default();
    let cache_prefix = cache_prefix(&raw, &turns, req.system.is_some());
    Ok(Checked {
        model,
        max_tokens,
        stream: req.stream == Some(true),
        turns,
        tools: req.tools.filter(|t| !t.is_empty()).map(|t| tools_json(&t)),
        cache_prefix,
    })
}

impl Endpoint for Messages {
    const ROUTE: Route = Route::new("/v1/messages", Dialect::Anthropic);
    type Request = Checked;

    fn read(body: &[u8]) -> Result<Call<Checked>, String> {
        let req = parse(body, true)?;
        let input = req.input();
        Ok(Call {
            model: req.model.clone(),
            stream: req.stream,
            marked: req.turns.iter().any(|t| t.text.contains(BAD_REQUEST_MARKER)),
            input,
            max_output: Some(req.max_tokens),
            turns: Some(req.turns.clone()),
            fixed_output: None,
            cache: req.cache_probe(input),
            request: req,
        })
    }

    fn answer(call: &Call<Checked>, out: &Output) -> Reply {
        let id = format!("msg_mock_{}", out.seq);
        let stop_reason = if out.capped { "max_tokens" } else { "end_turn" };
        let usage = |output_tokens| MessageUsage {
            input_tokens: out
                .input
                .saturating_sub(out.cache.write)
                .saturating_sub(out.cache.read),
            cache_creation_input_tokens: out.cache.write,
            cache_read_input_tokens: out.cache.read,
            output_tokens,
        };
        let message = |content, stop, output| MessageObject {
            id: &id,
            kind: "message",
            role: "assistant",
            model: &call.model,
            content,
            stop_reason: stop,
            stop_sequence: None,
            usage: usage(output),
        };
        let json = json_bytes(&message(
            vec![TextBlock::new(&out.text)],
            Some(stop_reason),
            out.tokens,
        ));
        if !call.stream {
            return Reply {
                json,
                events: Vec::new(),
            };
        }
        let start = StreamEvent::MessageStart {
            message: message(Vec::new(), None, 1),
        };
        let start = start.sse();
        let block = StreamEvent::ContentBlockStart {
            index: 0,
            content_block: TextBlock::new(""),
        };
        let mut events = vec![
            Event::new(Due::Start, start),
            Event::new(Due::Start, block.sse()),
            Event::new(Due::Start, StreamEvent::Ping.sse()),
        ];
        events.extend(content_events(&out.text, |part| {
            StreamEvent::ContentBlockDelta {
                index: 0,
                delta: TextBlock::delta(part),
            }
            .sse()
        }));
        events.push(Event::new(
            Due::End,
            StreamEvent::ContentBlockStop { index: 0 }.sse(),
        ));
        let delta = StreamEvent::MessageDelta {
            delta: StopDelta {
                stop_reason,
                stop_sequence: None,
            },
            usage: usage(out.tokens),
        };
        events.push(Event {
            at: Due::End,
            bytes: delta.sse(),
            bill: true,
        });
        events.push(Event::new(Due::End, StreamEvent::MessageStop.sse()));
        Reply { json, events }
    }

    fn stream_error(_call: &Call<Checked>, _out: &Output, _sent: usize) -> Bytes {
        StreamEvent::Error {
            error: AnthropicErrorDetail {
                kind: "api_error",
                message: "Internal server error",
            },
        }
        .sse()
    }
}

/// `POST /v1/messages/count_tokens`; see the module docs.
pub(crate) async fn count_tokens(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: AxumBytes,
) -> Response {
    let now = Instant::now();
    let mut tracker = Tracker::new(shared.clone());
    let phase = shared.phase_at(now);
    let mut draft = Draft::arriving(now, COUNT_TOKENS_PATH, &headers, &phase.name);
    let dialect = Dialect::Anthropic;
    let answer = match parse(&body, false) {
        Err(message) => {
            draft.model_of_invalid(&body);
            shared.record(draft, Outcome::BadRequest, 400, 0);
            dialect.invalid_request(&message)
        }
        Ok(req) if req.turns.iter().any(|t| t.text.contains(BAD_REQUEST_MARKER)) => {
            draft.model = req.model;
            shared.record(draft, Outcome::BadRequest, 400, 0);
            dialect.invalid_request("The request was refused by the mock (bad-request marker).")
        }
        Ok(req) => {
            draft.model = req.model.clone();
            shared.record(draft, Outcome::Ok, 200, 0);
            let body = json_bytes(&serde_json::json!({ "input_tokens": req.input() }));
            (StatusCode::OK, [(CONTENT_TYPE, "application/json")], body).into_response()
        }
    };
    tracker.finish();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_refuses_what_anthropic_refuses() {
        let ok = br#"{"model":"claude-m","max_tokens":5,"system":[{"type":"text","text":"sys"}],
                     "messages":[{"role":"user","content":[{"type":"text","text":"hi"},
                     {"type":"tool_result","tool_use_id":"t","content":"42"}]}],"stream":true}"#;
        let r = parse(ok, true).unwrap();
        assert_eq!((r.model.as_str(), r.max_tokens, r.stream), ("claude-m", 5, true));
        assert_eq!(r.turns[0].role, "system");
        assert_eq!(r.turns[0].text, "sys");
        assert_eq!(r.turns[1].text, "hi\n42");
        for (body, needle) in [
            (&b"{"[..], "Invalid JSON"),
            (
                br#"{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
                "model",
            ),
            (
                br#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
                "max_tokens: Field required",
            ),
            (
                br#"{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
                "max_tokens",
            ),
            (br#"{"model":"m","max_tokens":5,"messages":[]}"#, "at least one"),
            (
                br#"{"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}"#,
                "role",
            ),
        ] {
            let e = parse(body, true).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
        assert!(parse(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
            false
        )
        .is_ok());
    }

    #[test]
    fn the_cache_prefix_ends_at_the_last_marked_block() {
        let body = br#"{"model":"claude-m","max_tokens":5,
            "tools":[{"name":"t","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],
            "system":[{"type":"text","text":"one"},{"type":"text","text":"two","cache_control":{"type":"ephemeral"}},{"type":"text","text":"three"}],
            "messages":[{"role":"user","content":"hi"}]}"#;
        let r = parse(body, true).unwrap();
        let prefix = r.cache_prefix.clone().unwrap();
        let texts: Vec<(&str, &str)> = prefix
            .iter()
            .map(|t| (t.role.as_str(), t.text.as_str()))
            .collect();
        assert_eq!(
            texts[1],
            (
                "system", "one
two"
            )
        );
        assert_eq!(texts[0].0, "tools");
        let input = r.input();
        let probe = r.cache_probe(input).unwrap();
        assert!(probe.tokens > 0 && probe.tokens < input, "{probe:?} of {input}");

        let body = br#"{"model":"claude-m","max_tokens":5,"system":"sys",
            "messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}},{"type":"text","text":"c"}]},
                        {"role":"assistant","content":"ok"}]}"#;
        let r = parse(body, true).unwrap();
        let prefix = r.cache_prefix.clone().unwrap();
        let texts: Vec<(&str, &str)> = prefix
            .iter()
            .map(|t| (t.role.as_str(), t.text.as_str()))
            .collect();
        assert_eq!(
            texts,
            [
                ("system", "sys"),
                (
                    "user", "a
b"
                )
            ]
        );
        let plain = parse(
            br#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
            true,
        )
        .unwrap();
        assert!(plain.cache_prefix.is_none() && plain.cache_probe(plain.input()).is_none());
    }
}
