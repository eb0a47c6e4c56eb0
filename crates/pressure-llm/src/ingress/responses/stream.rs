//! [`StreamEncoder`]: a chat chunk stream as Responses server-sent events.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::render::{
    call_item, echo, incomplete_reason, message_item, output_text, reasoning_item, Frame, Ids,
};
use crate::provider::{ChatChunk, Usage};

/// The output item being streamed (items are never interleaved: a new one
/// closes it).
#[derive(Debug, Clone)]
enum Open {
    Reasoning {
        id: String,
        text: String,
    },
    Message {
        id: String,
        text: String,
    },
    Call {
        id: String,
        /// The call's `index` in the chat deltas.
        chat_index: u64,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// Renders a chat chunk stream as the Responses API's server-sent events,
/// in OpenAI's order: `response.created` and `response.in_progress` (on the
/// first chunk), then per output item `response.output_item.added`, its
/// deltas and its done events (`response.content_part.*` and
/// `response.output_text.*` for the message, `response.function_call_arguments.*`
/// for a function call, `response.reasoning_summary_part.*` and
/// `response.reasoning_summary_text.*` for reasoning), then
/// `response.completed` (or `response.incomplete` for a `length` or
/// `content_filter` finish, `response.failed` after [`fail`](Self::fail))
/// with the whole response as [`render`](super::render) builds it.
///
/// Every event is `event: <type>\ndata: <json>\n\n`, its data carrying
/// `type` and `sequence_number` (0, 1, 2, ...). Only choice 0 is rendered.
/// Nothing is written after the final event.
#[derive(Debug, Clone)]
pub struct StreamEncoder {
    model: String,
    echo: Map<String, Value>,
    /// Set by the first event.
    frame: Option<Frame>,
    sequence: u64,
    ended: bool,
    /// The output items done so far, in order.
    items: Vec<Value>,
    open: Option<Open>,
    /// Items opened so far, per kind, for their ids.
    messages: usize,
    reasonings: usize,
    calls: usize,
    /// Closed calls by their chat `index`, to their position in `items`.
    closed_calls: HashMap<u64, usize>,
    usage: Option<Usage>,
    finish: Option<String>,
}

impl StreamEncoder {
    /// An encoder for the answer to `request` (a Responses body, whose
    /// `tools`, `instructions`, sampling and `text` the response echoes),
    /// naming `model`.
    pub fn new(model: &str, request: &Map<String, Value>) -> Self {
        Self {
            model: model.to_owned(),
            echo: echo(request),
            frame: None,
            sequence: 0,
            ended: false,
            items: Vec::new(),
            open: None,
            messages: 0,
            reasonings: 0,
            calls: 0,
            closed_calls: HashMap::new(),
            usage: None,
            finish: None,
        }
    }

    /// The events for one chat chunk: its reasoning, text and tool call
    /// deltas; its usage and `finish_reason` are kept for the end.
    pub fn chunk(&mut self, c: &ChatChunk, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        if self.frame.is_none() {
            self.start(&c.header.id, c.header.created, out);
        }
        if let Some(u) = &c.usage {
            self.usage = Some(u.clone());
        }
        for choice in c.choices.iter().filter(|c| c.index == 0) {
            let delta = &choice.delta;
            if let Some(r) = delta
                .extra
                .get("reasoning_content")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
            {
                self.reasoning_delta(r, out);
            }
            if let Some(t) = delta.content.as_deref().filter(|t| !t.is_empty()) {
                self.text_delta(t, out);
            }
            if let Some(calls) = delta.extra.get("tool_calls").and_then(Value::as_array) {
                for call in calls {
                    self.call_delta(call, out);
                }
            }
            if let Some(f) = &choice.finish_reason {
                self.finish = Some(f.clone());
            }
        }
    }

    /// The stream ended: the open item's done events, then
    /// `response.completed` (or `response.incomplete`) with the usage.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        let frame = self.frame_or_start(out);
        self.close(out);
        let incomplete = incomplete_reason(self.finish.as_deref());
        let (status, event) = match incomplete {
            Some(_) => ("incomplete", "response.incomplete"),
            None => ("completed", "response.completed"),
        };
        let response = frame.response(status, incomplete, None, self.items.clone(), self.usage.as_ref());
        self.emit(out, event, json!({"response": response}));
        self.ended = true;
    }

    /// The stream failed: `response.failed` with `error: {code, message}`
    /// (after `response.created` if nothing was written yet). The open
    /// item is left unfinished, as OpenAI leaves it.
    pub fn fail(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        let frame = self.frame_or_start(out);
        let error = json!({"code": code, "message": message});
        let response = frame.response(
            "failed",
            None,
            Some(error),
            self.items.clone(),
            self.usage.as_ref(),
        );
        self.emit(out, "response.failed", json!({"response": response}));
        self.ended = true;
    }

    /// `response.created` and `response.in_progress`.
    fn start(&mut self, chat_id: &str, created: u64, out: &mut Vec<u8>) {
        let frame = Frame {
            ids: Ids::new(chat_id),
            created_at: created,
            model: self.model.clone(),
            echo: self.echo.clone(),
        };
        let response = frame.response("in_progress", None, None, Vec::new(), None);
        self.frame = Some(frame);
        self.emit(out, "response.created", json!({"response": response}));
        self.emit(out, "response.in_progress", json!({"response": response}));
    }

    /// The frame, starting the stream first if no chunk came.
    fn frame_or_start(&mut self, out: &mut Vec<u8>) -> Frame {
        if self.frame.is_none() {
            self.start("", 0, out);
        }
        self.frame.clone().unwrap_or_else(|| Frame {
            ids: Ids::new(""),
            created_at: 0,
            model: self.model.clone(),
            echo: self.echo.clone(),
        })
    }

    fn ids(&self) -> Ids {
        self.frame
            .as_ref()
            .map_or_else(|| Ids::new(""), |f| f.ids.clone())
    }

    /// The open item's position in the output.
    fn index(&self) -> usize {
        self.items.len()
    }

    fn reasoning_delta(&mut self, delta: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close(out);
            let id = self.ids().reasoning(self.reasonings);
            self.reasonings = self.reasonings.saturating_add(1);
            let index = self.index();
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": {"type": "reasoning", "id": id, "summary": []}}),
            );
            self.emit(
                out,
                "response.reasoning_summary_part.added",
                json!({"item_id": id, "output_index": index, "summary_index": 0,
                       "part": {"type": "summary_text", "text": ""}}),
            );
            self.open = Some(Open::Reasoning {
                id,
                text: String::new(),
            });
        }
        let index = self.index();
        if let Some(Open::Reasoning { id, text }) = &mut self.open {
            text.push_str(delta);
            let data = json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": delta});
            self.emit(out, "response.reasoning_summary_text.delta", data);
        }
    }

    fn text_delta(&mut self, delta: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close(out);
            let id = self.ids().message(self.messages);
            self.messages = self.messages.saturating_add(1);
            let index = self.index();
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": message_item(&id, None)}),
            );
            self.emit(
                out,
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": output_text("")}),
            );
            self.open = Some(Open::Message {
                id,
                text: String::new(),
            });
        }
        let index = self.index();
        if let Some(Open::Message { id, text }) = &mut self.open {
            text.push_str(delta);
            let data = json!({"item_id": id, "output_index": index, "content_index": 0,
                              "delta": delta, "logprobs": []});
            self.emit(out, "response.output_text.delta", data);
        }
    }

    /// One entry of a delta's `tool_calls`: the open call continued (same
    /// `index`, no other id), a closed call's late arguments (kept for the
    /// final response only: its done events are out), or a new call.
    fn call_delta(&mut self, call: &Value, out: &mut Vec<u8>) {
        let k = call.get("index").and_then(Value::as_u64).unwrap_or(0);
        let new_id = call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let args = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("");
        let continues = match &self.open {
            Some(Open::Call {
                chat_index, call_id, ..
            }) => *chat_index == k && new_id.is_none_or(|id| id == call_id),
            _ => false,
        };
        if !continues {
            if new_id.is_none() {
                if let Some(item) = self.closed_calls.get(&k).and_then(|&pos| self.items.get_mut(pos)) {
                    if let Some(Value::String(a)) = item.get_mut("arguments") {
                        a.push_str(args);
                    }
                    return;
                }
            }
            self.close(out);
            let id = self.ids().call(self.calls);
            self.calls = self.calls.saturating_add(1);
            let call_id = new_id.unwrap_or("").to_owned();
            let index = self.index();
            let item = call_item(&id, &call_id, name, "", "in_progress");
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            );
            self.open = Some(Open::Call {
                id,
                chat_index: k,
                call_id,
                name: name.to_owned(),
                arguments: String::new(),
            });
        }
        let index = self.index();
        if let Some(Open::Call {
            id,
            name: open_name,
            arguments,
            ..
        }) = &mut self.open
        {
            if open_name.is_empty() {
                name.clone_into(open_name);
            }
            if !args.is_empty() {
                arguments.push_str(args);
                let data = json!({"item_id": id, "output_index": index, "delta": args});
                self.emit(out, "response.function_call_arguments.delta", data);
            }
        }
    }

    /// The open item's done events; it joins the output.
    fn close(&mut self, out: &mut Vec<u8>) {
        let index = self.index();
        let item = match self.open.take() {
            None => return,
            Some(Open::Reasoning { id, text }) => {
                let at = json!({"item_id": id, "output_index": index, "summary_index": 0});
                self.emit(
                    out,
                    "response.reasoning_summary_text.done",
                    with(&at, "text", json!(text)),
                );
                let part = json!({"type": "summary_text", "text": text});
                self.emit(
                    out,
                    "response.reasoning_summary_part.done",
                    with(&at, "part", part),
                );
                reasoning_item(&id, &text)
            }
            Some(Open::Message { id, text }) => {
                let at = json!({"item_id": id, "output_index": index, "content_index": 0});
                let done = with(&with(&at, "text", json!(text)), "logprobs", json!([]));
                self.emit(out, "response.output_text.done", done);
                self.emit(
                    out,
                    "response.content_part.done",
                    with(&at, "part", output_text(&text)),
                );
                message_item(&id, Some(&text))
            }
            Some(Open::Call {
                id,
                chat_index,
                call_id,
                name,
                arguments,
            }) => {
                let data = json!({"item_id": id, "output_index": index, "arguments": arguments});
                self.emit(out, "response.function_call_arguments.done", data);
                self.closed_calls.insert(chat_index, index);
                call_item(&id, &call_id, &name, &arguments, "completed")
            }
        };
        let done = json!({"output_index": index, "item": item.clone()});
        self.emit(out, "response.output_item.done", done);
        self.items.push(item);
    }

    /// Writes one event: `type` and `sequence_number`, then `fields`.
    fn emit(&mut self, out: &mut Vec<u8>, ty: &str, fields: Value) {
        let mut data = Map::new();
        data.insert("type".into(), json!(ty));
        data.insert("sequence_number".into(), json!(self.sequence));
        if let Value::Object(fields) = fields {
            data.extend(fields);
        }
        self.sequence = self.sequence.saturating_add(1);
        crate::ingress::write_event(out, ty, &Value::Object(data));
    }
}

/// `base` (an object) with `key` set to `value`.
fn with(base: &Value, key: &str, value: Value) -> Value {
    let mut v = base.clone();
    if let Value::Object(m) = &mut v {
        m.insert(key.into(), value);
    }
    v
}
