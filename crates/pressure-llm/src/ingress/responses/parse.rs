//! A Responses request, checked as OpenAI checks it, as the chat request
//! the engine runs (the table is in the [module docs](super)).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::ingress::{IngressError, Parsed};
use crate::provider::{ChatRequest, Message, MessageContent, NativeRequest, NativeWire, StreamOptions};

/// Top-level fields the chat translation leaves out, named in `dropped`
/// (in this order) when present and not `null`.
const DROPPED_FIELDS: &[&str] = &[
    "include",
    "store",
    "prompt_cache_key",
    "client_metadata",
    "metadata",
    "user",
    "safety_identifier",
    "service_tier",
    "truncation",
    "background",
    "top_logprobs",
];

/// Top-level fields read by the translation itself (or refused).
const KNOWN_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "text",
    "stream",
    "reasoning",
    "previous_response_id",
    "conversation",
];

/// Input item types that only the Responses wire can carry: server-side
/// tools' calls and results, and Codex's compaction summaries.
const NATIVE_ONLY_ITEMS: &[&str] = &[
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "compaction",
];

/// The refusal of a field that points at state the gateway does not keep.
const STATELESS: &str =
    "the gateway is stateless: send the whole conversation in `input` (with `store: false`)";

/// What the checks collect besides the messages.
#[derive(Default)]
struct Notes {
    dropped: Vec<String>,
    native_only: Option<String>,
}

impl Notes {
    /// Names `what` as dropped, once.
    fn drop(&mut self, what: impl Into<String>) {
        let what = what.into();
        if !self.dropped.contains(&what) {
            self.dropped.push(what);
        }
    }

    /// Remembers `at` as native-only content, if it is the first.
    fn native(&mut self, at: impl Into<String>) {
        if self.native_only.is_none() {
            self.native_only = Some(at.into());
        }
    }
}

/// A Responses request body (`POST /v1/responses`) as the chat request the
/// engine runs; `Err` is the 400 OpenAI would answer, naming the field
/// (`input.2.content`, `max_output_tokens`). The body itself is kept as the
/// chat request's [`NativeRequest`], for a provider of the same wire.
pub fn parse(body: Map<String, Value>) -> Result<Parsed, IngressError> {
    let model = match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(Value::String(_)) => return Err(IngressError::new("model", "model must not be empty")),
        None | Some(Value::Null) => {
            return Err(IngressError::new("model", "Missing required parameter: 'model'."))
        }
        Some(_) => return Err(IngressError::new("model", "model must be a string")),
    };
    for field in ["previous_response_id", "conversation"] {
        if body.get(field).is_some_and(|v| !v.is_null()) {
            return Err(IngressError::new(
                field,
                format!("{field} is not supported: {STATELESS}"),
            ));
        }
    }
    let mut notes = Notes::default();
    let mut messages = Vec::new();
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if !s.is_empty() {
                messages.push(Message::new("system", s.clone()));
            }
        }
        Some(_) => return Err(IngressError::new("instructions", "instructions must be a string")),
    }
    input(body.get("input"), &mut messages, &mut notes)?;
    let mut chat = ChatRequest::new(model.clone(), messages);
    tools(body.get("tools"), &mut chat.extra, &mut notes)?;
    tool_choice(body.get("tool_choice"), &mut chat.extra, &mut notes)?;
    chat.max_tokens = max_output_tokens(body.get("max_output_tokens"))?;
    sampling(&body, &mut chat.extra)?;
    reasoning(body.get("reasoning"), &mut chat.extra, &mut notes)?;
    text(body.get("text"), &mut chat.extra, &mut notes)?;
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(IngressError::new("stream", "stream must be a boolean")),
    };
    chat.stream = Some(stream);
    if stream {
        chat.stream_options = Some(StreamOptions {
            include_usage: Some(true),
            extra: Map::new(),
        });
    }
    for field in DROPPED_FIELDS {
        if body.get(*field).is_some_and(|v| !v.is_null()) {
            notes.drop(*field);
        }
    }
    for (key, value) in &body {
        if value.is_null() || KNOWN_FIELDS.contains(&key.as_str()) || DROPPED_FIELDS.contains(&key.as_str()) {
            continue;
        }
        // A stored prompt template lives at OpenAI: only that wire can use it.
        if key == "prompt" {
            notes.native("prompt");
        }
        notes.drop(key.clone());
    }
    chat.native = Some(Arc::new(NativeRequest {
        wire: NativeWire::Responses,
        body,
        headers: Vec::new(),
        native_only: notes.native_only.clone(),
    }));
    Ok(Parsed {
        chat,
        model,
        stream,
        dropped: notes.dropped,
        native_only: notes.native_only,
    })
}

/// The `input`: a string (one user message) or an array of items.
fn input(input: Option<&Value>, messages: &mut Vec<Message>, notes: &mut Notes) -> Result<(), IngressError> {
    let items = match input {
        None | Some(Value::Null) => {
            return Err(IngressError::new("input", "Missing required parameter: 'input'."))
        }
        Some(Value::String(s)) => {
            messages.push(Message::new("user", s.clone()));
            return Ok(());
        }
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(IngressError::new(
                "input",
                "input must be a string or an array of input items",
            ))
        }
    };
    for (i, item) in items.iter().enumerate() {
        let at = format!("input.{i}");
        let Some(obj) = item.as_object() else {
            return Err(IngressError::new(at, "an input item must be an object"));
        };
        let ty = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            None | Some(Value::Null) if obj.contains_key("role") => "message",
            None | Some(Value::Null) => {
                return Err(IngressError::new(
                    format!("{at}.type"),
                    "the input item has no type",
                ))
            }
            Some(_) => return Err(IngressError::new(format!("{at}.type"), "type must be a string")),
        };
        match ty {
            "message" => message(obj, &at, messages, notes)?,
            "function_call" => function_call(obj, &at, messages)?,
            "function_call_output" => function_call_output(obj, &at, messages, notes)?,
            "reasoning" => notes.drop(at),
            "item_reference" => {
                return Err(IngressError::new(
                    at,
                    format!("item references are not supported: {STATELESS}"),
                ))
            }
            t if NATIVE_ONLY_ITEMS.contains(&t) => notes.native(at),
            other => {
                return Err(IngressError::new(
                    format!("{at}.type"),
                    format!("Invalid value: '{other}'. Unknown input item type."),
                ))
            }
        }
    }
    Ok(())
}

/// The string at `obj[key]`, required.
fn required_str<'a>(obj: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a str, IngressError> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(IngressError::new(
            format!("{at}.{key}"),
            format!("Missing required parameter: '{at}.{key}'."),
        )),
        Some(_) => Err(IngressError::new(
            format!("{at}.{key}"),
            format!("{key} must be a string"),
        )),
    }
}

/// A message item: its role (`developer` → `system`) and content.
fn message(
    obj: &Map<String, Value>,
    at: &str,
    messages: &mut Vec<Message>,
    notes: &mut Notes,
) -> Result<(), IngressError> {
    let role = match required_str(obj, "role", at)? {
        "user" => "user",
        "assistant" => "assistant",
        "system" | "developer" => "system",
        other => {
            return Err(IngressError::new(
                format!("{at}.role"),
                format!("Invalid value: '{other}'. Supported values are: 'user', 'assistant', 'system', and 'developer'."),
            ))
        }
    };
    let content = match obj.get("content") {
        Some(Value::String(s)) => MessageContent::Text(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                if let Some(part) = content_part(p, &format!("{at}.content.{j}"), notes)? {
                    out.push(part);
                }
            }
            compact(out)
        }
        None | Some(Value::Null) => {
            return Err(IngressError::new(
                format!("{at}.content"),
                format!("Missing required parameter: '{at}.content'."),
            ))
        }
        Some(_) => {
            return Err(IngressError::new(
                format!("{at}.content"),
                "content must be a string or an array of content parts",
            ))
        }
    };
    messages.push(Message {
        role: role.to_owned(),
        content: Some(content),
        extra: Map::new(),
    });
    Ok(())
}

/// Text parts only: one as a string, several as text parts; anything else
/// stays parts.
fn compact(parts: Vec<Value>) -> MessageContent {
    match parts.as_slice() {
        [] => MessageContent::Text(String::new()),
        [only] if only.get("type").and_then(Value::as_str) == Some("text") => {
            MessageContent::Text(only.get("text").and_then(Value::as_str).unwrap_or("").to_owned())
        }
        _ => MessageContent::Parts(parts),
    }
}

/// One content part as a chat part; `None` when the chat wire cannot carry
/// it (a file, an image by file id: native-only).
fn content_part(p: &Value, at: &str, notes: &mut Notes) -> Result<Option<Value>, IngressError> {
    let Some(obj) = p.as_object() else {
        return Err(IngressError::new(at, "a content part must be an object"));
    };
    let ty = required_str(obj, "type", at)?;
    match ty {
        "input_text" | "output_text" => {
            let text = required_str(obj, "text", at)?;
            Ok(Some(json!({"type": "text", "text": text})))
        }
        "refusal" => {
            let text = required_str(obj, "refusal", at).or_else(|_| required_str(obj, "text", at))?;
            Ok(Some(json!({"type": "text", "text": text})))
        }
        "input_image" => match (obj.get("image_url"), obj.get("file_id")) {
            (Some(Value::String(url)), _) => {
                let mut image = json!({"url": url});
                if let Some(detail) = obj.get("detail").filter(|d| d.is_string()) {
                    image["detail"] = detail.clone();
                }
                Ok(Some(json!({"type": "image_url", "image_url": image})))
            }
            (_, Some(Value::String(_))) => {
                notes.native(at);
                Ok(None)
            }
            _ => Err(IngressError::new(
                format!("{at}.image_url"),
                "an input_image needs an image_url or a file_id",
            )),
        },
        "input_file" => {
            notes.native(at);
            Ok(None)
        }
        other => Err(IngressError::new(
            format!("{at}.type"),
            format!("Invalid value: '{other}'. Unknown content part type."),
        )),
    }
}

/// A `function_call` item: a tool call of the last assistant message, or of
/// a new one.
fn function_call(
    obj: &Map<String, Value>,
    at: &str,
    messages: &mut Vec<Message>,
) -> Result<(), IngressError> {
    let call_id = required_str(obj, "call_id", at)?;
    let name = required_str(obj, "name", at)?;
    let arguments = required_str(obj, "arguments", at)?;
    let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}});
    if messages.last().is_none_or(|m| m.role != "assistant") {
        messages.push(Message {
            role: "assistant".into(),
            content: None,
            extra: Map::new(),
        });
    }
    if let Some(last) = messages.last_mut() {
        match last.extra.get_mut("tool_calls") {
            Some(Value::Array(calls)) => calls.push(call),
            _ => {
                last.extra.insert("tool_calls".into(), Value::Array(vec![call]));
            }
        }
    }
    Ok(())
}

/// A `function_call_output` item as a `tool` message; parts other than
/// text are native-only.
fn function_call_output(
    obj: &Map<String, Value>,
    at: &str,
    messages: &mut Vec<Message>,
    notes: &mut Notes,
) -> Result<(), IngressError> {
    let call_id = required_str(obj, "call_id", at)?;
    let text = match obj.get("output") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                let part_at = format!("{at}.output.{j}");
                match content_part(p, &part_at, notes)? {
                    Some(part) if part.get("type").and_then(Value::as_str) == Some("text") => {
                        texts.push(part.get("text").and_then(Value::as_str).unwrap_or("").to_owned());
                    }
                    // An image has no place in a chat tool message.
                    Some(_) => notes.native(part_at),
                    None => {}
                }
            }
            texts.join("\n")
        }
        None | Some(Value::Null) => {
            return Err(IngressError::new(
                format!("{at}.output"),
                format!("Missing required parameter: '{at}.output'."),
            ))
        }
        Some(_) => {
            return Err(IngressError::new(
                format!("{at}.output"),
                "output must be a string or an array of content parts",
            ))
        }
    };
    let mut m = Message::new("tool", text);
    m.extra.insert("tool_call_id".into(), json!(call_id));
    messages.push(m);
    Ok(())
}

/// Function tools as chat tools; other tool types are dropped hints.
fn tools(
    tools: Option<&Value>,
    extra: &mut Map<String, Value>,
    notes: &mut Notes,
) -> Result<(), IngressError> {
    let tools = match tools {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(t)) => t,
        Some(_) => return Err(IngressError::new("tools", "tools must be an array")),
    };
    let mut out = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let at = format!("tools.{i}");
        let Some(obj) = t.as_object() else {
            return Err(IngressError::new(at, "a tool must be an object"));
        };
        if required_str(obj, "type", &at)? != "function" {
            notes.drop(at);
            continue;
        }
        let name = required_str(obj, "name", &at)?;
        let mut function = json!({"name": name});
        for key in ["description", "parameters", "strict"] {
            if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
                function[key] = v.clone();
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    if !out.is_empty() {
        extra.insert("tools".into(), Value::Array(out));
    }
    Ok(())
}

/// `tool_choice`: the modes as they are, a function by name in chat's
/// shape; forcing a hosted tool is a dropped hint.
fn tool_choice(
    choice: Option<&Value>,
    extra: &mut Map<String, Value>,
    notes: &mut Notes,
) -> Result<(), IngressError> {
    let out = match choice {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) if matches!(s.as_str(), "auto" | "none" | "required") => json!(s),
        Some(Value::String(s)) => {
            return Err(IngressError::new(
                "tool_choice",
                format!("Invalid value: '{s}'. Supported values are: 'none', 'auto', and 'required'."),
            ))
        }
        Some(Value::Object(obj)) => match required_str(obj, "type", "tool_choice")? {
            "function" => {
                let name = required_str(obj, "name", "tool_choice")?;
                json!({"type": "function", "function": {"name": name}})
            }
            _ => {
                notes.drop("tool_choice");
                return Ok(());
            }
        },
        Some(_) => {
            return Err(IngressError::new(
                "tool_choice",
                "tool_choice must be a string or an object",
            ))
        }
    };
    extra.insert("tool_choice".into(), out);
    Ok(())
}

/// `max_output_tokens`: an integer of at least 1 (OpenAI's own minimum is
/// 16; a smaller cap is the caller's business).
fn max_output_tokens(v: Option<&Value>) -> Result<Option<u32>, IngressError> {
    let refuse = || {
        IngressError::new(
            "max_output_tokens",
            "max_output_tokens must be an integer of at least 1",
        )
    };
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let n = v.as_u64().filter(|n| *n >= 1).ok_or_else(refuse)?;
            u32::try_from(n).map(Some).map_err(|_| refuse())
        }
    }
}

/// `temperature` (0–2), `top_p` (0–1) and `parallel_tool_calls`, as they are.
fn sampling(body: &Map<String, Value>, extra: &mut Map<String, Value>) -> Result<(), IngressError> {
    for (field, max) in [("temperature", 2.0), ("top_p", 1.0)] {
        match body.get(field) {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_f64() {
                Some(x) if (0.0..=max).contains(&x) => {
                    extra.insert(field.into(), v.clone());
                }
                _ => {
                    return Err(IngressError::new(
                        field,
                        format!("{field} must be a number from 0 to {max}"),
                    ))
                }
            },
        }
    }
    match body.get("parallel_tool_calls") {
        None | Some(Value::Null) => {}
        Some(v @ Value::Bool(_)) => {
            extra.insert("parallel_tool_calls".into(), v.clone());
        }
        Some(_) => {
            return Err(IngressError::new(
                "parallel_tool_calls",
                "parallel_tool_calls must be a boolean",
            ))
        }
    }
    Ok(())
}

/// `reasoning.effort` as chat's `reasoning_effort`; the rest of `reasoning`
/// (`summary`) is dropped.
fn reasoning(
    v: Option<&Value>,
    extra: &mut Map<String, Value>,
    notes: &mut Notes,
) -> Result<(), IngressError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(IngressError::new("reasoning", "reasoning must be an object")),
    };
    for (key, value) in obj {
        match (key.as_str(), value) {
            (_, Value::Null) => {}
            ("effort", Value::String(e)) => {
                extra.insert("reasoning_effort".into(), json!(e));
            }
            ("effort", _) => {
                return Err(IngressError::new(
                    "reasoning.effort",
                    "reasoning.effort must be a string",
                ))
            }
            (other, _) => notes.drop(format!("reasoning.{other}")),
        }
    }
    Ok(())
}

/// `text.format` as chat's `response_format`; `text.verbosity` is dropped.
fn text(v: Option<&Value>, extra: &mut Map<String, Value>, notes: &mut Notes) -> Result<(), IngressError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(IngressError::new("text", "text must be an object")),
    };
    for (key, value) in obj {
        if !value.is_null() && key != "format" {
            notes.drop(format!("text.{key}"));
        }
    }
    let format = match obj.get("format") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(f)) => f,
        Some(_) => return Err(IngressError::new("text.format", "text.format must be an object")),
    };
    match required_str(format, "type", "text.format")? {
        "text" => {}
        "json_object" => {
            extra.insert("response_format".into(), json!({"type": "json_object"}));
        }
        "json_schema" => {
            let name = required_str(format, "name", "text.format")?;
            let schema = match format.get("schema") {
                Some(s @ Value::Object(_)) => s.clone(),
                _ => {
                    return Err(IngressError::new(
                        "text.format.schema",
                        "text.format.schema must be a JSON schema object",
                    ))
                }
            };
            let mut json_schema = json!({"name": name, "schema": schema});
            for key in ["strict", "description"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    json_schema[key] = v.clone();
                }
            }
            extra.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": json_schema}),
            );
        }
        other => {
            return Err(IngressError::new(
                "text.format.type",
                format!(
                "Invalid value: '{other}'. Supported values are: 'text', 'json_object', and 'json_schema'."
            ),
            ))
        }
    }
    Ok(())
}
