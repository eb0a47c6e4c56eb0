//! A chat completion as a Responses `Response` object (the table is in the
//! [module docs](super)); the pieces are shared with the stream encoder.

use serde_json::{json, Map, Value};

use crate::provider::{ChatResponse, Usage};

/// The ids of one response and its items, all from one suffix: the chat
/// completion's id (a random one when it has none), so a response and its
/// stream name the same items.
#[derive(Debug, Clone)]
pub(super) struct Ids {
    suffix: String,
}

impl Ids {
    /// The ids for a chat completion id.
    pub(super) fn new(chat_id: &str) -> Self {
        let suffix = chat_id.strip_prefix("resp_").unwrap_or(chat_id);
        let suffix = if suffix.is_empty() {
            format!("{:016x}", rand::random::<u64>())
        } else {
            suffix.to_owned()
        };
        Self { suffix }
    }

    /// `resp_…`.
    pub(super) fn response(&self) -> String {
        format!("resp_{}", self.suffix)
    }

    /// `msg_…`, the `n`th assistant message (`_n` added after the first).
    pub(super) fn message(&self, n: usize) -> String {
        self.item("msg", n)
    }

    /// `rs_…`, the `n`th reasoning item (`_n` added after the first).
    pub(super) fn reasoning(&self, n: usize) -> String {
        self.item("rs", n)
    }

    fn item(&self, prefix: &str, n: usize) -> String {
        match n {
            0 => format!("{prefix}_{}", self.suffix),
            n => format!("{prefix}_{}_{n}", self.suffix),
        }
    }

    /// `fc_…_k`, the `k`th function call.
    pub(super) fn call(&self, k: usize) -> String {
        format!("fc_{}_{k}", self.suffix)
    }
}

/// The request's values a Response echoes (`tools`, `tool_choice`,
/// `instructions`, sampling, `text`, `metadata`), with OpenAI's defaults
/// for those it did not set. Kept apart from the request so a stream does
/// not hold the whole conversation.
pub(super) fn echo(request: &Map<String, Value>) -> Map<String, Value> {
    let get = |k: &str| request.get(k).filter(|v| !v.is_null()).cloned();
    let mut out = Map::new();
    out.insert("instructions".into(), get("instructions").unwrap_or(Value::Null));
    out.insert(
        "max_output_tokens".into(),
        get("max_output_tokens").unwrap_or(Value::Null),
    );
    out.insert(
        "parallel_tool_calls".into(),
        get("parallel_tool_calls").unwrap_or(json!(true)),
    );
    out.insert("temperature".into(), get("temperature").unwrap_or(json!(1.0)));
    out.insert("top_p".into(), get("top_p").unwrap_or(json!(1.0)));
    out.insert("tool_choice".into(), get("tool_choice").unwrap_or(json!("auto")));
    out.insert(
        "tools".into(),
        get("tools").filter(Value::is_array).unwrap_or(json!([])),
    );
    out.insert("store".into(), json!(false));
    let text = get("text")
        .filter(|t| t.get("format").is_some_and(Value::is_object))
        .unwrap_or_else(|| json!({"format": {"type": "text"}}));
    out.insert("text".into(), text);
    out.insert(
        "metadata".into(),
        get("metadata").filter(Value::is_object).unwrap_or(json!({})),
    );
    out
}

/// Why a response stopped short, for a chat `finish_reason`: `length` →
/// `max_output_tokens`, `content_filter` → `content_filter`; `None` when
/// it completed.
pub(super) fn incomplete_reason(finish_reason: Option<&str>) -> Option<&'static str> {
    match finish_reason {
        Some("length") => Some("max_output_tokens"),
        Some("content_filter") => Some("content_filter"),
        _ => None,
    }
}

/// What every `Response` object of one answer shares: its ids, creation
/// time, model and the request's echoed values.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    /// The response's and its items' ids.
    pub(super) ids: Ids,
    /// Unix seconds (the chat completion's `created`).
    pub(super) created_at: u64,
    /// The model the agent asked for.
    pub(super) model: String,
    /// [`echo`] of the request.
    pub(super) echo: Map<String, Value>,
}

impl Frame {
    /// A `Response` object: `status` with `incomplete_details` and `error`
    /// as given, the output items, the usage (`null` when there is none
    /// yet) and the echoed request values.
    pub(super) fn response(
        &self,
        status: &str,
        incomplete: Option<&str>,
        error: Option<Value>,
        output: Vec<Value>,
        usage: Option<&Usage>,
    ) -> Value {
        let mut out = Map::new();
        out.insert("id".into(), json!(self.ids.response()));
        out.insert("object".into(), json!("response"));
        out.insert("created_at".into(), json!(self.created_at));
        out.insert("status".into(), json!(status));
        out.insert(
            "incomplete_details".into(),
            incomplete.map_or(Value::Null, |r| json!({"reason": r})),
        );
        out.insert("error".into(), error.unwrap_or(Value::Null));
        out.insert("model".into(), json!(self.model));
        out.insert("output".into(), Value::Array(output));
        out.insert("usage".into(), usage.map_or(Value::Null, response_usage));
        for (k, v) in &self.echo {
            out.insert(k.clone(), v.clone());
        }
        Value::Object(out)
    }
}

/// A chat `usage` as a Responses `usage`. Input tokens are the whole
/// prompt (chat's `prompt_tokens`; Anthropic's answers already count their
/// cache classes in it, see `provider::anthropic::response::to_usage`), and
/// `cached_tokens` is `prompt_tokens_details.cached_tokens`. A usage that
/// carries Anthropic's raw cache classes (`cache_read_input_tokens`,
/// `cache_creation_input_tokens`) without `prompt_tokens_details` counted
/// them outside `prompt_tokens`: they are added to the input, and the reads
/// are the cached tokens.
pub(super) fn response_usage(u: &Usage) -> Value {
    let extra_n = |k: &str| u.extra.get(k).and_then(Value::as_u64).unwrap_or(0);
    let detail = u
        .extra
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64);
    let (input, cached) = match detail {
        Some(cached) => (u.prompt_tokens, cached),
        None => {
            let read = extra_n("cache_read_input_tokens");
            let written = extra_n("cache_creation_input_tokens");
            (u.prompt_tokens.saturating_add(read).saturating_add(written), read)
        }
    };
    let reasoning = u
        .extra
        .get("completion_tokens_details")
        .and_then(|d| d.get("reasoning_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input.saturating_add(u.completion_tokens),
    })
}

/// A reasoning item with one summary text.
pub(super) fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
}

/// The assistant message item, completed (or in progress, without content).
pub(super) fn message_item(id: &str, text: Option<&str>) -> Value {
    match text {
        Some(text) => json!({
            "type": "message", "id": id, "status": "completed", "role": "assistant",
            "content": [output_text(text)],
        }),
        None => {
            json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []})
        }
    }
}

/// An `output_text` content part.
pub(super) fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

/// A function call item (`status` completed or in progress).
pub(super) fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({
        "type": "function_call", "id": id, "call_id": call_id, "name": name,
        "arguments": arguments, "status": status,
    })
}

/// The Responses `Response` for a chat completion (its first choice) to a
/// request for `model`: the reasoning (`reasoning_content`) as a reasoning
/// item, the text as a message item, each tool call as a function call
/// item; `status` `incomplete` for a `length` or `content_filter` finish.
/// `created_at` is the completion's `created`. A provider's native answer
/// is not consulted: the gateway passes that on itself.
pub fn render(resp: &ChatResponse, model: &str, request: &Map<String, Value>) -> Value {
    let ids = Ids::new(&resp.header.id);
    let choice = resp.choices.first();
    let mut output = Vec::new();
    if let Some(message) = choice.map(|c| &c.message) {
        if let Some(reasoning) = message
            .extra
            .get("reasoning_content")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            output.push(reasoning_item(&ids.reasoning(0), reasoning));
        }
        let text = message.text();
        let calls = message
            .extra
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !text.is_empty() || calls.is_empty() {
            output.push(message_item(&ids.message(0), Some(&text)));
        }
        for (k, call) in calls.iter().enumerate() {
            let str_at = |p: &str| call.pointer(p).and_then(Value::as_str).unwrap_or("");
            let arguments = match call.pointer("/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            };
            output.push(call_item(
                &ids.call(k),
                str_at("/id"),
                str_at("/function/name"),
                &arguments,
                "completed",
            ));
        }
    }
    let incomplete = incomplete_reason(choice.and_then(|c| c.finish_reason.as_deref()));
    let status = if incomplete.is_some() {
        "incomplete"
    } else {
        "completed"
    };
    let frame = Frame {
        ids,
        created_at: resp.header.created,
        model: model.to_owned(),
        echo: echo(request),
    };
    frame.response(status, incomplete, None, output, resp.usage.as_ref())
}
