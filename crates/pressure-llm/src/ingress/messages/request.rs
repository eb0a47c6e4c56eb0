//! [`parse`]: a Messages request body, checked and translated to chat (the
//! table is in the module docs of [`super`]).

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::ingress::{IngressError, Parsed};
use crate::provider::{ChatRequest, Message, MessageContent, NativeRequest, NativeWire, StreamOptions};

/// Block types that only the Messages wire carries: results and calls of
/// server-side tools, search results, container uploads.
const NATIVE_BLOCKS: &[&str] = &[
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "search_result",
    "container_upload",
    "mcp_tool_use",
    "mcp_tool_result",
];

/// The block types Anthropic accepts in a turn, for the unknown-type error.
const BLOCK_TYPES: &str = "text, image, document, tool_use, tool_result, thinking, redacted_thinking, \
    server_tool_use, web_search_tool_result, web_fetch_tool_result, code_execution_tool_result, \
    bash_code_execution_tool_result, text_editor_code_execution_tool_result, tool_search_tool_result, \
    search_result, container_upload, mcp_tool_use, mcp_tool_result";

/// The fields of a custom tool that the translation reads.
const TOOL_FIELDS: &[&str] = &[
    "type",
    "name",
    "description",
    "input_schema",
    "strict",
    "cache_control",
];

/// An error at `param`, its message led by the path as Anthropic's are.
fn err(param: &str, what: impl std::fmt::Display) -> IngressError {
    IngressError::new(param, format!("{param}: {what}"))
}

/// `v` absent or `null`: an optional field not given.
fn given(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// A string field that must be present.
fn req_str<'a>(o: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a str, IngressError> {
    match o.get(key) {
        None | Some(Value::Null) => Err(err(&format!("{at}.{key}"), "Field required")),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(err(&format!("{at}.{key}"), "Input should be a valid string")),
    }
}

/// An object field that must be present.
fn req_obj<'a>(
    o: &'a Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<&'a Map<String, Value>, IngressError> {
    match o.get(key) {
        None | Some(Value::Null) => Err(err(&format!("{at}.{key}"), "Field required")),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(err(&format!("{at}.{key}"), "Input should be a valid dictionary")),
    }
}

/// `v` as an object, or the error naming `at`.
fn as_obj<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, IngressError> {
    v.as_object()
        .ok_or_else(|| err(at, "Input should be a valid dictionary"))
}

/// `v` as an array, or the error naming `at`.
fn as_arr<'a>(v: &'a Value, at: &str) -> Result<&'a Vec<Value>, IngressError> {
    v.as_array()
        .ok_or_else(|| err(at, "Input should be a valid list"))
}

/// `v` as a number in 0–1, or the error naming `at`.
fn unit_number(v: &Value, at: &str) -> Result<(), IngressError> {
    match v.as_f64() {
        Some(x) if (0.0..=1.0).contains(&x) => Ok(()),
        Some(_) => Err(err(at, "Input should be between 0 and 1")),
        None => Err(err(at, "Input should be a valid number")),
    }
}

/// What the walk over the body collects beside the translation.
#[derive(Debug, Default)]
struct Walk {
    dropped: Vec<String>,
    seen: HashSet<String>,
    native_only: Option<String>,
}

impl Walk {
    /// Names a dropped field or path, once.
    fn drop(&mut self, name: impl Into<String>) {
        let name = name.into();
        if self.seen.insert(name.clone()) {
            self.dropped.push(name);
        }
    }

    /// Records content only the Messages wire carries (the first one wins).
    fn native(&mut self, path: impl Into<String>) {
        if self.native_only.is_none() {
            self.native_only = Some(path.into());
        }
    }

    /// Names `cache_control` if `o` carries one (see the module docs).
    fn cache_control(&mut self, o: &Map<String, Value>) {
        if given(o.get("cache_control")).is_some() {
            self.drop("cache_control");
        }
    }
}

/// The chat request being built.
#[derive(Debug, Default)]
struct Build {
    system: Option<String>,
    messages: Vec<Message>,
    extra: Map<String, Value>,
    /// The custom tools' names, for a `tool_choice` that forces one.
    tool_names: Vec<String>,
    stream: bool,
}

/// Reads and checks a Messages request body (`POST /v1/messages`) and
/// translates it to the chat request the engine runs, as the module docs'
/// table says; `headers` (the `anthropic-beta` and `anthropic-version` the
/// gateway chose to forward) go with the body into
/// [`ChatRequest::native`](crate::provider::ChatRequest), so a provider of
/// the Messages wire gets the request as it came.
///
/// A body Anthropic would refuse (a required field missing, a wrong type,
/// a value out of range, an unknown content block type) is an
/// [`IngressError`] naming the field by its dotted path. Content is never
/// truncated: the body's size is the caller's to bound.
pub fn parse(body: Map<String, Value>, headers: Vec<(String, String)>) -> Result<Parsed, IngressError> {
    let model = match body.get("model") {
        None | Some(Value::Null) => return Err(err("model", "Field required")),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(err("model", "String should have at least 1 character")),
        Some(_) => return Err(err("model", "Input should be a valid string")),
    };
    let max_tokens = match body.get("max_tokens") {
        None | Some(Value::Null) => return Err(err("max_tokens", "Field required")),
        Some(v) => match (v.as_u64(), v.as_i64()) {
            (Some(0), _) | (None, Some(_)) => {
                return Err(err("max_tokens", "Input should be greater than or equal to 1"))
            }
            (Some(n), _) => u32::try_from(n)
                .map_err(|_| err("max_tokens", format!("Input should be at most {}", u32::MAX)))?,
            (None, None) => return Err(err("max_tokens", "Input should be a valid integer")),
        },
    };
    let mut walk = Walk::default();
    let mut build = Build::default();
    let mut tool_choice = None;
    let mut has_messages = false;
    for (key, v) in &body {
        if v.is_null() && !matches!(key.as_str(), "messages" | "model" | "max_tokens") {
            continue;
        }
        match key.as_str() {
            "model" | "max_tokens" => {}
            "messages" => {
                has_messages = true;
                messages(v, &mut walk, &mut build)?;
            }
            "system" => build.system = system(v, &mut walk)?,
            "stop_sequences" => {
                let seqs = as_arr(v, "stop_sequences")?;
                for (i, s) in seqs.iter().enumerate() {
                    if !s.is_string() {
                        return Err(err(
                            &format!("stop_sequences.{i}"),
                            "Input should be a valid string",
                        ));
                    }
                }
                if !seqs.is_empty() {
                    build.extra.insert("stop".into(), v.clone());
                }
            }
            "temperature" | "top_p" => {
                unit_number(v, key)?;
                build.extra.insert(key.clone(), v.clone());
            }
            "top_k" => {
                if v.as_u64().is_none() {
                    return Err(err("top_k", "Input should be a non-negative integer"));
                }
                walk.drop("top_k");
            }
            "stream" => {
                build.stream = v
                    .as_bool()
                    .ok_or_else(|| err("stream", "Input should be a valid boolean"))?
            }
            "tools" => tools(v, &mut walk, &mut build)?,
            "tool_choice" => tool_choice = Some(v),
            "metadata" => {
                let m = as_obj(v, "metadata")?;
                if let Some(u) = given(m.get("user_id")) {
                    if !u.is_string() {
                        return Err(err("metadata.user_id", "Input should be a valid string"));
                    }
                }
                if !m.is_empty() {
                    walk.drop("metadata");
                }
            }
            "thinking" => {
                if thinking(v)? {
                    walk.drop("thinking");
                }
            }
            "service_tier" => {
                if !v.is_string() {
                    return Err(err("service_tier", "Input should be a valid string"));
                }
                walk.drop("service_tier");
            }
            "context_management" => {
                as_obj(v, "context_management")?;
                walk.drop("context_management");
            }
            "mcp_servers" => {
                if !as_arr(v, "mcp_servers")?.is_empty() {
                    walk.native("mcp_servers");
                }
            }
            _ => walk.drop(key.clone()),
        }
    }
    if !has_messages {
        return Err(err("messages", "Field required"));
    }
    if let Some(choice) = tool_choice {
        apply_tool_choice(choice, &mut walk, &mut build)?;
    }

    let mut msgs = Vec::with_capacity(build.messages.len().saturating_add(1));
    if let Some(system) = build.system.filter(|s| !s.is_empty()) {
        msgs.push(Message::new("system", system));
    }
    msgs.extend(build.messages);
    let mut chat = ChatRequest::new(model.clone(), msgs);
    chat.max_tokens = Some(max_tokens);
    chat.stream = Some(build.stream);
    if build.stream {
        chat.stream_options = Some(StreamOptions {
            include_usage: Some(true),
            extra: Map::new(),
        });
    }
    chat.extra = build.extra;
    chat.native = Some(Arc::new(NativeRequest {
        wire: NativeWire::Messages,
        body,
        headers,
        native_only: walk.native_only.clone(),
    }));
    Ok(Parsed {
        chat,
        model,
        stream: build.stream,
        dropped: walk.dropped,
        native_only: walk.native_only,
    })
}

/// `system`: a string or `text` blocks, as one text (joined with newlines).
fn system(v: &Value, walk: &mut Walk) -> Result<Option<String>, IngressError> {
    match v {
        Value::String(s) => Ok(Some(s.clone())),
        Value::Array(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.iter().enumerate() {
                let at = format!("system.{i}");
                let b = as_obj(b, &at)?;
                match req_str(b, "type", &at)? {
                    "text" => {}
                    other => {
                        return Err(err(
                            &format!("{at}.type"),
                            format!("Input should be 'text', not {other:?}"),
                        ))
                    }
                }
                let text = req_str(b, "text", &at)?;
                walk.cache_control(b);
                if given(b.get("citations")).is_some() {
                    walk.drop(format!("{at}.citations"));
                }
                if !text.is_empty() {
                    texts.push(text);
                }
            }
            Ok(Some(texts.join("\n")))
        }
        _ => Err(err(
            "system",
            "Input should be a valid string or a list of text blocks",
        )),
    }
}

/// `thinking`: `{type: "enabled", budget_tokens ≥ 1024}`, `{type: "adaptive"}`
/// or `{type: "disabled"}`; true when it asks for thinking (and is dropped).
fn thinking(v: &Value) -> Result<bool, IngressError> {
    let o = as_obj(v, "thinking")?;
    match req_str(o, "type", "thinking")? {
        "enabled" => match o.get("budget_tokens") {
            None | Some(Value::Null) => Err(err("thinking.budget_tokens", "Field required")),
            Some(b) => match b.as_u64() {
                Some(n) if n >= 1024 => Ok(true),
                Some(_) => Err(err("thinking.budget_tokens", "Input should be greater than or equal to 1024")),
                None if b.is_i64() => {
                    Err(err("thinking.budget_tokens", "Input should be greater than or equal to 1024"))
                }
                None => Err(err("thinking.budget_tokens", "Input should be a valid integer")),
            },
        },
        "adaptive" => Ok(true),
        "disabled" => Ok(false),
        other => Err(err(
            "thinking.type",
            format!("Input tag {other:?} does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'"),
        )),
    }
}

/// `tools`: custom tools as chat functions; typed (server) tools dropped by path.
fn tools(v: &Value, walk: &mut Walk, build: &mut Build) -> Result<(), IngressError> {
    let list = as_arr(v, "tools")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools.{i}");
        let t = as_obj(t, &at)?;
        match given(t.get("type")) {
            None => {}
            Some(Value::String(ty)) if ty == "custom" => {}
            Some(Value::String(ty)) if !ty.is_empty() => {
                walk.drop(at);
                continue;
            }
            Some(_) => {
                return Err(err(
                    &format!("{at}.type"),
                    "Input should be a valid, non-empty string",
                ))
            }
        }
        let name = req_str(t, "name", &at)?;
        if name.is_empty() {
            return Err(err(
                &format!("{at}.name"),
                "String should have at least 1 character",
            ));
        }
        let schema = req_obj(t, "input_schema", &at)?;
        let mut function = Map::new();
        function.insert("name".into(), json!(name));
        match given(t.get("description")) {
            None => {}
            Some(Value::String(d)) => {
                function.insert("description".into(), json!(d));
            }
            Some(_) => {
                return Err(err(
                    &format!("{at}.description"),
                    "Input should be a valid string",
                ))
            }
        }
        function.insert("parameters".into(), Value::Object(schema.clone()));
        match given(t.get("strict")) {
            None => {}
            Some(Value::Bool(b)) => {
                function.insert("strict".into(), json!(b));
            }
            Some(_) => return Err(err(&format!("{at}.strict"), "Input should be a valid boolean")),
        }
        walk.cache_control(t);
        for (k, v) in t {
            if !TOOL_FIELDS.contains(&k.as_str()) && !v.is_null() {
                walk.drop(format!("{at}.{k}"));
            }
        }
        build.tool_names.push(name.to_owned());
        out.push(json!({"type": "function", "function": function}));
    }
    if !out.is_empty() {
        build.extra.insert("tools".into(), Value::Array(out));
    }
    Ok(())
}

/// `tool_choice`, once the tools are known: left out (and named) when it
/// forces a tool the chat request does not have, or when no custom tool is
/// left (a chat request may not name a choice without tools).
fn apply_tool_choice(v: &Value, walk: &mut Walk, build: &mut Build) -> Result<(), IngressError> {
    let o = as_obj(v, "tool_choice")?;
    let ty = req_str(o, "type", "tool_choice")?;
    let parallel = match given(o.get("disable_parallel_tool_use")) {
        None => None,
        Some(Value::Bool(b)) => Some(!b),
        Some(_) => {
            return Err(err(
                "tool_choice.disable_parallel_tool_use",
                "Input should be a valid boolean",
            ))
        }
    };
    let choice = match ty {
        "auto" => json!("auto"),
        "any" => json!("required"),
        "none" => json!("none"),
        "tool" => {
            let name = req_str(o, "name", "tool_choice")?;
            if !build.tool_names.iter().any(|n| n == name) {
                walk.drop("tool_choice");
                return Ok(());
            }
            json!({"type": "function", "function": {"name": name}})
        }
        other => {
            return Err(err(
                "tool_choice.type",
                format!(
                "Input tag {other:?} does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
            ),
            ))
        }
    };
    if build.tool_names.is_empty() {
        if ty != "auto" && ty != "none" {
            walk.drop("tool_choice");
        }
        return Ok(());
    }
    build.extra.insert("tool_choice".into(), choice);
    if parallel == Some(false) && ty != "none" {
        build.extra.insert("parallel_tool_calls".into(), json!(false));
    }
    Ok(())
}

/// `messages`: each turn checked and translated, in order.
fn messages(v: &Value, walk: &mut Walk, build: &mut Build) -> Result<(), IngressError> {
    let list = as_arr(v, "messages")?;
    if list.is_empty() {
        return Err(err("messages", "List should have at least 1 item"));
    }
    let last = list.len().saturating_sub(1);
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages.{i}");
        let m = as_obj(m, &at)?;
        let user = match req_str(m, "role", &at)? {
            "user" => true,
            "assistant" => false,
            other => {
                return Err(err(
                    &format!("{at}.role"),
                    format!("Input should be 'user' or 'assistant', not {other:?}"),
                ))
            }
        };
        for (k, v) in m {
            if k != "role" && k != "content" && !v.is_null() {
                walk.drop(format!("{at}.{k}"));
            }
        }
        // Only a final assistant turn (a prefill) may be empty.
        let may_be_empty = !user && i == last;
        let empty = || {
            err(
                &format!("{at}.content"),
                "all messages must have non-empty content except for the optional final assistant message",
            )
        };
        match m.get("content") {
            None | Some(Value::Null) => return Err(err(&format!("{at}.content"), "Field required")),
            Some(Value::String(s)) => {
                if s.is_empty() && !may_be_empty {
                    return Err(empty());
                }
                if !s.is_empty() {
                    let role = if user { "user" } else { "assistant" };
                    build.messages.push(Message::new(role, s.clone()));
                }
            }
            Some(Value::Array(blocks)) => {
                if blocks.is_empty() && !may_be_empty {
                    return Err(empty());
                }
                if user {
                    user_turn(blocks, &at, walk, &mut build.messages)?;
                } else {
                    assistant_turn(blocks, &at, walk, &mut build.messages)?;
                }
            }
            Some(_) => {
                return Err(err(
                    &format!("{at}.content"),
                    "Input should be a valid string or a list of content blocks",
                ))
            }
        }
    }
    Ok(())
}

/// A block's `type`, checked to be a string.
fn block_type<'a>(b: &'a Map<String, Value>, at: &str) -> Result<&'a str, IngressError> {
    req_str(b, "type", at)
}

/// The unknown-type error of a content block.
fn unknown_block(at: &str, ty: &str) -> IngressError {
    err(
        &format!("{at}.type"),
        format!("Input tag {ty:?} found using 'type' does not match any of the expected tags: {BLOCK_TYPES}"),
    )
}

/// A text block's text (its `citations` named as dropped).
fn text_block<'a>(b: &'a Map<String, Value>, at: &str, walk: &mut Walk) -> Result<&'a str, IngressError> {
    let text = req_str(b, "text", at)?;
    if given(b.get("citations")).is_some() {
        walk.drop(format!("{at}.citations"));
    }
    Ok(text)
}

/// An image block as a chat `image_url` part; `None` when its source is a
/// file id (recorded as native only).
fn image_part(b: &Map<String, Value>, at: &str, walk: &mut Walk) -> Result<Option<Value>, IngressError> {
    let source = req_obj(b, "source", at)?;
    let src_at = format!("{at}.source");
    let url = match req_str(source, "type", &src_at)? {
        "base64" => {
            let media_type = req_str(source, "media_type", &src_at)?;
            let data = req_str(source, "data", &src_at)?;
            format!("data:{media_type};base64,{data}")
        }
        "url" => req_str(source, "url", &src_at)?.to_owned(),
        "file" => {
            walk.native(at);
            return Ok(None);
        }
        other => {
            return Err(err(
                &format!("{src_at}.type"),
                format!(
                    "Input tag {other:?} does not match any of the expected tags: 'base64', 'url', 'file'"
                ),
            ))
        }
    };
    Ok(Some(json!({"type": "image_url", "image_url": {"url": url}})))
}

/// A user turn: one `tool` message per `tool_result`, in order, then a
/// `user` message with the rest (and the images of the tool results).
fn user_turn(
    blocks: &[Value],
    at: &str,
    walk: &mut Walk,
    out: &mut Vec<Message>,
) -> Result<(), IngressError> {
    let mut parts: Vec<Value> = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content.{j}");
        let b = as_obj(b, &at)?;
        let ty = block_type(b, &at)?;
        walk.cache_control(b);
        match ty {
            "text" => {
                let text = text_block(b, &at, walk)?;
                if !text.is_empty() {
                    parts.push(json!({"type": "text", "text": text}));
                }
            }
            "image" => parts.extend(image_part(b, &at, walk)?),
            "document" => walk.native(at),
            "tool_result" => out.push(tool_result(b, &at, walk, &mut parts)?),
            "tool_use" => {
                return Err(err(
                    &format!("{at}.type"),
                    "tool_use blocks are only allowed in assistant messages",
                ))
            }
            "thinking" | "redacted_thinking" => {
                thinking_block(b, ty, &at)?;
                walk.drop(at);
            }
            t if NATIVE_BLOCKS.contains(&t) => walk.native(at),
            t => return Err(unknown_block(&at, t)),
        }
    }
    if parts.is_empty() {
        return Ok(());
    }
    let only_text = parts
        .iter()
        .all(|p| p.get("type").and_then(Value::as_str) == Some("text"));
    let content = if only_text {
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        MessageContent::Text(texts.join("\n"))
    } else {
        MessageContent::Parts(parts)
    };
    out.push(Message {
        role: "user".into(),
        content: Some(content),
        extra: Map::new(),
    });
    Ok(())
}

/// A `tool_result` block as a `tool` message; its images go to `images`
/// (the user message of the turn), documents and search results are native
/// only.
fn tool_result(
    b: &Map<String, Value>,
    at: &str,
    walk: &mut Walk,
    images: &mut Vec<Value>,
) -> Result<Message, IngressError> {
    let id = req_str(b, "tool_use_id", at)?;
    if id.is_empty() {
        return Err(err(
            &format!("{at}.tool_use_id"),
            "String should have at least 1 character",
        ));
    }
    let text = match given(b.get("content")) {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => {
            let mut texts = Vec::new();
            for (k, item) in items.iter().enumerate() {
                let at = format!("{at}.content.{k}");
                let item = as_obj(item, &at)?;
                walk.cache_control(item);
                match block_type(item, &at)? {
                    "text" => texts.push(text_block(item, &at, walk)?),
                    "image" => images.extend(image_part(item, &at, walk)?),
                    "document" | "search_result" => walk.native(at),
                    t => {
                        return Err(err(
                            &format!("{at}.type"),
                            format!("Input tag {t:?} found using 'type' does not match any of the expected tags: text, image, document, search_result"),
                        ))
                    }
                }
            }
            texts.join("\n")
        }
        Some(_) => {
            return Err(err(
                &format!("{at}.content"),
                "Input should be a valid string or a list of content blocks",
            ))
        }
    };
    match given(b.get("is_error")) {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => walk.drop(format!("{at}.is_error")),
        Some(_) => return Err(err(&format!("{at}.is_error"), "Input should be a valid boolean")),
    }
    let mut extra = Map::new();
    extra.insert("tool_call_id".into(), json!(id));
    Ok(Message {
        role: "tool".into(),
        content: Some(MessageContent::Text(text)),
        extra,
    })
}

/// A `thinking` block needs `thinking` and `signature`, a
/// `redacted_thinking` block `data` (all strings).
fn thinking_block(b: &Map<String, Value>, ty: &str, at: &str) -> Result<(), IngressError> {
    if ty == "thinking" {
        req_str(b, "thinking", at)?;
        req_str(b, "signature", at)?;
    } else {
        req_str(b, "data", at)?;
    }
    Ok(())
}

/// An assistant turn: its text (joined with newlines; `null` when none)
/// and one chat tool call per `tool_use` block.
fn assistant_turn(
    blocks: &[Value],
    at: &str,
    walk: &mut Walk,
    out: &mut Vec<Message>,
) -> Result<(), IngressError> {
    let mut texts: Vec<&str> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content.{j}");
        let b = as_obj(b, &at)?;
        let ty = block_type(b, &at)?;
        walk.cache_control(b);
        match ty {
            "text" => {
                let text = text_block(b, &at, walk)?;
                if !text.is_empty() {
                    texts.push(text);
                }
            }
            "tool_use" => {
                let id = req_str(b, "id", &at)?;
                if id.is_empty() {
                    return Err(err(
                        &format!("{at}.id"),
                        "String should have at least 1 character",
                    ));
                }
                let name = req_str(b, "name", &at)?;
                let input = req_obj(b, "input", &at)?;
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": Value::Object(input.clone()).to_string()},
                }));
            }
            "tool_result" => {
                return Err(err(
                    &format!("{at}.type"),
                    "tool_result blocks are only allowed in user messages",
                ))
            }
            "thinking" | "redacted_thinking" => {
                thinking_block(b, ty, &at)?;
                walk.drop(at);
            }
            // The chat wire has no image or document in an assistant turn.
            "image" | "document" => walk.native(at),
            t if NATIVE_BLOCKS.contains(&t) => walk.native(at),
            t => return Err(unknown_block(&at, t)),
        }
    }
    if texts.is_empty() && calls.is_empty() {
        return Ok(());
    }
    let mut extra = Map::new();
    if !calls.is_empty() {
        extra.insert("tool_calls".into(), Value::Array(calls));
    }
    out.push(Message {
        role: "assistant".into(),
        content: (!texts.is_empty()).then(|| MessageContent::Text(texts.join("\n"))),
        extra,
    });
    Ok(())
}
