//! The `messages` of a Messages body, turn by turn, as chat messages: a
//! user turn's `tool_result` blocks become `tool` messages and the rest one
//! `user` message, an assistant turn's `tool_use` blocks become tool calls,
//! a `system` turn a system message where it stands; blocks only the
//! Messages wire carries are recorded as native only (the table is in the
//! module docs of [`super`]).

use serde_json::{json, Map, Value};

use super::fields::{as_arr, as_obj, err, given, req_obj, req_str};
use super::translation::{Build, Walk};
use crate::ingress::IngressError;
use crate::provider::{Message, MessageContent};

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

/// `messages`: each turn checked and translated, in order.
pub(super) fn messages(v: &Value, walk: &mut Walk, build: &mut Build) -> Result<(), IngressError> {
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
