//! Anthropic's streaming events as `chat.completion.chunk` events.
//!
//! [`EventTranslator`] turns one Anthropic event into the chat-completions
//! server-sent events it stands for; `translate_body` applies it to a
//! response body, so the ordinary [`ChatStream`](crate::provider::ChatStream)
//! parses the result:
//!
//! | Anthropic event | chat-completions events |
//! |---|---|
//! | `message_start` (`id`, `model`, `usage.input_tokens`) | a chunk with `delta: {"role":"assistant","content":""}` |
//! | `content_block_start` `text` | a content delta, when the block starts with text |
//! | `content_block_start` `tool_use` (`id`, `name`) | `delta.tool_calls: [{"index": k, "id", "type":"function", "function":{"name","arguments":""}}]` (`k` counts the tool calls of the answer) |
//! | `content_block_delta` `text_delta` | `delta.content` |
//! | `content_block_delta` `input_json_delta` | `delta.tool_calls: [{"index": k, "function":{"arguments": partial_json}}]` |
//! | `content_block_start` / `input_json_delta` of [`ANSWER_TOOL`] (a `json_schema` response format) | nothing / `delta.content` (the JSON text); `stop_reason` `tool_use` then finishes as `stop` |
//! | `content_block_delta` `thinking_delta` | `delta.reasoning_content` |
//! | `content_block_stop`, `signature_delta`, `citations_delta`, unknown events | nothing |
//! | `message_delta` (`stop_reason`, `usage`) | a chunk with `finish_reason` ([`finish_reason`]), then the usage chunk (`choices: []`, `usage` from the message's input and the delta's output tokens) |
//! | `message_stop` | `data: [DONE]` |
//! | `ping` | an SSE comment (a keep-alive, like Anthropic's) |
//! | `error` (`{"type":"error","error":{...}}`) | `event: error` with the same data: `ChatStream` fails with the error classified by [`taxonomy::classify`](crate::taxonomy::classify) (`overloaded_error` → overloaded, `api_error` → server error, ...) |
//!
//! Chunks carry the message's `id` and `model` and `created: 0` (Anthropic
//! sends no timestamp). The usage chunk is always sent: the client asks OpenAI providers for it
//! too (`include_usage`), and the gateway passes it to its own client only
//! when that client asked. Data that is not JSON is passed on as it came,
//! so `ChatStream` fails on it as on any malformed event.
//!
//! Every body chunk from the provider yields one translated chunk (possibly
//! empty), so `ChatStream`'s read timeout between chunks measures the
//! provider's silence, not the translation's.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::response::{finish_reason, to_usage};
use super::ANSWER_TOOL;
use crate::provider::body::BodyStream;
use crate::provider::sse::{native_event_chunk, translate_body_with, EventTranslate};

/// What a content block of the answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    /// A tool call, with its index among the answer's tool calls.
    Tool(u32),
    /// The forced tool of a `json_schema` response format: its input is
    /// the content.
    Answer,
    Thinking,
    Other,
}

/// Translates Anthropic events, one at a time, in order; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct EventTranslator {
    id: String,
    model: String,
    blocks: HashMap<u64, Block>,
    tools: u32,
    /// Anthropic's usage figures so far (`message_start`, then `message_delta`).
    usage: Map<String, Value>,
    /// Also pass each event on verbatim, before its translation
    /// ([`native_event_chunk`]).
    keep_native: bool,
}

impl Default for EventTranslator {
    fn default() -> Self {
        Self::new()
    }
}

impl EventTranslator {
    /// A translator for one stream.
    pub(crate) fn new() -> Self {
        Self {
            id: String::new(),
            model: String::new(),
            blocks: HashMap::new(),
            tools: 0,
            usage: Map::new(),
            keep_native: false,
        }
    }

    /// A translator that also passes every event on verbatim, an `error`
    /// included (for a request sent natively: the Messages ingress answers
    /// with the provider's own events).
    pub(crate) fn keeping_native() -> Self {
        Self {
            keep_native: true,
            ..Self::new()
        }
    }

    /// The chat-completions SSE text for one Anthropic event (`event:` name
    /// and `data:`), empty when it stands for nothing.
    pub(crate) fn event(&mut self, name: Option<&str>, data: &str) -> String {
        let translated = self.translate(name, data);
        if self.keep_native {
            let mut out = native_event_chunk(name, data);
            out.push_str(&translated);
            return out;
        }
        translated
    }

    /// [`event`](Self::event) without the verbatim copy.
    fn translate(&mut self, name: Option<&str>, data: &str) -> String {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return format!("data: {data}\n\n");
        };
        let ty = v.get("type").and_then(Value::as_str).or(name).unwrap_or("");
        match ty {
            "message_start" => {
                let m = &v["message"];
                self.id = m.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                self.model = m.get("model").and_then(Value::as_str).unwrap_or("").to_owned();
                if let Some(u) = m.get("usage").and_then(Value::as_object) {
                    self.merge_usage(u);
                }
                self.chunk(json!({"role": "assistant", "content": ""}), None)
            }
            "content_block_start" => self.block_start(&v),
            "content_block_delta" => self.block_delta(&v),
            "message_delta" => {
                if let Some(u) = v.get("usage").and_then(Value::as_object) {
                    self.merge_usage(u);
                }
                let mut out = String::new();
                if let Some(reason) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    let finish = match reason {
                        // Only the forced answer tool was used: a plain answer.
                        "tool_use" if self.tools == 0 => "stop",
                        _ => finish_reason(reason),
                    };
                    out.push_str(&self.chunk(json!({}), Some(finish)));
                }
                out.push_str(&self.usage_chunk());
                out
            }
            "message_stop" => "data: [DONE]\n\n".to_owned(),
            "ping" => ": ping\n\n".to_owned(),
            "error" => format!("event: error\ndata: {data}\n\n"),
            // content_block_stop, and event types added after this was written.
            _ => String::new(),
        }
    }

    /// `content_block_start`: the block's kind remembered by its index;
    /// text, a tool call's head or thinking that the block starts with.
    fn block_start(&mut self, v: &Value) -> String {
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let b = &v["content_block"];
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                self.blocks.insert(index, Block::Text);
                match b.get("text").and_then(Value::as_str) {
                    Some(t) if !t.is_empty() => self.chunk(json!({"content": t}), None),
                    _ => String::new(),
                }
            }
            Some("tool_use") if b.get("name").and_then(Value::as_str) == Some(ANSWER_TOOL) => {
                self.blocks.insert(index, Block::Answer);
                String::new()
            }
            Some("tool_use") => {
                let k = self.tools;
                self.tools += 1;
                self.blocks.insert(index, Block::Tool(k));
                let call = json!({
                    "index": k,
                    "id": b.get("id").and_then(Value::as_str).unwrap_or(""),
                    "type": "function",
                    "function": {"name": b.get("name").and_then(Value::as_str).unwrap_or(""), "arguments": ""},
                });
                self.chunk(json!({"tool_calls": [call]}), None)
            }
            Some("thinking") => {
                self.blocks.insert(index, Block::Thinking);
                match b.get("thinking").and_then(Value::as_str) {
                    Some(t) if !t.is_empty() => self.chunk(json!({"reasoning_content": t}), None),
                    _ => String::new(),
                }
            }
            _ => {
                self.blocks.insert(index, Block::Other);
                String::new()
            }
        }
    }

    /// `content_block_delta`: text, a tool call's (or the answer tool's)
    /// arguments, or thinking.
    fn block_delta(&mut self, v: &Value) -> String {
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let block = self.blocks.get(&index).copied();
        let d = &v["delta"];
        let text_of = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
        match (d.get("type").and_then(Value::as_str), block) {
            (Some("text_delta"), _) => self.text_chunk(text_of("text"), |t| json!({"content": t})),
            (Some("input_json_delta"), Some(Block::Answer)) => {
                self.text_chunk(text_of("partial_json"), |t| json!({"content": t}))
            }
            (Some("input_json_delta"), Some(Block::Tool(k))) => self.text_chunk(
                text_of("partial_json"),
                |t| json!({"tool_calls": [{"index": k, "function": {"arguments": t}}]}),
            ),
            (Some("thinking_delta"), _) => {
                self.text_chunk(text_of("thinking"), |t| json!({"reasoning_content": t}))
            }
            _ => String::new(),
        }
    }

    /// The chunk whose delta `delta` makes of a piece of text; nothing for
    /// an empty piece.
    fn text_chunk(&self, text: &str, delta: impl FnOnce(&str) -> Value) -> String {
        if text.is_empty() {
            String::new()
        } else {
            self.chunk(delta(text), None)
        }
    }

    fn merge_usage(&mut self, u: &Map<String, Value>) {
        for (k, v) in u {
            if !v.is_null() {
                self.usage.insert(k.clone(), v.clone());
            }
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        let c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        format!("data: {c}\n\n")
    }

    fn usage_chunk(&self) -> String {
        let usage = serde_json::to_value(to_usage(&Value::Object(self.usage.clone()))).unwrap_or(Value::Null);
        let c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": [],
            "usage": usage,
        });
        format!("data: {c}\n\n")
    }
}

impl EventTranslate for EventTranslator {
    fn event(&mut self, name: Option<&str>, data: &str) -> String {
        EventTranslator::event(self, name, data)
    }
}

pub(crate) fn translate_body(body: BodyStream, keep_native: bool) -> BodyStream {
    let translator = if keep_native {
        EventTranslator::keeping_native()
    } else {
        EventTranslator::new()
    };
    translate_body_with(body, translator)
}

/// The chat-completions SSE text of a whole Anthropic event stream (for tests).
#[cfg(test)]
pub(crate) fn translate_all(sse: &str) -> String {
    let mut parser = crate::provider::sse::SseParser::default();
    let mut tr = EventTranslator::new();
    let mut events = parser.feed(sse.as_bytes());
    events.extend(parser.finish());
    events
        .iter()
        .map(|(name, data)| tr.event(name.as_deref(), data))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::sse::{SseEvent, SseParser};

    /// The `data:` payloads of translated SSE text, `[DONE]` as a string, comments left out.
    fn events(sse: &str) -> Vec<Value> {
        sse.split("\n\n")
            .filter(|e| !e.trim().is_empty() && !e.starts_with(':'))
            .map(|e| {
                let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("");
                let event = e.lines().find_map(|l| l.strip_prefix("event: "));
                match (event, data) {
                    (Some(name), d) => {
                        json!({"event": name, "data": serde_json::from_str::<Value>(d).unwrap()})
                    }
                    (None, "[DONE]") => json!("[DONE]"),
                    (None, d) => serde_json::from_str(d).unwrap(),
                }
            })
            .collect()
    }

    fn deltas(ev: &[Value]) -> Vec<Value> {
        ev.iter()
            .filter_map(|e| e.pointer("/choices/0/delta").cloned())
            .collect()
    }

    #[test]
    fn text_and_tool_use_stream_fixture() {
        let sse = include_str!("../../../tests/fixtures/anthropic/stream-tool-use.sse");
        let out = translate_all(sse);
        assert!(out.contains(": ping\n\n"), "ping becomes a keep-alive comment");
        let ev = events(&out);
        // Every chunk carries the message's id and model.
        for e in ev.iter().filter(|e| e.is_object() && e.get("event").is_none()) {
            assert_eq!(e["id"], "msg_014p7gG3wDgGV9EUtLvnow3U");
            assert_eq!(e["model"], "claude-sonnet-4-5-20250929");
            assert_eq!(e["object"], "chat.completion.chunk");
        }
        let d = deltas(&ev);
        assert_eq!(d[0], json!({"role": "assistant", "content": ""}));
        let text: String = d.iter().filter_map(|d| d["content"].as_str()).collect();
        assert_eq!(text, "Okay, let me check the weather.");
        let tool_deltas: Vec<&Value> = d.iter().filter_map(|d| d.get("tool_calls")).collect();
        assert_eq!(
            tool_deltas[0],
            &json!([{"index": 0, "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "type": "function",
                     "function": {"name": "get_weather", "arguments": ""}}])
        );
        let first: Vec<&Value> = tool_deltas
            .iter()
            .filter(|t| t[0]["index"] == 0)
            .copied()
            .collect();
        assert!(
            first[1..].iter().all(|t| t[0].get("id").is_none()),
            "only the first delta names the call"
        );
        let args: String = first[1..]
            .iter()
            .map(|t| t[0]["function"]["arguments"].as_str().unwrap())
            .collect();
        let args: Value = serde_json::from_str(&args).unwrap();
        assert_eq!(
            args,
            json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
        );
        // The second tool call gets index 1.
        let second: Vec<&Value> = tool_deltas
            .iter()
            .filter(|t| t[0]["index"] == 1)
            .copied()
            .collect();
        assert_eq!(second[0][0]["function"]["name"], "get_time");
        // finish_reason, then usage, then [DONE].
        let n = ev.len();
        assert_eq!(ev[n - 3]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(ev[n - 2]["choices"], json!([]));
        assert_eq!(
            ev[n - 2]["usage"],
            json!({"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561})
        );
        assert_eq!(ev[n - 1], json!("[DONE]"));
    }

    #[test]
    fn stop_reasons_and_thinking() {
        let mut tr = EventTranslator::new();
        let start = r#"{"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","model":"c","content":[],"stop_reason":null,"usage":{"input_tokens":9,"output_tokens":1}}}"#;
        assert!(tr
            .event(Some("message_start"), start)
            .contains(r#""role":"assistant""#));
        let th = tr.event(
            None,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        );
        assert_eq!(th, "");
        let th = tr.event(
            None,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm."}}"#,
        );
        assert_eq!(
            events(&th)[0]["choices"][0]["delta"],
            json!({"reasoning_content": "Hmm."})
        );
        assert_eq!(tr.event(None, r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"x"}}"#), "");
        assert_eq!(tr.event(None, r#"{"type":"content_block_stop","index":0}"#), "");
        let end = tr.event(
            None,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":5}}"#,
        );
        let ev = events(&end);
        assert_eq!(ev[0]["choices"][0]["finish_reason"], "length");
        assert_eq!(
            ev[1]["usage"],
            json!({"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14})
        );
        let end = tr.event(None, r#"{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{"output_tokens":6}}"#);
        assert_eq!(events(&end)[0]["choices"][0]["finish_reason"], "stop");
        assert_eq!(tr.event(None, r#"{"type":"message_stop"}"#), "data: [DONE]\n\n");
        assert_eq!(
            tr.event(None, r#"{"type":"brand_new_event"}"#),
            "",
            "unknown events are ignored"
        );
    }

    #[test]
    fn error_events_pass_through_as_error_events() {
        let mut tr = EventTranslator::new();
        let data = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            tr.event(Some("error"), data),
            format!("event: error\ndata: {data}\n\n")
        );
        assert_eq!(
            tr.event(None, "{oops"),
            "data: {oops\n\n",
            "malformed data is passed on"
        );
    }

    #[test]
    fn the_answer_tool_streams_as_content() {
        let events = [
            r#"{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":5}}}"#.to_owned(),
            format!(r#"{{"type":"content_block_start","index":0,"content_block":{{"type":"tool_use","id":"t","name":"{ANSWER_TOOL}","input":{{}}}}}}"#),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}"#.to_owned(),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}"#.to_owned(),
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#.to_owned(),
        ];
        let mut tr = EventTranslator::new();
        let out: String = events.iter().map(|e| tr.event(None, e)).collect();
        let chunks: Vec<Value> = out
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let content: String = chunks
            .iter()
            .filter_map(|c| c.pointer("/choices/0/delta/content").and_then(Value::as_str))
            .collect();
        assert_eq!(content, r#"{"city":"Paris"}"#);
        assert!(!out.contains("tool_calls"), "{out}");
        assert!(chunks
            .iter()
            .any(|c| c.pointer("/choices/0/finish_reason") == Some(&json!("stop"))));
    }

    #[test]
    fn events_split_across_chunks_are_reassembled() {
        let sse = include_str!("../../../tests/fixtures/anthropic/stream-tool-use.sse");
        let whole = translate_all(sse);
        // Feed the same bytes seven at a time, with CRLF line ends.
        let crlf = sse.replace('\n', "\r\n");
        let mut parser = SseParser::default();
        let mut tr = EventTranslator::new();
        let mut out = String::new();
        let mut translate = |events: Vec<SseEvent>| {
            for (name, data) in events {
                out.push_str(&tr.event(name.as_deref(), &data));
            }
        };
        for piece in crlf.as_bytes().chunks(7) {
            translate(parser.feed(piece));
        }
        translate(parser.finish());
        assert_eq!(out, whole);
    }
}
