//! A chat-completions request as an Anthropic Messages request.
//!
//! | chat completions | Messages API |
//! |---|---|
//! | `model` | `model` |
//! | `max_tokens`, else `max_completion_tokens` | `max_tokens` (required by Anthropic; absent: [`DEFAULT_MAX_TOKENS`] — the pipeline sends the output it reserved instead) |
//! | `system` / `developer` messages, anywhere | top-level `system`: a string, or text blocks when there are several |
//! | `user` / `assistant` content: a string or parts | `content`: a string, or blocks |
//! | part `{"type":"text"}` | `{"type":"text"}` |
//! | part `{"type":"image_url","image_url":{"url"}}` | `{"type":"image","source":{"type":"url","url"}}`, or for a `data:` URL `{"type":"base64","media_type","data"}` |
//! | part `{"type":"file","file":{"file_data":"data:application/pdf;base64,…"}}` | `{"type":"document","source":{"type":"base64",…}}` |
//! | assistant `tool_calls` | `tool_use` blocks (`input` = the parsed `arguments`) after the text |
//! | `role: tool` (`tool_call_id`, `content`) | a `tool_result` block in a user turn; consecutive tool messages (and a user message right after them) share one turn |
//! | consecutive messages of one role | merged into one turn (Anthropic wants turns to alternate) |
//! | `tools: [{"type":"function","function":{name, description, parameters}}]` | `tools: [{name, description, input_schema}]` |
//! | `tool_choice`: `"auto"`, `"none"`, `"required"`, `{"type":"function","function":{"name"}}` | `{"type":"auto"}`, `{"type":"none"}`, `{"type":"any"}`, `{"type":"tool","name"}` |
//! | `parallel_tool_calls: false` | `tool_choice.disable_parallel_tool_use: true` |
//! | `stop`: a string or an array | `stop_sequences`: an array |
//! | `temperature` (0–1) | `temperature`; above 1 (Anthropic's range ends there) the request is refused, naming `temperature` |
//! | `response_format` `text` | nothing (the default) |
//! | `response_format` `json_schema` (`schema` an object) | a forced tool: `tools: [{name: "pressure_response_format", input_schema: schema}]`, `tool_choice: {"type":"tool"}`; its input comes back as the message content (JSON text). Beside the caller's own tools, or `json_object`, it is refused, naming `response_format` |
//! | `top_p` | `top_p` |
//! | `user` | `metadata.user_id` |
//! | `top_k`, `metadata`, `thinking` (Anthropic's own fields) | passed through |
//! | `stream` | `stream: true` for [`ProviderClient::stream`](crate::provider::ProviderClient::stream) |
//!
//! Every other field is dropped: the Messages API refuses fields it does not
//! know, and the OpenAI-only ones (`n` of 1, `presence_penalty`,
//! `frequency_penalty`, `logit_bias`, `logprobs`, `seed`,
//! `stream_options`, `store`, …) have no counterpart.
//! What cannot be expressed at all is refused as a [`TranslateError`] (the
//! client reports it as a `BadRequest`, no call made, with the field in
//! the 400's `param` where one is at fault): a `temperature` outside 0–1, a
//! `response_format` Anthropic cannot honour, `n` above 1, an
//! unknown role, a content part or tool type Anthropic has no block for, a
//! tool call whose `arguments` are not a JSON object.

use crate::provider::translate_error::TranslateError;
use serde_json::{json, Map, Value};

use super::ANSWER_TOOL;
use crate::provider::types::{ChatRequest, Message, MessageContent};

/// `max_tokens` sent when the request names none (Anthropic requires one).
/// The pipeline never relies on it: it sends the output tokens it reserved
/// for the call (the model's `defaultMaxTokens` or `maxOutputTokens`).
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 4096;

fn bad(message: impl Into<String>) -> TranslateError {
    TranslateError::bad("anthropic", message)
}

/// A refusal of the request field `param`.
fn refuse(param: &'static str, message: impl Into<String>) -> TranslateError {
    TranslateError::refuse("anthropic", param, message)
}

/// Anthropic's highest `temperature` (OpenAI's is 2).
pub(crate) const MAX_TEMPERATURE: f64 = 1.0;

/// The Messages request for `req`; `streaming` sets `stream: true`.
pub(crate) fn to_messages_request(req: &ChatRequest, streaming: bool) -> Result<Value, TranslateError> {
    if let Some(n) = req.extra.get("n").and_then(Value::as_u64) {
        if n > 1 {
            return Err(bad(format!("n = {n}: Anthropic answers one choice per request")));
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), json!(req.model));
    let max_tokens = req.max_output_tokens().unwrap_or(DEFAULT_MAX_TOKENS);
    out.insert("max_tokens".into(), json!(max_tokens));
    conversation(req, &mut out)?;
    sampling(&req.extra, &mut out)?;
    tools(&req.extra, &mut out)?;
    response_format(&req.extra, &mut out)?;
    if streaming {
        out.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(out))
}

/// `system` and `messages`: system prompts to the top level, turns merged
/// so that roles alternate.
fn conversation(req: &ChatRequest, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(String, Vec<Value>)> = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        let (role, blocks) = match m.role.as_str() {
            "system" | "developer" => {
                let text = m.text();
                if !text.is_empty() {
                    system.push(text);
                }
                continue;
            }
            "user" => ("user", content_blocks(m, i)?),
            "assistant" => ("assistant", assistant_blocks(m, i)?),
            "tool" => ("user", vec![tool_result(m, i)?]),
            other => {
                return Err(bad(format!(
                    "messages[{i}].role {other:?} has no Anthropic counterpart"
                )))
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, prev)) if last == role => prev.extend(blocks),
            _ => turns.push((role.to_owned(), blocks)),
        }
    }
    match system.len() {
        0 => {}
        1 => {
            out.insert("system".into(), json!(system[0]));
        }
        _ => {
            let blocks: Vec<Value> = system
                .iter()
                .map(|t| json!({"type": "text", "text": t}))
                .collect();
            out.insert("system".into(), Value::Array(blocks));
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, blocks)| json!({"role": role, "content": compact(blocks)}))
        .collect();
    out.insert("messages".into(), Value::Array(messages));
    Ok(())
}

/// `stop_sequences`, `temperature` (refused outside Anthropic's range),
/// `top_p`, `top_k`, `thinking`, `metadata` (with `user`).
fn sampling(extra: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    if let Some(stop) = extra.get("stop").filter(|v| !v.is_null()) {
        let seqs: Vec<Value> = match stop {
            Value::String(s) => vec![json!(s)],
            Value::Array(items) if items.iter().all(Value::is_string) => items.clone(),
            _ => return Err(bad("stop must be a string or an array of strings")),
        };
        if !seqs.is_empty() {
            out.insert("stop_sequences".into(), Value::Array(seqs));
        }
    }
    if let Some(t) = extra.get("temperature").filter(|v| !v.is_null()) {
        match t.as_f64() {
            Some(x) if (0.0..=MAX_TEMPERATURE).contains(&x) => {
                out.insert("temperature".into(), t.clone());
            }
            _ => {
                return Err(refuse(
                    "temperature",
                    format!(
                        "temperature {t} is outside 0 to {MAX_TEMPERATURE}, the range of Anthropic's models"
                    ),
                ))
            }
        }
    }
    if let Some(p) = extra.get("top_p").filter(|v| v.is_number()) {
        out.insert("top_p".into(), p.clone());
    }
    for field in ["top_k", "thinking"] {
        if let Some(v) = extra.get(field).filter(|v| !v.is_null()) {
            out.insert(field.into(), v.clone());
        }
    }
    let mut metadata = extra
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(user) = extra.get("user").and_then(Value::as_str) {
        metadata.entry("user_id").or_insert_with(|| json!(user));
    }
    if !metadata.is_empty() {
        out.insert("metadata".into(), Value::Object(metadata));
    }
    Ok(())
}

/// `tools` and `tool_choice` (with `parallel_tool_calls: false`).
fn tools(extra: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    if let Some(tools) = extra.get("tools").filter(|v| !v.is_null()) {
        let Some(tools) = tools.as_array() else {
            return Err(bad("tools must be an array"));
        };
        let tools = tools
            .iter()
            .enumerate()
            .map(|(i, t)| tool(t, i))
            .collect::<Result<Vec<_>, _>>()?;
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    let parallel = extra.get("parallel_tool_calls").and_then(Value::as_bool);
    if let Some(mut choice) = tool_choice(extra.get("tool_choice"))? {
        if parallel == Some(false) && choice["type"] != "none" {
            choice["disable_parallel_tool_use"] = json!(true);
        }
        out.insert("tool_choice".into(), choice);
    } else if parallel == Some(false) && out.contains_key("tools") {
        out.insert(
            "tool_choice".into(),
            json!({"type": "auto", "disable_parallel_tool_use": true}),
        );
    }
    Ok(())
}

/// `response_format`: `text` is the default (nothing to send); a
/// `json_schema` is asked through a forced tool ([`ANSWER_TOOL`]) whose
/// input schema is the format's schema; anything else (`json_object`: the
/// Messages API has no JSON mode) is refused, as is a `json_schema` beside
/// the caller's own tools or `tool_choice` (the forced tool would take
/// their place), or whose schema is not an object.
fn response_format(extra: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    let format = match extra.get("response_format") {
        None | Some(Value::Null) => return Ok(()),
        Some(f) => f,
    };
    let no = |why: String| Err(refuse("response_format", why));
    match format.get("type").and_then(Value::as_str).unwrap_or("") {
        "text" => Ok(()),
        "json_schema" => {
            let Some(spec) = format.get("json_schema") else {
                return no("response_format.json_schema is missing".into());
            };
            let schema = match spec.get("schema") {
                Some(s @ Value::Object(o)) if o.get("type").is_none_or(|t| t == "object") => s.clone(),
                _ => {
                    return no(
                        "an Anthropic model answers a json_schema response_format through a tool, \
                         whose schema must be an object"
                            .into(),
                    )
                }
            };
            let own = |k: &str| extra.get(k).is_some_and(|v| !v.is_null());
            if own("tools") || own("tool_choice") {
                return no("response_format json_schema cannot be combined with tools for an Anthropic model".into());
            }
            let description = spec
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("Give the answer as the input of this tool.");
            out.insert(
                "tools".into(),
                json!([{"name": ANSWER_TOOL, "description": description, "input_schema": schema}]),
            );
            out.insert("tool_choice".into(), json!({"type": "tool", "name": ANSWER_TOOL}));
            Ok(())
        }
        other => no(format!(
            "response_format {other:?} cannot be sent to an Anthropic model (it has no JSON mode; use json_schema)"
        )),
    }
}

/// The request body as bytes.
pub(crate) fn encode(req: &ChatRequest, streaming: bool) -> Result<Vec<u8>, TranslateError> {
    let v = to_messages_request(req, streaming)?;
    serde_json::to_vec(&v).map_err(|e| bad(format!("serialising the request: {e}")))
}

/// A content of exactly one text block is sent as a plain string.
fn compact(blocks: Vec<Value>) -> Value {
    match blocks.as_slice() {
        [only] if only["type"] == "text" && only.as_object().is_some_and(|o| o.len() == 2) => {
            only["text"].clone()
        }
        _ => Value::Array(blocks),
    }
}

/// The blocks of a user (or assistant) message's content.
fn content_blocks(m: &Message, i: usize) -> Result<Vec<Value>, TranslateError> {
    match &m.content {
        None => Ok(Vec::new()),
        Some(MessageContent::Text(s)) if s.is_empty() => Ok(Vec::new()),
        Some(MessageContent::Text(s)) => Ok(vec![json!({"type": "text", "text": s})]),
        Some(MessageContent::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| part(p, i, j))
            .collect::<Result<Vec<_>, _>>()
            .map(|v| v.into_iter().flatten().collect()),
    }
}

/// One content part as a block (`None`: an empty text part, left out).
fn part(p: &Value, i: usize, j: usize) -> Result<Option<Value>, TranslateError> {
    let at = || format!("messages[{i}].content[{j}]");
    let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "text" => {
            let text = p.get("text").and_then(Value::as_str).unwrap_or("");
            Ok((!text.is_empty()).then(|| json!({"type": "text", "text": text})))
        }
        "image_url" => {
            let url = p
                .get("image_url")
                .and_then(|u| u.get("url").or(Some(u)))
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{}: image_url.url missing", at())))?;
            Ok(Some(json!({"type": "image", "source": source(url, &at())?})))
        }
        "file" => {
            let data = p
                .pointer("/file/file_data")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    bad(format!(
                        "{}: only inline file_data can be sent to Anthropic",
                        at()
                    ))
                })?;
            Ok(Some(json!({"type": "document", "source": source(data, &at())?})))
        }
        other => Err(bad(format!(
            "{}: content part type {other:?} has no Anthropic block",
            at()
        ))),
    }
}

/// An image or document source: a `data:<type>;base64,<data>` URL as base64, an http(s) URL as a URL.
fn source(url: &str, at: &str) -> Result<Value, TranslateError> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest
            .split_once(',')
            .ok_or_else(|| bad(format!("{at}: malformed data URL")))?;
        let media_type = meta
            .strip_suffix(";base64")
            .ok_or_else(|| bad(format!("{at}: only base64 data URLs can be sent to Anthropic")))?;
        return Ok(json!({"type": "base64", "media_type": media_type, "data": data}));
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(json!({"type": "url", "url": url}));
    }
    Err(bad(format!("{at}: the URL must be http(s) or a base64 data URL")))
}

/// An assistant message: its text, then one `tool_use` block per tool call.
fn assistant_blocks(m: &Message, i: usize) -> Result<Vec<Value>, TranslateError> {
    let mut blocks = content_blocks(m, i)?;
    if let Some(refusal) = m.extra.get("refusal").and_then(Value::as_str) {
        if blocks.is_empty() && !refusal.is_empty() {
            blocks.push(json!({"type": "text", "text": refusal}));
        }
    }
    let Some(calls) = m.extra.get("tool_calls").filter(|v| !v.is_null()) else {
        return Ok(blocks);
    };
    let calls = calls
        .as_array()
        .ok_or_else(|| bad(format!("messages[{i}].tool_calls must be an array")))?;
    for (j, call) in calls.iter().enumerate() {
        let at = format!("messages[{i}].tool_calls[{j}]");
        let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{at}.function.name missing")))?;
        let args = call.pointer("/function/arguments");
        let input = match args {
            None | Some(Value::Null) => json!({}),
            Some(Value::String(s)) if s.trim().is_empty() => json!({}),
            Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| bad(format!("{at}.function.arguments is not a JSON object")))?,
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => return Err(bad(format!("{at}.function.arguments is not a JSON object"))),
        };
        blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
    }
    Ok(blocks)
}

/// A `role: tool` message as a `tool_result` block.
fn tool_result(m: &Message, i: usize) -> Result<Value, TranslateError> {
    let id = m
        .extra
        .get("tool_call_id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("messages[{i}].tool_call_id missing")))?;
    let content = match &m.content {
        None => Value::String(String::new()),
        Some(MessageContent::Text(s)) => Value::String(s.clone()),
        Some(MessageContent::Parts(_)) => {
            let blocks = content_blocks(m, i)?;
            Value::Array(blocks)
        }
    };
    let mut block = json!({"type": "tool_result", "tool_use_id": id, "content": content});
    if m.extra.get("is_error").and_then(Value::as_bool) == Some(true) {
        block["is_error"] = json!(true);
    }
    Ok(block)
}

/// One OpenAI tool definition as an Anthropic tool.
fn tool(t: &Value, i: usize) -> Result<Value, TranslateError> {
    let ty = t.get("type").and_then(Value::as_str).unwrap_or("function");
    if ty != "function" {
        return Err(bad(format!(
            "tools[{i}].type {ty:?} has no Anthropic counterpart"
        )));
    }
    let f = t.get("function").unwrap_or(t);
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("tools[{i}].function.name missing")))?;
    let mut out = json!({"name": name});
    if let Some(d) = f.get("description").and_then(Value::as_str) {
        out["description"] = json!(d);
    }
    out["input_schema"] = match f.get("parameters") {
        Some(p @ Value::Object(_)) => p.clone(),
        _ => json!({"type": "object", "properties": {}}),
    };
    Ok(out)
}

/// `tool_choice` in Anthropic's shape, if the request set one.
fn tool_choice(choice: Option<&Value>) -> Result<Option<Value>, TranslateError> {
    let out = match choice {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "none" => json!({"type": "none"}),
            "required" => json!({"type": "any"}),
            other => {
                return Err(bad(format!(
                    "tool_choice {other:?} is not auto, none or required"
                )))
            }
        },
        Some(v @ Value::Object(_)) => {
            let name = v
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("tool_choice.function.name missing"))?;
            json!({"type": "tool", "name": name})
        }
        Some(_) => return Err(bad("tool_choice must be a string or an object")),
    };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    fn translate(v: Value) -> Value {
        to_messages_request(&req(v), false).unwrap_or_else(|e| panic!("{e}"))
    }

    fn fixture(name: &str) -> Value {
        let text = match name {
            "request-tools" => include_str!("../../../tests/fixtures/anthropic/request-tools.json"),
            "request-tools.expected" => {
                include_str!("../../../tests/fixtures/anthropic/request-tools.expected.json")
            }
            _ => unreachable!("no fixture {name}"),
        };
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn system_prompts_go_to_the_top_level() {
        let one = translate(json!({
            "model": "claude-x", "max_tokens": 100,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        }));
        assert_eq!(
            one,
            json!({"model": "claude-x", "max_tokens": 100, "system": "Be brief.",
                   "messages": [{"role": "user", "content": "Hi"}]})
        );
        let many = translate(json!({
            "model": "claude-x",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]}
            ]
        }));
        assert_eq!(
            many["system"],
            json!([{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}])
        );
        assert_eq!(
            many["max_tokens"], DEFAULT_MAX_TOKENS,
            "Anthropic requires max_tokens"
        );
        assert_eq!(many["messages"], json!([{"role": "user", "content": "Hi"}]));
    }

    #[test]
    fn max_completion_tokens_and_sampling() {
        let v = translate(json!({
            "model": "claude-x", "max_completion_tokens": 77, "temperature": 0.7, "top_p": 0.9,
            "stop": "\n\nHuman:", "user": "u-1", "presence_penalty": 0.5, "seed": 3, "n": 1,
            "stream_options": {"include_usage": true}, "top_k": 5,
            "messages": [{"role": "user", "content": "Hi"}]
        }));
        assert_eq!(v["max_tokens"], 77);
        assert_eq!(v["temperature"], 0.7);
        assert_eq!(v["top_p"], 0.9);
        assert_eq!(v["top_k"], 5);
        assert_eq!(v["stop_sequences"], json!(["\n\nHuman:"]));
        assert_eq!(v["metadata"], json!({"user_id": "u-1"}));
        for dropped in [
            "presence_penalty",
            "seed",
            "n",
            "stream_options",
            "stop",
            "user",
            "stream",
        ] {
            assert!(v.get(dropped).is_none(), "{dropped} must not be sent");
        }
        let arr = translate(
            json!({"model": "m", "stop": ["END", "STOP"], "messages": [{"role": "user", "content": "x"}]}),
        );
        assert_eq!(arr["stop_sequences"], json!(["END", "STOP"]));
        let s = to_messages_request(
            &req(json!({"model": "m", "messages": [{"role": "user", "content": "x"}]})),
            true,
        )
        .unwrap();
        assert_eq!(s["stream"], true);
    }

    #[test]
    fn multi_part_content_and_images() {
        let v = translate(json!({
            "model": "claude-x", "max_tokens": 10,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}}
            ]}]
        }));
        assert_eq!(
            v["messages"][0]["content"],
            json!([
                {"type": "text", "text": "What is in these?"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
            ])
        );
    }

    #[test]
    fn tool_calls_and_tool_results_fixture() {
        assert_eq!(
            translate(fixture("request-tools")),
            fixture("request-tools.expected")
        );
    }

    #[test]
    fn tool_choice_variants() {
        let with = |choice: Value, parallel: Option<bool>| {
            let mut r = json!({
                "model": "m", "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": choice
            });
            if let Some(p) = parallel {
                r["parallel_tool_calls"] = json!(p);
            }
            translate(r)
        };
        assert_eq!(with(json!("auto"), None)["tool_choice"], json!({"type": "auto"}));
        assert_eq!(with(json!("none"), None)["tool_choice"], json!({"type": "none"}));
        assert_eq!(
            with(json!("required"), None)["tool_choice"],
            json!({"type": "any"})
        );
        assert_eq!(
            with(json!({"type": "function", "function": {"name": "f"}}), None)["tool_choice"],
            json!({"type": "tool", "name": "f"})
        );
        assert_eq!(
            with(json!("required"), Some(false))["tool_choice"],
            json!({"type": "any", "disable_parallel_tool_use": true})
        );
        assert_eq!(
            with(Value::Null, Some(false))["tool_choice"],
            json!({"type": "auto", "disable_parallel_tool_use": true})
        );
        assert!(with(Value::Null, None).get("tool_choice").is_none());
        let t = with(json!("auto"), None);
        assert_eq!(
            t["tools"],
            json!([{"name": "f", "input_schema": {"type": "object", "properties": {}}}])
        );
    }

    #[test]
    fn untranslatable_requests_are_refused() {
        let refuse = |v: Value| to_messages_request(&req(v), false).unwrap_err().message;
        let user = json!([{"role": "user", "content": "x"}]);
        assert!(refuse(json!({"model": "m", "n": 2, "messages": user})).contains("n = 2"));
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "function", "content": "x"}]}))
                .contains("role")
        );
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]}))
            .contains("input_audio")
        );
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}]}))
            .contains("http(s)")
        );
        assert!(refuse(json!({"model": "m", "messages": [{"role": "assistant", "content": null,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}))
        .contains("arguments"));
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}))
                .contains("tool_call_id")
        );
        assert!(
            refuse(json!({"model": "m", "messages": user, "tools": [{"type": "code_interpreter"}]}))
                .contains("code_interpreter")
        );
        assert!(
            refuse(json!({"model": "m", "messages": user, "tool_choice": "sometimes"})).contains("sometimes")
        );
        assert!(refuse(json!({"model": "m", "messages": user, "stop": 5})).contains("stop"));
    }

    #[test]
    fn out_of_range_values_are_refused_naming_the_field_never_changed() {
        let param = |v: Value| to_messages_request(&req(v), false).err().and_then(|e| e.param);
        let user = json!([{"role": "user", "content": "x"}]);
        assert_eq!(
            param(json!({"model": "m", "messages": user, "temperature": 1.5})),
            Some("temperature")
        );
        assert_eq!(
            param(json!({"model": "m", "messages": user, "temperature": -0.1})),
            Some("temperature")
        );
        assert_eq!(
            param(json!({"model": "m", "messages": user, "response_format": {"type": "json_object"}})),
            Some("response_format")
        );
        let v = translate(json!({"model": "m", "messages": user, "temperature": 1.0,
                                 "response_format": {"type": "text"}}));
        assert_eq!(v["temperature"], 1.0);
        assert!(v.get("response_format").is_none());
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        assert_eq!(
            param(json!({"model": "m", "messages": user, "tools": tools,
                         "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}})),
            Some("response_format")
        );
    }

    #[test]
    fn a_json_schema_is_asked_through_a_forced_tool() {
        let schema =
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let v = translate(json!({
            "model": "m", "messages": [{"role": "user", "content": "Where?"}], "parallel_tool_calls": false,
            "response_format": {"type": "json_schema", "json_schema": {"name": "place", "strict": true, "schema": schema}}
        }));
        assert_eq!(v["tools"][0]["name"], ANSWER_TOOL);
        assert_eq!(v["tools"][0]["input_schema"], schema);
        assert_eq!(v["tool_choice"], json!({"type": "tool", "name": ANSWER_TOOL}));
        assert!(v.get("response_format").is_none());
    }
}
