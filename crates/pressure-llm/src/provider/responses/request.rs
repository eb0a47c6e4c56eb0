//! A chat-completions request as an OpenAI Responses request (the table is
//! in the [module docs](super)).
//!
//! Chat fields the Responses API has no place for are dropped: `n` of 1,
//! `stop`, `presence_penalty`, `frequency_penalty`, `logit_bias`,
//! `logprobs`, `top_logprobs`, `seed`, `stream_options`, `modalities`,
//! `audio`, `prediction`, `web_search_options`, the legacy `functions` /
//! `function_call`, `store` (always sent `false`) and anything unknown.
//! What cannot be expressed is refused as a [`TranslateError`]: `n` above
//! 1, a role or content part without a Responses counterpart (`function`,
//! `input_audio`), a tool type other than `function`, a tool message
//! without `tool_call_id`, a malformed `tool_choice` or `response_format`.

use crate::provider::translate_error::TranslateError;
use serde_json::{json, Map, Value};

use crate::provider::types::{ChatRequest, Message, MessageContent, NativeWire};

fn bad(message: impl Into<String>) -> TranslateError {
    TranslateError::bad("openai-responses", message)
}

/// A refusal of the request field `param`.
fn refuse(param: &'static str, message: impl Into<String>) -> TranslateError {
    TranslateError::refuse("openai-responses", param, message)
}

/// Chat fields sent under the same name and meaning.
const SAME_FIELDS: &[&str] = &[
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "metadata",
    "user",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
];

/// The request body as bytes: the agent's own Responses body when the
/// request came natively (its `model` and `stream` set, `stream_options`
/// removed from a call that does not stream, all else unchanged), else
/// the translation of the chat request. `streaming` sets `stream: true`.
pub(crate) fn encode(req: &ChatRequest, streaming: bool) -> Result<Vec<u8>, TranslateError> {
    let v = match req.native.as_deref() {
        Some(native) if native.wire == NativeWire::Responses => {
            let mut body = native.body.clone();
            body.insert("model".into(), json!(req.model));
            body.insert("stream".into(), json!(streaming));
            if !streaming {
                // OpenAI refuses stream options on a call that does not stream.
                body.remove("stream_options");
            }
            Value::Object(body)
        }
        _ => to_responses_request(req, streaming)?,
    };
    serde_json::to_vec(&v).map_err(|e| bad(format!("serialising the request: {e}")))
}

/// The Responses request for `req`; `streaming` sets `stream: true`.
fn to_responses_request(req: &ChatRequest, streaming: bool) -> Result<Value, TranslateError> {
    if let Some(n) = req.extra.get("n").and_then(Value::as_u64) {
        if n > 1 {
            return Err(bad(format!(
                "n = {n}: the Responses API answers one choice per request"
            )));
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), json!(req.model));
    conversation(req, &mut out)?;
    if let Some(max) = req.max_output_tokens() {
        out.insert("max_output_tokens".into(), json!(max));
    }
    for field in SAME_FIELDS {
        if let Some(v) = req.extra.get(*field).filter(|v| !v.is_null()) {
            out.insert((*field).into(), v.clone());
        }
    }
    tools(&req.extra, &mut out)?;
    if let Some(choice) = tool_choice(req.extra.get("tool_choice"))? {
        out.insert("tool_choice".into(), choice);
    }
    let mut text = Map::new();
    if let Some(format) = text_format(req.extra.get("response_format"))? {
        text.insert("format".into(), format);
    }
    if let Some(v) = req.extra.get("verbosity").filter(|v| v.is_string()) {
        text.insert("verbosity".into(), v.clone());
    }
    if !text.is_empty() {
        out.insert("text".into(), Value::Object(text));
    }
    if let Some(effort) = req.extra.get("reasoning_effort").filter(|v| v.is_string()) {
        out.insert("reasoning".into(), json!({"effort": effort}));
    }
    if streaming {
        out.insert("stream".into(), json!(true));
    }
    out.insert("store".into(), json!(false));
    Ok(Value::Object(out))
}

/// `instructions` (the system and developer messages, joined by a blank
/// line) and `input` (the other messages as items, in order).
fn conversation(req: &ChatRequest, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    let mut system: Vec<String> = Vec::new();
    let mut input: Vec<Value> = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        match m.role.as_str() {
            "system" | "developer" => {
                let text = m.text();
                if !text.is_empty() {
                    system.push(text);
                }
            }
            "user" => input.push(json!({"type": "message", "role": "user", "content": user_content(m, i)?})),
            "assistant" => assistant_items(m, i, &mut input)?,
            "tool" => {
                let call_id = m
                    .extra
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("messages[{i}].tool_call_id missing")))?;
                input.push(json!({"type": "function_call_output", "call_id": call_id, "output": m.text()}));
            }
            other => {
                return Err(bad(format!(
                    "messages[{i}].role {other:?} has no Responses counterpart"
                )))
            }
        }
    }
    if !system.is_empty() {
        out.insert("instructions".into(), json!(system.join("\n\n")));
    }
    out.insert("input".into(), Value::Array(input));
    Ok(())
}

/// A user message's content: a string as it is, parts as input parts.
fn user_content(m: &Message, i: usize) -> Result<Value, TranslateError> {
    match &m.content {
        None => Ok(json!("")),
        Some(MessageContent::Text(s)) => Ok(json!(s)),
        Some(MessageContent::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| input_part(p, i, j))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
    }
}

/// One chat content part as a Responses input part.
fn input_part(p: &Value, i: usize, j: usize) -> Result<Value, TranslateError> {
    let at = || format!("messages[{i}].content[{j}]");
    match p.get("type").and_then(Value::as_str).unwrap_or("") {
        "text" => {
            Ok(json!({"type": "input_text", "text": p.get("text").and_then(Value::as_str).unwrap_or("")}))
        }
        "image_url" => {
            let image = p.get("image_url");
            let url = image
                .and_then(|u| u.get("url").or(Some(u)))
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{}: image_url.url missing", at())))?;
            let mut part = json!({"type": "input_image", "image_url": url});
            part["detail"] = image
                .and_then(|u| u.get("detail"))
                .filter(|d| d.is_string())
                .cloned()
                .unwrap_or_else(|| json!("auto"));
            Ok(part)
        }
        "file" => {
            let file = p
                .get("file")
                .and_then(Value::as_object)
                .ok_or_else(|| bad(format!("{}: file missing", at())))?;
            let mut part = Map::new();
            part.insert("type".into(), json!("input_file"));
            for key in ["file_data", "file_id", "filename"] {
                if let Some(v) = file.get(key).filter(|v| v.is_string()) {
                    part.insert(key.into(), v.clone());
                }
            }
            Ok(Value::Object(part))
        }
        other => Err(bad(format!(
            "{}: content part type {other:?} has no Responses counterpart",
            at()
        ))),
    }
}

/// An assistant message: its text (or refusal) as a message item, then one
/// `function_call` item per tool call.
fn assistant_items(m: &Message, i: usize, input: &mut Vec<Value>) -> Result<(), TranslateError> {
    let mut text = m.text();
    if text.is_empty() {
        if let Some(refusal) = m.extra.get("refusal").and_then(Value::as_str) {
            refusal.clone_into(&mut text);
        }
    }
    if !text.is_empty() {
        input.push(json!({"type": "message", "role": "assistant", "content": text}));
    }
    let Some(calls) = m.extra.get("tool_calls").filter(|v| !v.is_null()) else {
        return Ok(());
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
        let arguments = match call.pointer("/function/arguments") {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        input.push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments}));
    }
    Ok(())
}

/// Chat function tools as flat Responses function tools. `strict` is sent
/// `false` when the chat tool did not say: chat's default, where the
/// Responses API's is `true`.
fn tools(extra: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    let Some(tools) = extra.get("tools").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let tools = tools
        .as_array()
        .ok_or_else(|| refuse("tools", "tools must be an array"))?;
    let mut flat = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let ty = t.get("type").and_then(Value::as_str).unwrap_or("function");
        if ty != "function" {
            return Err(refuse(
                "tools",
                format!("tools[{i}].type {ty:?} has no Responses counterpart"),
            ));
        }
        let f = t.get("function").unwrap_or(t);
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| refuse("tools", format!("tools[{i}].function.name missing")))?;
        let mut tool = json!({"type": "function", "name": name});
        if let Some(d) = f.get("description").filter(|d| d.is_string()) {
            tool["description"] = d.clone();
        }
        tool["parameters"] = match f.get("parameters") {
            Some(p @ Value::Object(_)) => p.clone(),
            _ => json!({"type": "object", "properties": {}}),
        };
        tool["strict"] = f
            .get("strict")
            .filter(|s| s.is_boolean())
            .cloned()
            .unwrap_or(json!(false));
        flat.push(tool);
    }
    if !flat.is_empty() {
        out.insert("tools".into(), Value::Array(flat));
    }
    Ok(())
}

/// `tool_choice` in the Responses shape, if the request set one.
fn tool_choice(choice: Option<&Value>) -> Result<Option<Value>, TranslateError> {
    match choice {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(Some(json!(s))),
        Some(Value::String(s)) => Err(refuse(
            "tool_choice",
            format!("tool_choice {s:?} is not auto, none or required"),
        )),
        Some(v @ Value::Object(_)) => {
            let name = v
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| refuse("tool_choice", "tool_choice.function.name missing"))?;
            Ok(Some(json!({"type": "function", "name": name})))
        }
        Some(_) => Err(refuse("tool_choice", "tool_choice must be a string or an object")),
    }
}

/// `response_format` as `text.format`.
fn text_format(format: Option<&Value>) -> Result<Option<Value>, TranslateError> {
    let Some(format) = format.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(Some(json!({"type": "text"}))),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let spec = format
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| refuse("response_format", "response_format.json_schema missing"))?;
            let name = spec
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| refuse("response_format", "response_format.json_schema.name missing"))?;
            let mut out = json!({"type": "json_schema", "name": name});
            for key in ["schema", "strict", "description"] {
                if let Some(v) = spec.get(key).filter(|v| !v.is_null()) {
                    out[key] = v.clone();
                }
            }
            Ok(Some(out))
        }
        _ => Err(refuse(
            "response_format",
            "response_format.type must be text, json_object or json_schema",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::provider::types::NativeRequest;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    fn translate(v: Value, streaming: bool) -> Value {
        let bytes = encode(&req(v), streaming).unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn system_tool_round_trip_and_response_format() {
        let v = translate(
            json!({
                "model": "gpt-5", "max_completion_tokens": 300, "temperature": 0.3, "top_p": 0.9,
                "parallel_tool_calls": false, "reasoning_effort": "low", "user": "u-1",
                "seed": 7, "stop": ["END"], "presence_penalty": 0.1, "stream_options": {"include_usage": true},
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
                    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"},
                                                 {"type": "image_url", "image_url": {"url": "https://x/a.png"}}]},
                    {"role": "assistant", "content": "Checking.", "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "20 C"}]}
                ],
                "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather now.",
                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
                "tool_choice": {"type": "function", "function": {"name": "weather"}},
                "response_format": {"type": "json_schema", "json_schema": {"name": "w", "strict": true,
                                    "schema": {"type": "object"}}}
            }),
            true,
        );
        assert_eq!(
            v,
            json!({
                "model": "gpt-5",
                "instructions": "Be brief.\n\nUse tools.",
                "input": [
                    {"type": "message", "role": "user", "content": [
                        {"type": "input_text", "text": "Weather in Paris?"},
                        {"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"}]},
                    {"type": "message", "role": "assistant", "content": "Checking."},
                    {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
                    {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "call_2", "output": "20 C"}
                ],
                "max_output_tokens": 300,
                "temperature": 0.3, "top_p": 0.9, "parallel_tool_calls": false, "user": "u-1",
                "tools": [{"type": "function", "name": "weather", "description": "Weather now.",
                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": false}],
                "tool_choice": {"type": "function", "name": "weather"},
                "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}},
                "reasoning": {"effort": "low"},
                "stream": true,
                "store": false
            })
        );
        let plain = translate(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                   "response_format": {"type": "json_object"}}),
            false,
        );
        assert_eq!(
            plain,
            json!({"model": "m", "input": [{"type": "message", "role": "user", "content": "hi"}],
                   "max_output_tokens": 5, "text": {"format": {"type": "json_object"}}, "store": false})
        );
    }

    #[test]
    fn untranslatable_requests_are_refused() {
        let refuse = |v: Value| encode(&req(v), false).unwrap_err();
        let user = json!([{"role": "user", "content": "x"}]);
        assert!(refuse(json!({"model": "m", "n": 2, "messages": user}))
            .message
            .contains("n = 2"));
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "function", "content": "x"}]}))
                .message
                .contains("role")
        );
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}))
                .message
                .contains("tool_call_id")
        );
        assert!(
            refuse(json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]}))
            .message
            .contains("input_audio")
        );
        let e = refuse(
            json!({"model": "m", "messages": user, "tools": [{"type": "custom", "custom": {"name": "x"}}]}),
        );
        assert_eq!(e.param, Some("tools"));
        let e = refuse(json!({"model": "m", "messages": user, "response_format": {"type": "yaml"}}));
        assert_eq!(e.param, Some("response_format"));
        let e = refuse(json!({"model": "m", "messages": user, "tool_choice": "sometimes"}));
        assert_eq!(e.param, Some("tool_choice"));
    }

    #[test]
    fn a_native_request_is_sent_as_it_came() {
        let body = json!({
            "model": "fast", "stream": true, "stream_options": {"include_obfuscation": false},
            "input": [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
                      {"type": "message", "role": "user", "content": "hi"}],
            "include": ["reasoning.encrypted_content"], "store": false, "brand_new_field": {"x": 1}
        });
        let Value::Object(map) = body.clone() else {
            unreachable!()
        };
        let mut chat = req(json!({"model": "gpt-5-codex", "messages": [{"role": "user", "content": "hi"}]}));
        chat.native = Some(Arc::new(NativeRequest {
            wire: NativeWire::Responses,
            body: map,
            headers: Vec::new(),
            native_only: None,
        }));
        let mut expected = body.clone();
        expected["model"] = json!("gpt-5-codex");
        assert_eq!(
            serde_json::from_slice::<Value>(&encode(&chat, true).unwrap()).unwrap(),
            expected
        );
        let sent: Value = serde_json::from_slice(&encode(&chat, false).unwrap()).unwrap();
        assert_eq!(sent["stream"], false);
        assert!(sent.get("stream_options").is_none());
        assert_eq!(sent["brand_new_field"], json!({"x": 1}));
        assert_eq!(sent["input"], body["input"]);
        // A native request of another wire is translated.
        if let Some(native) = chat.native.as_mut() {
            Arc::make_mut(native).wire = NativeWire::Messages;
        }
        let translated: Value = serde_json::from_slice(&encode(&chat, false).unwrap()).unwrap();
        assert_eq!(
            translated["input"],
            json!([{"type": "message", "role": "user", "content": "hi"}])
        );
        assert!(translated.get("include").is_none());
    }
}
