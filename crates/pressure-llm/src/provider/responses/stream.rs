//! OpenAI Responses streaming events as `chat.completion.chunk` events.
//!
//! [`EventTranslator`] turns one Responses event into the chat-completions
//! server-sent events it stands for; [`translate_body`] applies it to a
//! response body, so the ordinary [`ChatStream`](crate::provider::ChatStream)
//! parses the result:
//!
//! | Responses event | chat-completions events |
//! |---|---|
//! | `response.created` (`response.id`, `model`, `created_at`) | a chunk with `delta: {"role":"assistant","content":""}` |
//! | `response.output_text.delta` | `delta.content` |
//! | `response.refusal.delta` | `delta.refusal` |
//! | `response.output_item.added` of a `function_call` (`call_id`, `name`) | `delta.tool_calls: [{"index": k, "id", "type":"function", "function":{"name","arguments":""}}]` (`k` counts the answer's calls) |
//! | `response.function_call_arguments.delta` (`item_id`) | `delta.tool_calls: [{"index": k, "function":{"arguments"}}]` |
//! | `response.reasoning_summary_text.delta`, `response.reasoning_text.delta` | `delta.reasoning_content` (a blank line between summary parts) |
//! | `response.completed`, `response.incomplete` | a chunk with `finish_reason` (`stop`, `tool_calls`, `length`, `content_filter`), the usage chunk (`choices: []`, [`to_usage`]) when the response has usage, then `data: [DONE]` |
//! | `response.failed`, `error` | `event: error` ([`error_data`]): `ChatStream` fails with the error classified by [`taxonomy::classify`](crate::taxonomy::classify) |
//! | anything else (`response.in_progress`, `*.done`, `response.content_part.*`, hosted tools' events, ...) | nothing |
//!
//! With `keep_native`, every provider event is also passed on verbatim,
//! before its translation, as a chunk with no choices carrying
//! `{"event", "data"}` in [`NATIVE_FIELD`] (an ingress of the Responses
//! dialect forwards those; the chat path ignores them). A failure too: the
//! agent gets the provider's own `response.failed`, and `ChatStream` then
//! ends on its translation.
//!
//! Data that is not JSON is passed on as it came, so `ChatStream` fails on
//! it as on any malformed event. Every body chunk from the provider yields
//! one translated chunk (possibly empty), so `ChatStream`'s read timeout
//! between chunks measures the provider's silence, not the translation's.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::response::{finish_reason, to_usage};
use crate::provider::body::BodyStream;
use crate::provider::sse::{native_event_chunk, translate_body_with, EventTranslate};

/// The error `type` [`taxonomy::classify`](crate::taxonomy::classify)
/// reads for a Responses error `code` inside a 200 stream (where the
/// status says nothing): `rate_limit_exceeded` → `rate_limit_error`
/// (rate limited), `server_is_overloaded` / `slow_down` →
/// `overloaded_error`, `insufficient_quota` and `context_length_exceeded`
/// as they are (a spend cap, the context window), content-policy codes →
/// `content_policy_violation` (a refusal), `invalid_*` and image codes →
/// `invalid_request_error` (a bad request), timeouts → `timeout_error`,
/// and `server_error` or anything else → `api_error` (a server error).
fn error_type(code: &str) -> &'static str {
    match code {
        "rate_limit_exceeded" | "rate_limit_error" => "rate_limit_error",
        "server_is_overloaded" | "slow_down" | "overloaded_error" => "overloaded_error",
        "insufficient_quota" => "insufficient_quota",
        "context_length_exceeded" => "context_length_exceeded",
        c if c.contains("content_policy") || c.contains("content_filter") => "content_policy_violation",
        c if c.starts_with("invalid_") || c.contains("image") => "invalid_request_error",
        c if c.contains("timeout") => "timeout_error",
        _ => "api_error",
    }
}

/// The data of the `event: error` a Responses failure becomes:
/// `{"type":"error","error":{"type","code","message"}}`, `type` from
/// [`error_type`]. `v` is a `response.failed` event (`response.error`) or
/// an `error` event (`code` and `message` at its top, or in an `error`).
fn error_data(v: &Value) -> Value {
    let error = v
        .pointer("/response/error")
        .or_else(|| v.get("error"))
        .filter(|e| e.is_object())
        .unwrap_or(v);
    let code = error
        .get("code")
        .and_then(Value::as_str)
        .or_else(|| {
            error
                .get("type")
                .and_then(Value::as_str)
                .filter(|t| *t != "error")
        })
        .unwrap_or("server_error");
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the response failed");
    json!({"type": "error", "error": {"type": error_type(code), "code": code, "message": message}})
}

/// Translates Responses events, one at a time, in order; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct EventTranslator {
    keep_native: bool,
    id: String,
    model: String,
    created: u64,
    /// Tool calls of the answer so far.
    tools: u32,
    /// A call's `k` by its item id.
    by_item: HashMap<String, u32>,
    /// A call's `k` by its output index.
    by_index: HashMap<u64, u32>,
}

impl EventTranslator {
    /// A translator for one stream; `keep_native` passes each event on too.
    pub(crate) fn new(keep_native: bool) -> Self {
        Self {
            keep_native,
            id: String::new(),
            model: String::new(),
            created: 0,
            tools: 0,
            by_item: HashMap::new(),
            by_index: HashMap::new(),
        }
    }

    /// The chat-completions SSE text for one Responses event (`event:`
    /// name and `data:`), empty when it stands for nothing.
    pub(crate) fn event(&mut self, name: Option<&str>, data: &str) -> String {
        let parsed = serde_json::from_str::<Value>(data).ok();
        let ty = parsed
            .as_ref()
            .and_then(|v| v.get("type"))
            .and_then(Value::as_str)
            .or(name)
            .unwrap_or("")
            .to_owned();
        if let Some(r) = parsed.as_ref().and_then(|v| v.get("response")) {
            self.remember(r);
        }
        let mut out = String::new();
        if self.keep_native {
            out.push_str(&self.native_chunk(name, data));
        }
        match parsed {
            Some(v) => out.push_str(&self.translate(&ty, &v)),
            None => out.push_str(&format!("data: {data}\n\n")),
        }
        out
    }

    /// The response's id, model and creation time, from the first event
    /// that carries them.
    fn remember(&mut self, r: &Value) {
        let s = |k: &str| r.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
        if self.id.is_empty() {
            if let Some(id) = s("id") {
                id.clone_into(&mut self.id);
            }
        }
        if self.model.is_empty() {
            if let Some(model) = s("model") {
                model.clone_into(&mut self.model);
            }
        }
        if self.created == 0 {
            self.created = r.get("created_at").and_then(Value::as_u64).unwrap_or(0);
        }
    }

    fn translate(&mut self, ty: &str, v: &Value) -> String {
        let text_of = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
        match ty {
            "response.created" => self.chunk(json!({"role": "assistant", "content": ""}), None),
            "response.output_text.delta" => self.text_chunk(text_of("delta"), |t| json!({"content": t})),
            "response.refusal.delta" => self.text_chunk(text_of("delta"), |t| json!({"refusal": t})),
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.text_chunk(text_of("delta"), |t| json!({"reasoning_content": t}))
            }
            "response.reasoning_summary_part.added"
                if v.get("summary_index").and_then(Value::as_u64).unwrap_or(0) > 0 =>
            {
                self.chunk(json!({"reasoning_content": "\n\n"}), None)
            }
            "response.output_item.added" => self.item_added(v),
            "response.function_call_arguments.delta" => {
                let k = v
                    .get("item_id")
                    .and_then(Value::as_str)
                    .and_then(|id| self.by_item.get(id))
                    .or_else(|| {
                        v.get("output_index")
                            .and_then(Value::as_u64)
                            .and_then(|i| self.by_index.get(&i))
                    })
                    .copied();
                match k {
                    Some(k) => self.text_chunk(
                        text_of("delta"),
                        |t| json!({"tool_calls": [{"index": k, "function": {"arguments": t}}]}),
                    ),
                    None => String::new(),
                }
            }
            "response.completed" | "response.incomplete" => {
                self.end(v.get("response").unwrap_or(&Value::Null))
            }
            "response.failed" | "error" => format!("event: error\ndata: {}\n\n", error_data(v)),
            _ => String::new(),
        }
    }

    /// `response.output_item.added`: a function call's head.
    fn item_added(&mut self, v: &Value) -> String {
        let item = v.get("item").unwrap_or(&Value::Null);
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return String::new();
        }
        let k = self.tools;
        self.tools = self.tools.saturating_add(1);
        if let Some(id) = item.get("id").and_then(Value::as_str) {
            self.by_item.insert(id.to_owned(), k);
        }
        if let Some(i) = v.get("output_index").and_then(Value::as_u64) {
            self.by_index.insert(i, k);
        }
        let s = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
        let call = json!({
            "index": k,
            "id": s("call_id"),
            "type": "function",
            "function": {"name": s("name"), "arguments": s("arguments")},
        });
        self.chunk(json!({"tool_calls": [call]}), None)
    }

    /// `response.completed` / `response.incomplete`: the finish, the usage
    /// and `[DONE]`.
    fn end(&self, response: &Value) -> String {
        let has_calls = self.tools > 0
            || response.get("output").and_then(Value::as_array).is_some_and(|o| {
                o.iter()
                    .any(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
            });
        let mut out = self.chunk(json!({}), Some(finish_reason(response, has_calls)));
        if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
            let usage = serde_json::to_value(to_usage(usage)).unwrap_or(Value::Null);
            let c = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            });
            out.push_str(&format!("data: {c}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        out
    }

    /// The provider's event as it came, in a chunk without choices (the
    /// one writer of such chunks, [`native_event_chunk`]).
    fn native_chunk(&self, name: Option<&str>, data: &str) -> String {
        native_event_chunk(name, data)
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

    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        let c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
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
    translate_body_with(body, EventTranslator::new(keep_native))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::sse::SseParser;
    use crate::provider::types::ChatChunk;
    use crate::provider::types::NATIVE_FIELD;
    use crate::taxonomy::{classify, ErrorKind};

    /// The chat-completions SSE text of a whole Responses event stream.
    fn translate_all(sse: &str, keep_native: bool) -> String {
        let mut parser = SseParser::default();
        let mut tr = EventTranslator::new(keep_native);
        let mut events = parser.feed(sse.as_bytes());
        events.extend(parser.finish());
        events
            .iter()
            .map(|(name, data)| tr.event(name.as_deref(), data))
            .collect()
    }

    /// SSE text of Responses events, each with its `event:` line.
    fn sse(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect()
    }

    /// The `data:` payloads, `[DONE]` as a string, error events as `{"event","data"}`.
    fn payloads(out: &str) -> Vec<Value> {
        out.split_terminator("\n\n")
            .map(|e| {
                let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                match (e.lines().find_map(|l| l.strip_prefix("event: ")), data) {
                    (Some(name), d) => {
                        json!({"event": name, "data": serde_json::from_str::<Value>(d).unwrap()})
                    }
                    (None, "[DONE]") => json!("[DONE]"),
                    (None, d) => serde_json::from_str(d).unwrap(),
                }
            })
            .collect()
    }

    fn response(status: &str, output: Value, usage: Value) -> Value {
        json!({"id": "resp_1", "object": "response", "created_at": 1700000000, "status": status,
               "model": "gpt-5", "output": output, "usage": usage, "error": null, "incomplete_details": null})
    }

    fn text_stream() -> String {
        let item = json!({"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []});
        sse(&[
            json!({"type": "response.created", "sequence_number": 0, "response": response("in_progress", json!([]), Value::Null)}),
            json!({"type": "response.in_progress", "sequence_number": 1, "response": response("in_progress", json!([]), Value::Null)}),
            json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0, "item": item}),
            json!({"type": "response.content_part.added", "sequence_number": 3, "item_id": "msg_1", "output_index": 0,
                   "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            json!({"type": "response.output_text.delta", "sequence_number": 4, "item_id": "msg_1", "output_index": 0,
                   "content_index": 0, "delta": "Hi"}),
            json!({"type": "response.output_text.delta", "sequence_number": 5, "item_id": "msg_1", "output_index": 0,
                   "content_index": 0, "delta": " there."}),
            json!({"type": "response.output_text.done", "sequence_number": 6, "item_id": "msg_1", "output_index": 0,
                   "content_index": 0, "text": "Hi there."}),
            json!({"type": "response.completed", "sequence_number": 7, "response": response("completed",
                   json!([{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": "Hi there.", "annotations": []}]}]),
                   json!({"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
                          "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}))}),
        ])
    }

    fn chunk(delta: Value, finish: Value) -> Value {
        json!({"id": "resp_1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-5",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    #[test]
    fn a_text_stream_becomes_chat_chunks() {
        assert_eq!(
            payloads(&translate_all(&text_stream(), false)),
            vec![
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chunk(json!({"content": "Hi"}), Value::Null),
                chunk(json!({"content": " there."}), Value::Null),
                chunk(json!({}), json!("stop")),
                json!({"id": "resp_1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-5",
                       "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                                                "prompt_tokens_details": {"cached_tokens": 0},
                                                "completion_tokens_details": {"reasoning_tokens": 0}}}),
                json!("[DONE]"),
            ]
        );
    }

    #[test]
    fn a_function_call_stream_becomes_tool_call_deltas() {
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "read",
                          "arguments": "", "status": "in_progress"});
        let out = translate_all(
            &sse(&[
                json!({"type": "response.created", "sequence_number": 0, "response": response("in_progress", json!([]), Value::Null)}),
                json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                       "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
                json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 2, "item_id": "rs_1",
                       "output_index": 0, "summary_index": 0, "delta": "Look."}),
                json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0,
                       "item": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look."}]}}),
                json!({"type": "response.output_item.added", "sequence_number": 4, "output_index": 1, "item": call}),
                json!({"type": "response.function_call_arguments.delta", "sequence_number": 5, "item_id": "fc_1",
                       "output_index": 1, "delta": "{\"p\":"}),
                json!({"type": "response.function_call_arguments.delta", "sequence_number": 6, "item_id": "fc_1",
                       "output_index": 1, "delta": "1}"}),
                json!({"type": "response.function_call_arguments.done", "sequence_number": 7, "item_id": "fc_1",
                       "output_index": 1, "arguments": "{\"p\":1}"}),
                json!({"type": "response.incomplete", "sequence_number": 8, "response": {
                       "id": "resp_1", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                       "output": [], "usage": {"input_tokens": 4, "output_tokens": 16, "total_tokens": 20}}}),
            ]),
            false,
        );
        assert_eq!(
            payloads(&out),
            vec![
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chunk(json!({"reasoning_content": "Look."}), Value::Null),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                          "function": {"name": "read", "arguments": ""}}]}),
                    Value::Null
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"p\":"}}]}),
                    Value::Null
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
                    Value::Null
                ),
                chunk(json!({}), json!("length")),
                json!({"id": "resp_1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-5",
                       "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20}}),
                json!("[DONE]"),
            ]
        );
        // Completed, the calls finish as tool_calls; the chunks parse as chat chunks.
        let done = translate_all(
            &sse(&[
                json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call",
                       "id": "fc_9", "call_id": "c", "name": "f", "arguments": ""}}),
                json!({"type": "response.completed", "response": response("completed", json!([]), Value::Null)}),
            ]),
            false,
        );
        let p = payloads(&done);
        assert_eq!(p[1]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(p[2], json!("[DONE]"), "no usage chunk without usage");
        for c in &p[..2] {
            serde_json::from_value::<ChatChunk>(c.clone()).unwrap();
        }
    }

    #[test]
    fn keep_native_passes_each_event_on_first() {
        let input = text_stream();
        let out = translate_all(&input, true);
        let p = payloads(&out);
        let natives: Vec<&Value> = p.iter().filter(|c| c.get(NATIVE_FIELD).is_some()).collect();
        let mut parser = SseParser::default();
        let events = parser.feed(input.as_bytes());
        assert_eq!(natives.len(), events.len());
        for (native, (name, data)) in natives.iter().zip(&events) {
            assert_eq!(native[NATIVE_FIELD], json!({"event": name, "data": data}));
            assert_eq!(native["choices"], json!([]));
            assert_eq!(
                (native["created"].clone(), native["model"].clone()),
                (json!(0), json!(""))
            );
            let chunk: ChatChunk = serde_json::from_value((*native).clone()).unwrap();
            assert!(!chunk.has_output());
        }
        // The native copy names nothing of its own: the event carries it.
        assert_eq!(natives[0]["id"], "");
        // Each native chunk comes right before its translation.
        assert!(p[0].get(NATIVE_FIELD).is_some());
        assert_eq!(
            p[1],
            chunk(json!({"role": "assistant", "content": ""}), Value::Null)
        );
        let translated: Vec<Value> = p.into_iter().filter(|c| c.get(NATIVE_FIELD).is_none()).collect();
        assert_eq!(translated, payloads(&translate_all(&input, false)));
        // Failures are passed on natively too, before the error event.
        let failed = translate_all(
            &sse(&[json!({"type": "error", "code": "server_error", "message": "boom", "param": null})]),
            true,
        );
        let (native, error) = failed.split_once("event: error").expect("an error event");
        assert!(native.contains(NATIVE_FIELD), "{failed}");
        assert!(!error.contains(NATIVE_FIELD), "{failed}");
    }

    #[test]
    fn errors_become_error_events_classify_understands() {
        const NONE: &[(&str, &str)] = &[];
        let kind = |event: Value| {
            let out = translate_all(&sse(&[event]), false);
            let data = out
                .strip_prefix("event: error\ndata: ")
                .and_then(|d| d.strip_suffix("\n\n"))
                .unwrap();
            classify(200, NONE, data)
        };
        let failed = |code: &str| {
            json!({"type": "response.failed", "response": {"id": "resp_1", "status": "failed",
                   "error": {"code": code, "message": "it failed"}, "output": []}})
        };
        assert!(matches!(
            kind(failed("server_error")),
            ErrorKind::Server { status: 500, .. }
        ));
        assert!(matches!(
            kind(failed("rate_limit_exceeded")),
            ErrorKind::RateLimited { .. }
        ));
        assert!(matches!(
            kind(failed("server_is_overloaded")),
            ErrorKind::Overloaded { .. }
        ));
        assert_eq!(kind(failed("insufficient_quota")), ErrorKind::QuotaExhausted);
        assert_eq!(kind(failed("context_length_exceeded")), ErrorKind::ContextLength);
        assert_eq!(kind(failed("invalid_prompt")), ErrorKind::BadRequest);
        assert_eq!(
            kind(failed("image_content_policy_violation")),
            ErrorKind::ContentRefusal
        );
        assert!(matches!(
            kind(failed("vector_store_timeout")),
            ErrorKind::Timeout { .. }
        ));
        let top = json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null,
                         "sequence_number": 3});
        assert!(matches!(kind(top.clone()), ErrorKind::RateLimited { .. }));
        let nested =
            json!({"type": "error", "error": {"type": "server_error", "code": null, "message": "oops"}});
        assert!(matches!(kind(nested), ErrorKind::Server { .. }));
        assert_eq!(
            translate_all(&sse(&[top]), false),
            format!(
                "event: error\ndata: {}\n\n",
                json!({"type": "error", "error": {"type": "rate_limit_error", "code": "rate_limit_exceeded",
                                                  "message": "slow down"}})
            )
        );
        assert_eq!(
            translate_all("data: {oops\n\n", false),
            "data: {oops\n\n",
            "malformed data is passed on"
        );
    }

    #[test]
    fn events_split_across_chunks_are_reassembled() {
        let input = text_stream();
        let whole = translate_all(&input, true);
        let crlf = input.replace('\n', "\r\n");
        let mut parser = SseParser::default();
        let mut tr = EventTranslator::new(true);
        let mut out = String::new();
        for piece in crlf.as_bytes().chunks(7) {
            for (name, data) in parser.feed(piece) {
                out.push_str(&tr.event(name.as_deref(), &data));
            }
        }
        for (name, data) in parser.finish() {
            out.push_str(&tr.event(name.as_deref(), &data));
        }
        assert_eq!(out, whole);
    }
}
