//! [`parse`]: a Messages request body, checked and translated to chat (the
//! table is in the module docs of [`super`]).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::fields::{as_arr, as_obj, err, given, req_obj, req_str, unit_number};
use super::translation::{Build, Walk};
use super::turns::messages;
use crate::ingress::{IngressError, Parsed};
use crate::provider::{ChatRequest, Message, NativeRequest, NativeWire, StreamOptions};

/// The fields of a custom tool that the translation reads.
const TOOL_FIELDS: &[&str] = &[
    "type",
    "name",
    "description",
    "input_schema",
    "strict",
    "cache_control",
];

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
    let model = model(&body)?;
    let max_tokens = max_tokens(&body)?;
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
            // Read once the tools are known, whichever comes first.
            "tool_choice" => tool_choice = Some(v),
            _ => field(key, v, &mut walk, &mut build)?,
        }
    }
    if !has_messages {
        return Err(err("messages", "Field required"));
    }
    if let Some(choice) = tool_choice {
        apply_tool_choice(choice, &mut walk, &mut build)?;
    }
    Ok(finish(model, max_tokens, body, headers, walk, build))
}

/// `model`: a non-empty string.
fn model(body: &Map<String, Value>) -> Result<String, IngressError> {
    match body.get("model") {
        None | Some(Value::Null) => Err(err("model", "Field required")),
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(err("model", "String should have at least 1 character")),
        Some(_) => Err(err("model", "Input should be a valid string")),
    }
}

/// `max_tokens`: an integer from 1 to `u32::MAX`.
fn max_tokens(body: &Map<String, Value>) -> Result<u32, IngressError> {
    match body.get("max_tokens") {
        None | Some(Value::Null) => Err(err("max_tokens", "Field required")),
        Some(v) => match (v.as_u64(), v.as_i64()) {
            (Some(0), _) | (None, Some(_)) => {
                Err(err("max_tokens", "Input should be greater than or equal to 1"))
            }
            (Some(n), _) => u32::try_from(n)
                .map_err(|_| err("max_tokens", format!("Input should be at most {}", u32::MAX))),
            (None, None) => Err(err("max_tokens", "Input should be a valid integer")),
        },
    }
}

/// One field of the body besides `model`, `max_tokens`, `messages` and
/// `tool_choice` (not `null`): checked, then translated into `build`,
/// named as dropped, or recorded as native only; an unknown field is named
/// as dropped.
fn field(key: &str, v: &Value, walk: &mut Walk, build: &mut Build) -> Result<(), IngressError> {
    match key {
        "system" => build.system = system(v, walk)?,
        "stop_sequences" => stop_sequences(v, build)?,
        "temperature" | "top_p" => {
            unit_number(v, key)?;
            build.extra.insert(key.to_owned(), v.clone());
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
        "tools" => tools(v, walk, build)?,
        "metadata" => metadata(v, walk)?,
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
        _ => walk.name(key),
    }
    Ok(())
}

/// `stop_sequences`: strings, as chat's `stop` (left out when empty).
fn stop_sequences(v: &Value, build: &mut Build) -> Result<(), IngressError> {
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
    Ok(())
}

/// `metadata`: an object whose `user_id`, if given, is a string; named as
/// dropped unless empty.
fn metadata(v: &Value, walk: &mut Walk) -> Result<(), IngressError> {
    let m = as_obj(v, "metadata")?;
    if let Some(u) = given(m.get("user_id")) {
        if !u.is_string() {
            return Err(err("metadata.user_id", "Input should be a valid string"));
        }
    }
    if !m.is_empty() {
        walk.name("metadata");
    }
    Ok(())
}

/// The chat request of a checked body: the system text first (when not
/// empty), the turns, `max_tokens`, `stream` (with the final usage asked
/// for), the translated fields, and the body itself with `headers` as the
/// native request.
fn finish(
    model: String,
    max_tokens: u32,
    body: Map<String, Value>,
    headers: Vec<(String, String)>,
    walk: Walk,
    build: Build,
) -> Parsed {
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
    Parsed {
        chat,
        model,
        stream: build.stream,
        dropped: walk.dropped,
        native_only: walk.native_only,
    }
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
