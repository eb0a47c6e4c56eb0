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
    fn name(&mut self, name: impl Into<String>) {
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
            self.name("cache_control");
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
                walk.name("top_k");
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
                    walk.name("metadata");
                }
            }
            "thinking" => {
                if thinking(v)? {
                    walk.name("thinking");
                }
            }
            "service_tier" => {
                if !v.is_string() {
                    return Err(err("service_tier", "Input should be a valid string"));
                }
                walk.name("service_tier");
            }
            "context_management" => {
                as_obj(v, "context_management")?;
                walk.name("context_management");
            }
            "mcp_servers" => {
                if !as_arr(v, "mcp_servers")?.is_empty() {
                    walk.native("mcp_servers");
                }
            }
            _ => walk.name(key.clone()),
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
                    walk.name(format!("{at}.citations"));
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
                walk.name(at);
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
                walk.name(format!("{at}.{k}"));
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
                walk.name("tool_choice");
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
            walk.name("tool_choice");
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
            // Claude Code (2.1) sends system text inside the conversation
            // too: a system message where it stands.
            "system" => {
                system_turn(m, &at, walk, &mut build.messages)?;
                continue;
            }
            other => {
                return Err(err(
                    &format!("{at}.role"),
                    format!("Input should be 'user', 'assistant' or 'system', not {other:?}"),
                ))
            }
        };
        for (k, v) in m {
            if k != "role" && k != "content" && !v.is_null() {
                walk.name(format!("{at}.{k}"));
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

/// A `system` turn inside `messages`: a string or text blocks (their
/// `cache_control` named as dropped), as one chat system message.
fn system_turn(
    m: &Map<String, Value>,
    at: &str,
    walk: &mut Walk,
    out: &mut Vec<Message>,
) -> Result<(), IngressError> {
    for (k, v) in m {
        if k != "role" && k != "content" && !v.is_null() {
            walk.name(format!("{at}.{k}"));
        }
    }
    let text = match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter().enumerate() {
                let bat = format!("{at}.content.{j}");
                let b = as_obj(b, &bat)?;
                match block_type(b, &bat)? {
                    "text" => {}
                    other => {
                        return Err(err(
                            &format!("{bat}.type"),
                            format!("a system message takes text blocks, not {other:?}"),
                        ))
                    }
                }
                walk.cache_control(b);
                texts.push(text_block(b, &bat, walk)?);
            }
            texts.join("\n")
        }
        None | Some(Value::Null) => return Err(err(&format!("{at}.content"), "Field required")),
        Some(_) => {
            return Err(err(
                &format!("{at}.content"),
                "Input should be a valid string or a list of text blocks",
            ))
        }
    };
    if text.is_empty() {
        return Err(err(
            &format!("{at}.content"),
            "all messages must have non-empty content except for the optional final assistant message",
        ));
    }
    out.push(Message::new("system", text));
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
        walk.name(format!("{at}.citations"));
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
                walk.name(at);
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
        Some(Value::Bool(true)) => walk.name(format!("{at}.is_error")),
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
                walk.name(at);
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

#[cfg(test)]
mod tests {
    /// Claude Code's own request, as recorded (tests/fixtures/agents).
    #[test]
    fn claude_codes_recorded_request_is_taken() {
        let text = include_str!("../../../tests/fixtures/agents/claude_code_messages.json");
        let body: serde_json::Map<String, Value> = serde_json::from_str(text).expect("a JSON object");
        let parsed = super::parse(body, Vec::new()).unwrap_or_else(|e| panic!("{}: {}", e.param, e.message));
        assert!(parsed.stream);
        assert_eq!(parsed.native_only, None);
        // Its system blocks first, then its turns in order: a system turn
        // stays where it stands.
        let roles: Vec<&str> = parsed.chat.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "system"]);
        assert!(parsed.chat.messages[2].text().starts_with("# Environment"));
        for hint in ["thinking", "metadata", "context_management", "cache_control"] {
            assert!(
                parsed.dropped.iter().any(|d| d == hint),
                "{hint}: {:?}",
                parsed.dropped
            );
        }
    }

    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("fixture is not an object: {other}"),
        }
    }

    fn ok(v: Value) -> Parsed {
        parse(body(v), Vec::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The chat messages of a parsed request, as on the wire.
    fn wire(p: &Parsed) -> Value {
        serde_json::to_value(&p.chat).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The param of the error `v` is refused with.
    fn param(v: Value) -> String {
        match parse(body(v), Vec::new()) {
            Ok(p) => panic!("accepted: {:?}", p.chat),
            Err(e) => {
                assert!(e.message.starts_with(&e.param), "{e:?}");
                e.param
            }
        }
    }

    /// A minimal valid request with `field` set to `value` (`null` removes it).
    fn with(field: &str, value: Value) -> Value {
        let mut v = json!({"model": "claude-x", "max_tokens": 100,
                           "messages": [{"role": "user", "content": "Hi"}]});
        if let Some(o) = v.as_object_mut() {
            if value.is_null() {
                o.remove(field);
            } else {
                o.insert(field.into(), value);
            }
        }
        v
    }

    /// A Claude Code request, shaped as Claude Code sends it: system blocks
    /// with cache_control, 24 tools (one a server tool), thinking, metadata,
    /// context management, a history with thinking, tool_use and tool_result.
    fn claude_code() -> Value {
        let names = [
            "Task",
            "Bash",
            "Glob",
            "Grep",
            "ExitPlanMode",
            "Read",
            "Edit",
            "MultiEdit",
            "Write",
            "NotebookEdit",
            "WebFetch",
            "TodoWrite",
            "BashOutput",
            "KillShell",
            "SlashCommand",
            "ListMcpResources",
            "ReadMcpResource",
            "mcp__ide__getDiagnostics",
            "mcp__ide__executeCode",
            "AskUserQuestion",
            "Skill",
            "EnterPlanMode",
            "LSP",
        ];
        let mut tools: Vec<Value> = names
            .iter()
            .map(|n| {
                json!({"name": n, "description": format!("The {n} tool."), "input_schema": {
                    "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"],
                    "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}})
            })
            .collect();
        tools.insert(
            12,
            json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 5}),
        );
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
        json!({
            "model": "claude-sonnet-4-5-20250929",
            "max_tokens": 32000,
            "stream": true,
            "temperature": 1,
            "system": [
                {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                 "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "You are an interactive CLI tool that helps users with software engineering tasks.",
                 "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "<system-reminder>CLAUDE.md says: run cargo test.</system-reminder>"},
                    {"type": "text", "text": "fix the failing test", "cache_control": {"type": "ephemeral"}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Read the test first.", "signature": "EqQBCkYIBxgCKkBx0sig=="},
                    {"type": "text", "text": "I'll read the file."},
                    {"type": "tool_use", "id": "toolu_01A", "name": "Read", "input": {"file_path": "/repo/src/lib.rs"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "     1\u{2192}fn add() {}\n"},
                    {"type": "text", "text": "<system-reminder>The todo list is empty.</system-reminder>"}
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Run it.", "signature": "EqQBCkYIBxgCKkBy1sig=="},
                    {"type": "tool_use", "id": "toolu_01B", "name": "Bash",
                     "input": {"command": "cargo test", "description": "Run the tests"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01B", "is_error": true,
                     "content": [{"type": "text", "text": "test result: FAILED. 0 passed; 1 failed"}],
                     "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "tools": tools,
            "metadata": {"user_id": "user_2f1c_account_9a7e_session_41b0"},
            "thinking": {"type": "enabled", "budget_tokens": 31999},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
        })
    }

    #[test]
    fn a_claude_code_request() {
        let raw = claude_code();
        let headers = vec![(
            "anthropic-beta".to_owned(),
            "interleaved-thinking-2025-05-14".to_owned(),
        )];
        let p = parse(body(raw.clone()), headers.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.model, "claude-sonnet-4-5-20250929");
        assert!(p.stream);
        assert_eq!(p.native_only, None);
        assert_eq!(
            p.dropped,
            [
                "context_management",
                "cache_control",
                "messages.1.content.0",
                "messages.3.content.0",
                "messages.4.content.0.is_error",
                "metadata",
                "thinking",
                "tools.12"
            ]
        );
        let native = p.chat.native.as_deref().unwrap_or_else(|| panic!("native set"));
        assert_eq!(native.wire, NativeWire::Messages);
        assert_eq!(Value::Object(native.body.clone()), raw, "the body as received");
        assert_eq!(native.headers, headers);

        let w = wire(&p);
        assert_eq!(w["model"], "claude-sonnet-4-5-20250929");
        assert_eq!(w["max_tokens"], 32000);
        assert_eq!(w["stream"], true);
        assert_eq!(w["stream_options"], json!({"include_usage": true}));
        assert_eq!(w["temperature"], 1);
        assert!(w.get("tool_choice").is_none() && w.get("parallel_tool_calls").is_none());
        for absent in ["thinking", "metadata", "system", "context_management", "stop"] {
            assert!(w.get(absent).is_none(), "{absent}");
        }
        assert_eq!(
            w["messages"],
            json!([
                {"role": "system", "content": "You are Claude Code, Anthropic's official CLI for Claude.\nYou are an interactive CLI tool that helps users with software engineering tasks."},
                {"role": "user", "content": "<system-reminder>CLAUDE.md says: run cargo test.</system-reminder>\nfix the failing test"},
                {"role": "assistant", "content": "I'll read the file.", "tool_calls": [
                    {"id": "toolu_01A", "type": "function",
                     "function": {"name": "Read", "arguments": "{\"file_path\":\"/repo/src/lib.rs\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_01A", "content": "     1\u{2192}fn add() {}\n"},
                {"role": "user", "content": "<system-reminder>The todo list is empty.</system-reminder>"},
                {"role": "assistant", "tool_calls": [
                    {"id": "toolu_01B", "type": "function",
                     "function": {"name": "Bash", "arguments": "{\"command\":\"cargo test\",\"description\":\"Run the tests\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_01B", "content": "test result: FAILED. 0 passed; 1 failed"}
            ])
        );
        let tools = w["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
        assert_eq!(tools.len(), 23, "the server tool is left out");
        assert_eq!(
            tools.first(),
            Some(
                &json!({"type": "function", "function": {"name": "Task", "description": "The Task tool.",
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"],
                               "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}}})
            )
        );
        assert_eq!(
            tools.get(12).map(|t| t["function"]["name"].clone()),
            Some(json!("BashOutput"))
        );
    }

    #[test]
    fn sampling_stop_and_tool_choice() {
        let mut v = with("stop_sequences", json!(["\n\nHuman:", "END"]));
        v["top_p"] = json!(0.9);
        v["top_k"] = json!(40);
        v["service_tier"] = json!("auto");
        v["some_future_field"] = json!({"x": 1});
        v["metadata"] = json!({});
        v["thinking"] = json!({"type": "disabled"});
        v["tools"] = json!([{"name": "f", "input_schema": {"type": "object"}, "strict": true, "defer_loading": true},
                            {"type": "bash_20250124", "name": "bash"}]);
        v["tool_choice"] = json!({"type": "any", "disable_parallel_tool_use": true});
        let p = ok(v.clone());
        let w = wire(&p);
        assert_eq!(w["stop"], json!(["\n\nHuman:", "END"]));
        assert_eq!(w["top_p"], 0.9);
        assert_eq!(w["stream"], false);
        assert!(
            w.get("stream_options").is_none(),
            "only a stream asks for usage chunks"
        );
        assert_eq!(w["tool_choice"], "required");
        assert_eq!(w["parallel_tool_calls"], false);
        assert_eq!(
            w["tools"],
            json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}])
        );
        assert_eq!(
            p.dropped,
            [
                "service_tier",
                "some_future_field",
                "tools.0.defer_loading",
                "tools.1",
                "top_k"
            ]
        );
        let choice = |c: Value| {
            let mut v = v.clone();
            v["tool_choice"] = c;
            let p = ok(v);
            (
                wire(&p).get("tool_choice").cloned(),
                p.dropped.contains(&"tool_choice".to_owned()),
            )
        };
        assert_eq!(choice(json!({"type": "auto"})), (Some(json!("auto")), false));
        assert_eq!(choice(json!({"type": "none"})), (Some(json!("none")), false));
        assert_eq!(
            choice(json!({"type": "tool", "name": "f"})),
            (
                Some(json!({"type": "function", "function": {"name": "f"}})),
                false
            )
        );
        assert_eq!(
            choice(json!({"type": "tool", "name": "bash"})),
            (None, true),
            "a server tool cannot be forced"
        );
        let mut only_server = with(
            "tools",
            json!([{"type": "web_search_20250305", "name": "web_search"}]),
        );
        only_server["tool_choice"] = json!({"type": "any"});
        let p = ok(only_server);
        assert!(wire(&p).get("tools").is_none() && wire(&p).get("tool_choice").is_none());
        assert_eq!(
            p.dropped,
            ["tools.0", "tool_choice"],
            "tool_choice is read after the tools"
        );
    }

    #[test]
    fn images_and_tool_result_images() {
        let p = ok(with(
            "messages",
            json!([
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "text", "text": "What is this?"}
                ]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [
                        {"type": "text", "text": "a screenshot"},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}}
                    ]}
                ]},
                {"role": "assistant", "content": ""}
            ]),
        ));
        assert_eq!(
            wire(&p)["messages"],
            json!([
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "text", "text": "What is this?"}
                ]},
                {"role": "assistant", "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "a screenshot"},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/s.png"}}]}
            ]),
            "an empty final assistant turn (a prefill) is allowed and left out"
        );
        assert!(p.dropped.is_empty() && p.native_only.is_none());
    }

    #[test]
    fn content_only_the_messages_wire_carries() {
        let doc = json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}});
        let p = ok(with(
            "messages",
            json!([{"role": "user", "content": [{"type": "text", "text": "Summarise"}, doc]}]),
        ));
        assert_eq!(p.native_only.as_deref(), Some("messages.0.content.1"));
        assert_eq!(
            wire(&p)["messages"],
            json!([{"role": "user", "content": "Summarise"}])
        );

        let history = json!([
            {"role": "user", "content": "Search the news"},
            {"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "text", "text": "Here is the news."}
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": [
                {"type": "search_result", "source": "s", "title": "t", "content": []}]}]}
        ]);
        let p = ok(with("messages", history.clone()));
        assert_eq!(
            p.native_only.as_deref(),
            Some("messages.1.content.0"),
            "the first one"
        );
        let mut v = with("messages", history);
        v["mcp_servers"] = json!([{"type": "url", "url": "https://mcp.example.com", "name": "x"}]);
        assert_eq!(
            ok(v).native_only.as_deref(),
            Some("mcp_servers"),
            "met before messages"
        );
        assert_eq!(ok(with("mcp_servers", json!([]))).native_only, None);
        let file = json!([{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "file_1"}}]}]);
        assert_eq!(
            ok(with("messages", file)).native_only.as_deref(),
            Some("messages.0.content.0")
        );
    }

    #[test]
    fn bad_requests_name_the_field() {
        let msgs = |m: Value| with("messages", m);
        let user = |content: Value| msgs(json!([{"role": "user", "content": content}]));
        let cases = [
            (with("max_tokens", Value::Null), "max_tokens"),
            (with("max_tokens", json!(0)), "max_tokens"),
            (with("max_tokens", json!(-5)), "max_tokens"),
            (with("max_tokens", json!(1.5)), "max_tokens"),
            (with("max_tokens", json!(u64::MAX)), "max_tokens"),
            (with("model", Value::Null), "model"),
            (with("model", json!("")), "model"),
            (with("messages", Value::Null), "messages"),
            (msgs(json!([])), "messages"),
            (msgs(json!("Hi")), "messages"),
            (
                msgs(json!([{"role": "tool", "content": "Be brief."}])),
                "messages.0.role",
            ),
            (
                msgs(json!([{"role": "system", "content": [{"type": "image", "source": {}}]}])),
                "messages.0.content.0.type",
            ),
            (
                msgs(json!([{"role": "system", "content": ""}])),
                "messages.0.content",
            ),
            (msgs(json!([{"role": "user"}])), "messages.0.content"),
            (user(json!(5)), "messages.0.content"),
            (user(json!("")), "messages.0.content"),
            (user(json!([])), "messages.0.content"),
            (
                user(json!([{"type": "text", "text": "a"}, {"type": "video", "url": "x"}])),
                "messages.0.content.1.type",
            ),
            (user(json!([{"text": "a"}])), "messages.0.content.0.type"),
            (
                user(json!([{"type": "text", "text": 7}])),
                "messages.0.content.0.text",
            ),
            (
                user(json!([{"type": "image", "source": {"type": "gif", "data": ""}}])),
                "messages.0.content.0.source.type",
            ),
            (
                user(json!([{"type": "tool_result", "content": "x"}])),
                "messages.0.content.0.tool_use_id",
            ),
            (
                user(json!([{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}])),
                "messages.0.content.0.is_error",
            ),
            (
                msgs(json!([{"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}])),
                "messages.1.content.0.id",
            ),
            (
                msgs(json!([{"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}])),
                "messages.1.content.0.input",
            ),
            (
                msgs(json!([{"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}])),
                "messages.1.content.0.signature",
            ),
            (with("tools", json!({"name": "f"})), "tools"),
            (with("tools", json!([{"name": "f"}])), "tools.0.input_schema"),
            (with("tools", json!([{"input_schema": {}}])), "tools.0.name"),
            (with("temperature", json!(2)), "temperature"),
            (with("temperature", json!("hot")), "temperature"),
            (with("top_p", json!(1.5)), "top_p"),
            (with("top_k", json!(-1)), "top_k"),
            (with("stop_sequences", json!(["a", 5])), "stop_sequences.1"),
            (with("stop_sequences", json!("a")), "stop_sequences"),
            (with("stream", json!("yes")), "stream"),
            (with("system", json!(3)), "system"),
            (
                with("system", json!([{"type": "image", "text": "x"}])),
                "system.0.type",
            ),
            (with("tool_choice", json!({"type": "tool"})), "tool_choice.name"),
            (
                with("tool_choice", json!({"type": "sometimes"})),
                "tool_choice.type",
            ),
            (with("tool_choice", json!("auto")), "tool_choice"),
            (with("metadata", json!("x")), "metadata"),
            (
                with("thinking", json!({"type": "enabled", "budget_tokens": 100})),
                "thinking.budget_tokens",
            ),
            (
                with("thinking", json!({"type": "enabled"})),
                "thinking.budget_tokens",
            ),
            (with("thinking", json!({"type": "on"})), "thinking.type"),
        ];
        for (v, want) in cases {
            assert_eq!(param(v.clone()), want, "{v}");
        }
    }

    #[test]
    fn large_strings_are_the_callers_to_bound() {
        let big = "x".repeat(10 * 1024 * 1024);
        let p = ok(with("messages", json!([{"role": "user", "content": big}])));
        assert_eq!(
            p.chat.messages.first().map(|m| m.text().len()),
            Some(10 * 1024 * 1024)
        );
    }
}
