//! [`StreamEncoder`]: a chat chunk stream as Anthropic's Messages events.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::answer::{reasoning, tool_id};
use super::{error_body, message_id, stop_reason, Tokens};
use crate::provider::{ChatChunk, Usage};

/// The content block open in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    /// A tool call, by its chat `index`.
    Tool(u64),
}

/// Renders a chat chunk stream as Anthropic's server-sent events, in the
/// order Anthropic publishes:
///
/// 1. `message_start` (`id` = `msg_` + the first chunk's id, the asked
///    model, empty `content`, `usage` with the input estimate and
///    `output_tokens: 1`, as Anthropic sends a small number there);
/// 2. per content block, `content_block_start` (`thinking` / `text` /
///    `tool_use` with `input: {}`), its `content_block_delta`s
///    (`thinking_delta` / `text_delta` / `input_json_delta`), and
///    `content_block_stop`; blocks are never interleaved: output of another
///    kind (or another tool call) closes the open block and starts the next
///    index;
/// 3. `message_delta` (`stop_reason`, `stop_sequence`, `usage`: the chat
///    stream's final usage, or the input estimate and 0 output tokens when
///    the provider sent none) and `message_stop`.
///
/// Chat deltas read: `reasoning_content` (or `reasoning`), `content`,
/// `refusal` (as text) and `tool_calls` (`[{"index","id"?,"function":
/// {"name"?,"arguments"}}]`, a call starting a block when its index is new;
/// arguments arriving for a call whose block was already closed — no
/// provider known to pressure sends them so — are left out, as Anthropic
/// cannot reopen a block). Only choice 0 is rendered.
#[derive(Debug, Clone)]
pub struct StreamEncoder {
    model: String,
    input_estimate: u64,
    /// The message id, once `message_start` is sent.
    id: Option<String>,
    /// `message_stop` or `error` sent: nothing more is written.
    done: bool,
    open: Option<Open>,
    /// The index of the next content block.
    next_index: u64,
    /// The chat indexes of the tool calls that got a block.
    tools: HashSet<u64>,
    finish: Option<String>,
    /// The finishing choice's other fields (a vLLM `stop_reason`).
    finish_extra: Map<String, Value>,
    usage: Option<Usage>,
}

impl StreamEncoder {
    /// An encoder for one answer, named `model` (the model the client
    /// asked for), `input_tokens_estimate` being the prompt tokens the
    /// gateway counted (what `message_start` reports: the provider's count
    /// only comes at the end).
    pub fn new(model: &str, input_tokens_estimate: u64) -> Self {
        Self {
            model: model.to_owned(),
            input_estimate: input_tokens_estimate,
            id: None,
            done: false,
            open: None,
            next_index: 0,
            tools: HashSet::new(),
            finish: None,
            finish_extra: Map::new(),
            usage: None,
        }
    }

    /// Writes the events of one chat chunk to `out`: `message_start` on the
    /// first call, then the blocks its deltas open, extend or close. A chunk
    /// with `usage` records it (for `message_delta`); a `finish_reason`
    /// records the stop reason. Nothing is written after [`finish`](Self::finish)
    /// or [`fail`](Self::fail).
    pub fn chunk(&mut self, chunk: &ChatChunk, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if let Some(u) = &chunk.usage {
            self.usage = Some(u.clone());
        }
        self.start(&chunk.header.id, out);
        let Some(choice) = chunk.choices.iter().find(|c| c.index == 0) else {
            return;
        };
        let d = &choice.delta;
        if let Some(t) = reasoning(&d.extra) {
            self.open_block(Open::Thinking, out);
            self.delta(json!({"type": "thinking_delta", "thinking": t}), out);
        }
        let refusal = d.extra.get("refusal").and_then(Value::as_str);
        for text in [d.content.as_deref(), refusal].into_iter().flatten() {
            if !text.is_empty() {
                self.open_block(Open::Text, out);
                self.delta(json!({"type": "text_delta", "text": text}), out);
            }
        }
        if let Some(calls) = d.extra.get("tool_calls").and_then(Value::as_array) {
            for (pos, call) in calls.iter().enumerate() {
                self.tool_call(call, pos, out);
            }
        }
        if let Some(f) = &choice.finish_reason {
            self.finish = Some(f.clone());
            self.finish_extra = choice.extra.clone();
        }
    }

    /// Ends the answer: closes the open block, writes `message_delta` and
    /// `message_stop` (after a `message_start` when no chunk came).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.start("", out);
        self.close(out);
        let (reason, sequence) =
            stop_reason(self.finish.as_deref(), !self.tools.is_empty(), &self.finish_extra);
        let usage = match &self.usage {
            Some(u) => Tokens::of(u),
            None => Tokens {
                input: self.input_estimate,
                ..Tokens::default()
            },
        };
        event(
            out,
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": usage.to_json(),
            }),
        );
        event(out, "message_stop", &json!({"type": "message_stop"}));
        self.done = true;
    }

    /// Ends the answer with an `error` event (`{"type":"error","error":
    /// {"type","message"}}`), as Anthropic reports a failure inside a stream
    /// that already answered 200: after `message_start` if it was sent, the
    /// open block left open, no `message_stop`.
    pub fn fail(&mut self, error_type: &str, message: &str, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        event(out, "error", &error_body(error_type, message));
        self.done = true;
    }

    /// Writes a keep-alive `ping` event, as Anthropic sends between events.
    pub fn ping(out: &mut Vec<u8>) {
        event(out, "ping", &json!({"type": "ping"}));
    }

    /// `message_start`, once; `chunk_id` names the message.
    fn start(&mut self, chunk_id: &str, out: &mut Vec<u8>) {
        if self.id.is_some() {
            return;
        }
        let id = message_id(chunk_id);
        let mut usage = match &self.usage {
            Some(u) => Tokens::of(u),
            None => Tokens {
                input: self.input_estimate,
                ..Tokens::default()
            },
        };
        usage.output = 1;
        let message = json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": usage.to_json(),
        });
        event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
        self.id = Some(id);
    }

    /// One chat tool-call delta: a new call index starts a `tool_use`
    /// block; its arguments are `input_json_delta`s.
    fn tool_call(&mut self, call: &Value, pos: usize, out: &mut Vec<u8>) {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| u64::try_from(pos).unwrap_or(u64::MAX));
        if self.open != Some(Open::Tool(index)) {
            if self.tools.contains(&index) {
                return;
            }
            self.close(out);
            let msg_id = self.id.as_deref().unwrap_or("");
            let block = json!({
                "type": "tool_use",
                "id": tool_id(call.get("id").and_then(Value::as_str), msg_id, index),
                "name": call.pointer("/function/name").and_then(Value::as_str).unwrap_or(""),
                "input": {},
            });
            self.begin(Open::Tool(index), block, out);
            self.tools.insert(index);
        }
        if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
            if !args.is_empty() {
                self.delta(json!({"type": "input_json_delta", "partial_json": args}), out);
            }
        }
    }

    /// Makes `kind` (a thinking or text block) the open block.
    fn open_block(&mut self, kind: Open, out: &mut Vec<u8>) {
        if self.open == Some(kind) {
            return;
        }
        self.close(out);
        let block = match kind {
            Open::Thinking => json!({"type": "thinking", "thinking": ""}),
            _ => json!({"type": "text", "text": ""}),
        };
        self.begin(kind, block, out);
    }

    /// `content_block_start` of `block` at the next index.
    fn begin(&mut self, kind: Open, block: Value, out: &mut Vec<u8>) {
        event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": self.next_index, "content_block": block}),
        );
        self.open = Some(kind);
    }

    /// A `content_block_delta` of the open block.
    fn delta(&self, delta: Value, out: &mut Vec<u8>) {
        event(
            out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.next_index, "delta": delta}),
        );
    }

    /// `content_block_stop` of the open block, if one is open.
    fn close(&mut self, out: &mut Vec<u8>) {
        if self.open.take().is_some() {
            event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": self.next_index}),
            );
            self.next_index = self.next_index.saturating_add(1);
        }
    }
}

/// One server-sent event ([`write_event`](crate::ingress::write_event)).
fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
    crate::ingress::write_event(out, name, data);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(v: Value) -> ChatChunk {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    /// A chunk of completion `c1` whose choice 0 has `delta` and `finish`.
    fn delta(delta: Value, finish: Option<&str>) -> ChatChunk {
        chunk(
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "gpt-x",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    }

    fn usage_chunk(prompt: u64, completion: u64) -> ChatChunk {
        chunk(
            json!({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                     "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion}}),
        )
    }

    /// The events of SSE text as (name, data), checking the framing: each
    /// event is `event:` then `data:` with JSON whose `type` is the name.
    fn events(out: &[u8]) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(out).unwrap_or_else(|e| panic!("utf-8: {e}"));
        assert!(text.ends_with("\n\n"), "events end with a blank line: {text:?}");
        text.split_terminator("\n\n")
            .map(|e| {
                let mut lines = e.lines();
                let name = lines.next().and_then(|l| l.strip_prefix("event: "));
                let data = lines.next().and_then(|l| l.strip_prefix("data: "));
                assert!(lines.next().is_none(), "one data line: {e:?}");
                let (Some(name), Some(data)) = (name, data) else {
                    panic!("not an event: {e:?}")
                };
                let data: Value = serde_json::from_str(data).unwrap_or_else(|err| panic!("{data}: {err}"));
                assert_eq!(data["type"], name, "{e}");
                (name.to_owned(), data)
            })
            .collect()
    }

    fn names(ev: &[(String, Value)]) -> Vec<&str> {
        ev.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn a_text_answer() {
        let mut enc = StreamEncoder::new("claude-sonnet-4-5", 42);
        let mut out = Vec::new();
        enc.chunk(
            &delta(json!({"role": "assistant", "content": ""}), None),
            &mut out,
        );
        enc.chunk(&delta(json!({"content": "Hel"}), None), &mut out);
        enc.chunk(&delta(json!({"content": "lo"}), None), &mut out);
        enc.chunk(&delta(json!({}), Some("stop")), &mut out);
        StreamEncoder::ping(&mut out);
        enc.chunk(&usage_chunk(40, 2), &mut out);
        enc.finish(&mut out);
        enc.finish(&mut out);
        enc.chunk(&delta(json!({"content": "late"}), None), &mut out);
        let ev = events(&out);
        assert_eq!(
            names(&ev),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "ping",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            ev[0].1["message"],
            json!({"id": "msg_c1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                   "content": [], "stop_reason": null, "stop_sequence": null,
                   "usage": {"input_tokens": 42, "output_tokens": 1,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
        );
        assert_eq!(ev[1].1["content_block"], json!({"type": "text", "text": ""}));
        assert_eq!(ev[2].1["delta"], json!({"type": "text_delta", "text": "Hel"}));
        assert_eq!(ev[3].1["index"], 0);
        assert_eq!(
            ev[6].1,
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                   "usage": {"input_tokens": 40, "output_tokens": 2,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
        );
    }

    #[test]
    fn text_then_tool_calls() {
        let mut enc = StreamEncoder::new("claude-x", 10);
        let mut out = Vec::new();
        enc.chunk(
            &delta(json!({"role": "assistant", "content": "Checking."}), None),
            &mut out,
        );
        let call = |index: u64, id: Option<&str>, name: Option<&str>, args: &str| {
            let mut f = json!({"arguments": args});
            if let Some(n) = name {
                f["name"] = json!(n);
            }
            let mut c = json!({"index": index, "function": f});
            if let Some(id) = id {
                c["id"] = json!(id);
                c["type"] = json!("function");
            }
            delta(json!({"tool_calls": [c]}), None)
        };
        enc.chunk(&call(0, Some("call_a"), Some("get_weather"), ""), &mut out);
        enc.chunk(&call(0, None, None, "{\"city\":"), &mut out);
        enc.chunk(&call(0, None, None, "\"Paris\"}"), &mut out);
        enc.chunk(&call(1, None, Some("get_time"), "{}"), &mut out);
        enc.chunk(&delta(json!({}), Some("tool_calls")), &mut out);
        enc.finish(&mut out);
        let ev = events(&out);
        assert_eq!(
            names(&ev),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            ev[4].1,
            json!({"type": "content_block_start", "index": 1,
                   "content_block": {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {}}})
        );
        let args: String = ev[5..7]
            .iter()
            .map(|(_, d)| {
                assert_eq!(d["index"], 1);
                assert_eq!(d["delta"]["type"], "input_json_delta");
                d["delta"]["partial_json"].as_str().unwrap_or_default().to_owned()
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).ok(),
            Some(json!({"city": "Paris"}))
        );
        assert_eq!(
            ev[8].1["content_block"],
            json!({"type": "tool_use", "id": "toolu_c1_1", "name": "get_time", "input": {}}),
            "a call without an id gets one"
        );
        assert_eq!(ev[10].1["index"], 2);
        assert_eq!(ev[11].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(
            ev[11].1["usage"]["input_tokens"], 10,
            "the estimate when no usage came"
        );
    }

    #[test]
    fn thinking_then_text() {
        let mut enc = StreamEncoder::new("claude-x", 0);
        let mut out = Vec::new();
        enc.chunk(
            &delta(json!({"role": "assistant", "reasoning_content": "Hmm,"}), None),
            &mut out,
        );
        enc.chunk(&delta(json!({"reasoning_content": " 2+2."}), None), &mut out);
        enc.chunk(&delta(json!({"content": "4"}), Some("length")), &mut out);
        enc.finish(&mut out);
        let ev = events(&out);
        assert_eq!(
            names(&ev),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            ev[1].1["content_block"],
            json!({"type": "thinking", "thinking": ""})
        );
        assert_eq!(
            ev[2].1["delta"],
            json!({"type": "thinking_delta", "thinking": "Hmm,"})
        );
        assert_eq!(ev[5].1["index"], 1);
        assert_eq!(ev[5].1["content_block"], json!({"type": "text", "text": ""}));
        assert_eq!(ev[6].1["delta"], json!({"type": "text_delta", "text": "4"}));
        assert_eq!(ev[8].1["delta"]["stop_reason"], "max_tokens");
    }

    #[test]
    fn an_error_after_the_start() {
        let mut enc = StreamEncoder::new("claude-x", 5);
        let mut out = Vec::new();
        enc.chunk(&delta(json!({"content": "Par"}), None), &mut out);
        enc.fail("overloaded_error", "Overloaded", &mut out);
        enc.finish(&mut out);
        enc.fail("api_error", "again", &mut out);
        let ev = events(&out);
        assert_eq!(
            names(&ev),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "error"
            ]
        );
        assert_eq!(
            ev[3].1,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        );
    }

    #[test]
    fn an_error_before_any_chunk_and_an_empty_answer() {
        let mut out = Vec::new();
        StreamEncoder::new("m", 1).fail("api_error", "boom", &mut out);
        assert_eq!(names(&events(&out)), ["error"]);
        let mut out = Vec::new();
        StreamEncoder::new("m", 1).finish(&mut out);
        let ev = events(&out);
        assert_eq!(names(&ev), ["message_start", "message_delta", "message_stop"]);
        assert!(ev[0].1["message"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("msg_")));
        assert_eq!(ev[1].1["delta"]["stop_reason"], "end_turn");
    }

    #[test]
    fn cache_usage_in_the_final_delta() {
        let mut enc = StreamEncoder::new("m", 9);
        let mut out = Vec::new();
        enc.chunk(&delta(json!({"content": "ok"}), Some("stop")), &mut out);
        enc.chunk(
            &chunk(
                json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 900, "completion_tokens": 3,
                "total_tokens": 903, "prompt_tokens_details": {"cached_tokens": 800}}}),
            ),
            &mut out,
        );
        enc.finish(&mut out);
        let ev = events(&out);
        let last_delta = ev
            .iter()
            .rev()
            .find(|(n, _)| n == "message_delta")
            .map(|(_, d)| d.clone());
        assert_eq!(
            last_delta.map(|d| d["usage"].clone()),
            Some(json!({"input_tokens": 100, "output_tokens": 3,
                        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 800}))
        );
    }

    #[test]
    fn late_arguments_of_a_closed_call_and_a_stop_sequence() {
        let mut enc = StreamEncoder::new("m", 1);
        let mut out = Vec::new();
        let call = |index: u64, args: &str| {
            delta(
                json!({"tool_calls": [{"index": index, "id": format!("call_{index}"),
                                          "function": {"name": "f", "arguments": args}}]}),
                None,
            )
        };
        enc.chunk(&call(0, "{}"), &mut out);
        enc.chunk(&call(1, "{}"), &mut out);
        enc.chunk(&call(0, "{\"late\":1}"), &mut out);
        let mut end = delta(json!({}), Some("stop"));
        if let Some(c) = end.choices.first_mut() {
            c.extra.insert("stop_reason".into(), json!("###"));
        }
        enc.chunk(&end, &mut out);
        enc.finish(&mut out);
        let ev = events(&out);
        let starts = ev.iter().filter(|(n, _)| n == "content_block_start").count();
        let deltas = ev.iter().filter(|(n, _)| n == "content_block_delta").count();
        assert_eq!((starts, deltas), (2, 2), "a closed block is never reopened");
        let md = ev
            .iter()
            .find(|(n, _)| n == "message_delta")
            .map(|(_, d)| d["delta"].clone());
        // Tool calls came, so the answer stops for them whatever the finish said.
        assert_eq!(
            md,
            Some(json!({"stop_reason": "tool_use", "stop_sequence": null}))
        );

        let mut enc = StreamEncoder::new("m", 1);
        let mut out = Vec::new();
        enc.chunk(&delta(json!({"content": "a"}), None), &mut out);
        enc.chunk(&end, &mut out);
        enc.finish(&mut out);
        let md = events(&out)
            .into_iter()
            .find(|(n, _)| n == "message_delta")
            .map(|(_, d)| d["delta"].clone());
        assert_eq!(
            md,
            Some(json!({"stop_reason": "stop_sequence", "stop_sequence": "###"}))
        );
    }
}
