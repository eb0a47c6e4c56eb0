//! `POST /v1/messages` in Anthropic's wire format (the Messages API), with
//! the same phases, quota, faults, billing and recording as the other
//! endpoints (`decide.rs`).
//!
//! The request is read as Anthropic reads it: malformed JSON, no `model`,
//! no (or a non-positive) `max_tokens`, no `messages`, a role other than
//! `user` / `assistant` → `400 invalid_request_error`; `system` is a string
//! or text blocks, content a string or blocks. Its input tokens are counted
//! like a chat prompt (the system prompt and the text of every block, the
//! model's encoding, OpenAI's chat framing). The answer is a `message`
//! body, or the events `message_start`, `content_block_start`, `ping`,
//! `content_block_delta`s, `content_block_stop`, `message_delta`
//! (`stop_reason`, output `usage`), `message_stop`; `stop_reason` is
//! `max_tokens` when the request's `max_tokens` cut the answer, else
//! `end_turn`. Errors are Anthropic-shaped; the quota headers are
//! `anthropic-ratelimit-*`; overloaded is 529.

use super::{content_events, Call, Due, Endpoint, Event, Output, Reply, Route};
use crate::dialect::Dialect;
use crate::record::BAD_REQUEST_MARKER;
use crate::responder::Turn;
use crate::tokens::{count_prompt, Counted};
use crate::wire::anthropic::{
    MessageObject, MessageUsage, MessagesRequest, OutputUsage, StopDelta, StreamEvent, TextBlock,
};
use crate::wire::json_bytes;

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
}

/// The request, or the message of a 400 (worded like Anthropic's).
fn parse(body: &[u8]) -> Result<Checked, String> {
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
        None => return Err("max_tokens: Field required".into()),
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
        if !matches!(role, "user" | "assistant") {
            return Err(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        let content = m
            .content
            .as_ref()
            .ok_or_else(|| format!("messages.{i}.content: Field required"))?;
        turns.push(Turn::new(role, content.text()));
    }
    Ok(Checked {
        model,
        max_tokens,
        stream: req.stream == Some(true),
        turns,
    })
}

impl Endpoint for Messages {
    const ROUTE: Route = Route::new("/v1/messages", Dialect::Anthropic);
    type Request = Checked;

    fn read(body: &[u8]) -> Result<Call<Checked>, String> {
        let req = parse(body)?;
        let counted: Vec<Counted<'_>> = req
            .turns
            .iter()
            .map(|t| Counted {
                role: &t.role,
                text: &t.text,
                name: None,
            })
            .collect();
        Ok(Call {
            model: req.model.clone(),
            stream: req.stream,
            marked: req.turns.iter().any(|t| t.text.contains(BAD_REQUEST_MARKER)),
            input: count_prompt(&req.model, &counted),
            max_output: Some(req.max_tokens),
            turns: Some(req.turns.clone()),
            request: req,
        })
    }

    fn answer(call: &Call<Checked>, out: &Output) -> Reply {
        let id = format!("msg_mock_{}", out.seq);
        let stop_reason = if out.capped { "max_tokens" } else { "end_turn" };
        let message = |content, stop, output| MessageObject {
            id: &id,
            kind: "message",
            role: "assistant",
            model: &call.model,
            content,
            stop_reason: stop,
            stop_sequence: None,
            usage: MessageUsage {
                input_tokens: out.input,
                output_tokens: output,
            },
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
            usage: OutputUsage {
                output_tokens: out.tokens,
            },
        };
        events.push(Event {
            at: Due::End,
            bytes: delta.sse(),
            bill: true,
        });
        events.push(Event::new(Due::End, StreamEvent::MessageStop.sse()));
        Reply { json, events }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_refuses_what_anthropic_refuses() {
        let ok = br#"{"model":"claude-m","max_tokens":5,"system":[{"type":"text","text":"sys"}],
                     "messages":[{"role":"user","content":[{"type":"text","text":"hi"},
                     {"type":"tool_result","tool_use_id":"t","content":"42"}]}],"stream":true}"#;
        let r = parse(ok).unwrap();
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
                br#"{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}"#,
                "role",
            ),
        ] {
            let e = parse(body).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }
}
