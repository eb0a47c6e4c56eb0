use serde_json::{json, Map, Value};

use super::{parse, render, StreamEncoder};
use crate::provider::{ChatChunk, ChatResponse, MessageContent, NativeWire};

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// The param of the refusal of `body`.
fn param(body: Value) -> String {
    parse(obj(body)).map(|_| ()).unwrap_err().param
}

fn codex_request() -> Value {
    json!({
        "model": "gpt-5-codex",
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Run ls."}], "encrypted_content": "gAAAAB..."},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
            {"type": "function_call_output", "call_id": "call_a", "output": "Cargo.toml\nsrc"},
            {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAAC..."},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two entries; reading both.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_b", "name": "read", "arguments": "{\"path\":\"Cargo.toml\"}"},
            {"type": "function_call", "call_id": "call_c", "name": "read", "arguments": "{\"path\":\"src\"}"},
            {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "[package]"}]},
            {"type": "function_call_output", "call_id": "call_c", "output": "is a directory"},
            {"role": "user", "content": "Thanks."}
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "Runs a command.", "strict": false,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}},
            {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
            {"type": "web_search"},
            {"type": "namespace", "name": "mcp__fs", "tools": []}
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1b2-conversation",
        "text": {"verbosity": "medium"}
    })
}

#[test]
fn a_codex_request_becomes_a_chat_request() {
    let body = codex_request();
    let p = parse(obj(body.clone())).unwrap();
    assert_eq!(p.model, "gpt-5-codex");
    assert!(p.stream);
    assert_eq!(p.native_only, None);
    assert_eq!(
        p.dropped,
        [
            "input.2",
            "input.5",
            "tools.2",
            "tools.3",
            "reasoning.summary",
            "text.verbosity",
            "include",
            "store",
            "prompt_cache_key"
        ]
    );
    let wire = serde_json::to_value(&p.chat).unwrap();
    assert_eq!(
        wire["messages"],
        json!([
            {"role": "system", "content": "You are Codex, a coding agent."},
            {"role": "system", "content": "<permissions>workspace-write</permissions>"},
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "shell", "arguments": "{\"command\":[\"ls\"]}"}}]},
            {"role": "tool", "content": "Cargo.toml\nsrc", "tool_call_id": "call_a"},
            {"role": "assistant", "content": "Two entries; reading both.", "tool_calls": [
                {"id": "call_b", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"Cargo.toml\"}"}},
                {"id": "call_c", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"src\"}"}}]},
            {"role": "tool", "content": "[package]", "tool_call_id": "call_b"},
            {"role": "tool", "content": "is a directory", "tool_call_id": "call_c"},
            {"role": "user", "content": "Thanks."}
        ])
    );
    assert_eq!(
        wire["tools"],
        json!([
            {"type": "function", "function": {"name": "shell", "description": "Runs a command.", "strict": false,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}}},
            {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
        ])
    );
    assert_eq!(wire["tool_choice"], "auto");
    assert_eq!(wire["parallel_tool_calls"], true);
    assert_eq!(wire["reasoning_effort"], "medium");
    assert_eq!(wire["stream"], true);
    assert_eq!(wire["stream_options"], json!({"include_usage": true}));
    for absent in [
        "reasoning",
        "include",
        "store",
        "prompt_cache_key",
        "text",
        "max_tokens",
        "response_format",
    ] {
        assert!(wire.get(absent).is_none(), "{absent} is not on the chat wire");
    }
    let native = p.chat.native.as_deref().unwrap();
    assert_eq!(native.wire, NativeWire::Responses);
    assert_eq!(Value::Object(native.body.clone()), body, "the body as received");
    assert!(native.headers.is_empty());
}

#[test]
fn sampling_formats_and_images() {
    let p = parse(obj(json!({
        "model": "gpt-4.1", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"}
        ]}],
        "max_output_tokens": 1, "temperature": 2, "top_p": 0.5,
        "tool_choice": {"type": "function", "name": "f"},
        "text": {"format": {"type": "json_schema", "name": "answer", "strict": true,
                            "schema": {"type": "object", "properties": {}}}},
        "metadata": {"k": "v"}, "user": "u", "brand_new": 1, "conversation": null
    })))
    .unwrap();
    assert!(!p.stream);
    assert_eq!(p.chat.stream, Some(false));
    assert_eq!(p.chat.stream_options, None);
    assert_eq!(p.chat.max_tokens, Some(1));
    let wire = serde_json::to_value(&p.chat).unwrap();
    assert_eq!(
        wire["messages"][0]["content"],
        json!([{"type": "text", "text": "What is this?"},
               {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}])
    );
    assert_eq!(
        (wire["temperature"].clone(), wire["top_p"].clone()),
        (json!(2), json!(0.5))
    );
    assert_eq!(
        wire["tool_choice"],
        json!({"type": "function", "function": {"name": "f"}})
    );
    assert_eq!(
        wire["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true,
                                                      "schema": {"type": "object", "properties": {}}}})
    );
    assert_eq!(p.dropped, ["metadata", "user", "brand_new"]);
    let json_object = parse(obj(
        json!({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}}),
    ))
    .unwrap();
    assert_eq!(
        json_object.chat.extra["response_format"],
        json!({"type": "json_object"})
    );
}

#[test]
fn native_only_content_is_named_first() {
    let p = parse(obj(json!({"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Read this"},
                                     {"type": "input_file", "file_id": "file-1"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin Patch"}
    ]})))
    .unwrap();
    assert_eq!(p.native_only.as_deref(), Some("input.0.content.1"));
    assert_eq!(p.chat.messages.len(), 1);
    assert_eq!(
        p.chat.messages[0].content,
        Some(MessageContent::Text("Read this".into()))
    );
    let p = parse(obj(
        json!({"model": "m", "input": [{"type": "local_shell_call", "call_id": "c"}]}),
    ))
    .unwrap();
    assert_eq!(p.native_only.as_deref(), Some("input.0"));
}

#[test]
fn bad_requests_name_the_field() {
    let user = json!([{"role": "user", "content": "x"}]);
    assert_eq!(param(json!({"model": "m", "input": 5})), "input");
    assert_eq!(param(json!({"model": "m"})), "input");
    assert_eq!(param(json!({"model": "", "input": "x"})), "model");
    assert_eq!(param(json!({"input": "x"})), "model");
    assert_eq!(
        param(
            json!({"model": "m", "input": [{"role": "user", "content": "ok"}, {"role": "user", "content": 5}]})
        ),
        "input.1.content"
    );
    assert_eq!(
        param(json!({"model": "m", "input": [{"type": "telepathy"}]})),
        "input.0.type"
    );
    assert_eq!(
        param(json!({"model": "m", "input": [{"content": "no role, no type"}]})),
        "input.0.type"
    );
    assert_eq!(
        param(json!({"model": "m", "input": [{"role": "robot", "content": "x"}]})),
        "input.0.role"
    );
    assert_eq!(
        param(json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_video"}]}]})),
        "input.0.content.0.type"
    );
    assert_eq!(
        param(json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})),
        "input.0.call_id"
    );
    assert_eq!(
        param(
            json!({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]})
        ),
        "input.0.arguments"
    );
    assert_eq!(
        param(json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]})),
        "input.0"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "max_output_tokens": 0})),
        "max_output_tokens"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "max_output_tokens": 1.5})),
        "max_output_tokens"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "max_output_tokens": 1_u64 << 40})),
        "max_output_tokens"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "temperature": 3})),
        "temperature"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "top_p": "high"})),
        "top_p"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "tools": [{"type": "function"}]})),
        "tools.0.name"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "tool_choice": "sometimes"})),
        "tool_choice"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "text": {"format": {"type": "json_schema", "name": "n"}}})),
        "text.format.schema"
    );
    assert_eq!(
        param(json!({"model": "m", "input": user, "stream": "yes"})),
        "stream"
    );
    let stateful = parse(obj(
        json!({"model": "m", "input": user, "previous_response_id": "resp_1"}),
    ))
    .unwrap_err();
    assert_eq!(stateful.param, "previous_response_id");
    assert!(stateful.message.contains("stateless") && stateful.message.contains("store: false"));
    assert_eq!(
        param(json!({"model": "m", "input": user, "conversation": "conv_1"})),
        "conversation"
    );
}

fn completion(v: Value) -> ChatResponse {
    serde_json::from_value(v).unwrap()
}

#[test]
fn render_text_with_the_request_echoed() {
    let resp = completion(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o-2024",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    }));
    let request = obj(
        json!({"model": "fast", "input": "hi", "instructions": "Be brief.", "temperature": 0.2,
                             "max_output_tokens": 50, "metadata": {"a": "b"}}),
    );
    assert_eq!(
        render(&resp, "fast", &request),
        json!({
            "id": "resp_chatcmpl-1", "object": "response", "created_at": 1700000000, "status": "completed",
            "incomplete_details": null, "error": null, "model": "fast",
            "output": [{"type": "message", "id": "msg_chatcmpl-1", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]}],
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12},
            "instructions": "Be brief.", "max_output_tokens": 50, "parallel_tool_calls": true,
            "temperature": 0.2, "top_p": 1.0, "tool_choice": "auto", "tools": [], "store": false,
            "text": {"format": {"type": "text"}}, "metadata": {"a": "b"}
        })
    );
}

#[test]
fn render_function_calls_and_reasoning() {
    let resp = completion(json!({
        "id": "c2", "created": 5, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "reasoning_content": "Need both.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": "{\"p\":2}"}}
            ]}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 20, "total_tokens": 50,
                  "completion_tokens_details": {"reasoning_tokens": 7}}
    }));
    let r = render(&resp, "m", &Map::new());
    assert_eq!(r["status"], "completed");
    assert_eq!(
        r["output"],
        json!([
            {"type": "reasoning", "id": "rs_c2", "summary": [{"type": "summary_text", "text": "Need both."}]},
            {"type": "function_call", "id": "fc_c2_0", "call_id": "call_1", "name": "read", "arguments": "{\"p\":1}", "status": "completed"},
            {"type": "function_call", "id": "fc_c2_1", "call_id": "call_2", "name": "read", "arguments": "{\"p\":2}", "status": "completed"}
        ])
    );
    assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 7);
}

#[test]
fn render_length_and_cached_tokens() {
    let resp = completion(json!({
        "id": "c3", "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "Once upon"}}],
        "usage": {"prompt_tokens": 480, "completion_tokens": 16, "total_tokens": 496,
                  "prompt_tokens_details": {"cached_tokens": 300}}
    }));
    let r = render(&resp, "m", &Map::new());
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"], json!({"reason": "max_output_tokens"}));
    assert_eq!(r["output"][0]["content"][0]["text"], "Once upon");
    assert_eq!(
        r["usage"],
        json!({"input_tokens": 480, "input_tokens_details": {"cached_tokens": 300}, "output_tokens": 16,
               "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 496})
    );
    // Anthropic's raw cache classes, counted outside prompt_tokens.
    let raw = completion(json!({
        "id": "c4", "choices": [{"index": 0, "finish_reason": "content_filter", "message": {"role": "assistant", "content": ""}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11,
                  "cache_read_input_tokens": 200, "cache_creation_input_tokens": 50}
    }));
    let r = render(&raw, "m", &Map::new());
    assert_eq!(r["incomplete_details"], json!({"reason": "content_filter"}));
    assert_eq!(r["usage"]["input_tokens"], 260);
    assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 200);
    assert_eq!(r["usage"]["total_tokens"], 261);
}

/// The events of an encoder's output, as (type, data).
fn events(out: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(text.ends_with("\n\n"), "{text}");
    text.split_terminator("\n\n")
        .map(|e| {
            let (head, data) = e.split_once('\n').unwrap();
            let name = head.strip_prefix("event: ").unwrap().to_owned();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], name.as_str());
            (name, data)
        })
        .collect()
}

/// The event types, checking the sequence numbers count from 0 by 1.
fn types(ev: &[(String, Value)]) -> Vec<&str> {
    for (i, (_, d)) in ev.iter().enumerate() {
        assert_eq!(d["sequence_number"], json!(i), "{d}");
    }
    ev.iter().map(|(t, _)| t.as_str()).collect()
}

fn chunk(delta: Value, finish: Option<&str>) -> ChatChunk {
    serde_json::from_value(
        json!({"id": "c9", "object": "chat.completion.chunk", "created": 9, "model": "m",
                                  "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    )
    .unwrap()
}

fn usage_chunk() -> ChatChunk {
    serde_json::from_value(
        json!({"id": "c9", "object": "chat.completion.chunk", "created": 9, "model": "m",
        "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}),
    )
    .unwrap()
}

#[test]
fn a_text_stream() {
    let mut enc = StreamEncoder::new("fast", &obj(json!({"model": "fast", "input": "hi"})));
    let mut out = Vec::new();
    enc.chunk(
        &chunk(json!({"role": "assistant", "content": ""}), None),
        &mut out,
    );
    enc.chunk(&chunk(json!({"content": "Hel"}), None), &mut out);
    enc.chunk(&chunk(json!({"content": "lo."}), None), &mut out);
    enc.chunk(&chunk(json!({}), Some("stop")), &mut out);
    enc.chunk(&usage_chunk(), &mut out);
    enc.finish(&mut out);
    let before = out.len();
    enc.finish(&mut out);
    enc.fail("server_error", "late", &mut out);
    assert_eq!(out.len(), before, "nothing after the final event");
    let ev = events(&out);
    assert_eq!(
        types(&ev),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(ev[0].1["response"]["status"], "in_progress");
    assert_eq!(ev[0].1["response"]["output"], json!([]));
    assert_eq!(
        ev[2].1["item"],
        json!({"type": "message", "id": "msg_c9", "status": "in_progress",
                                       "role": "assistant", "content": []})
    );
    assert_eq!(ev[4].1["delta"], "Hel");
    assert_eq!(
        (ev[4].1["item_id"].clone(), ev[4].1["output_index"].clone()),
        (json!("msg_c9"), json!(0))
    );
    assert_eq!(ev[6].1["text"], "Hello.");
    let done = &ev[9].1["response"];
    assert_eq!(done["id"], "resp_c9");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["created_at"], 9);
    assert_eq!(done["output"], json!([ev[8].1["item"]]));
    assert_eq!(done["output"][0]["content"][0]["text"], "Hello.");
    assert_eq!(done["usage"]["total_tokens"], 8);
}

#[test]
fn text_then_two_function_calls() {
    let mut enc = StreamEncoder::new("m", &Map::new());
    let mut out = Vec::new();
    let call = |index: u64, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut c = json!({"index": index, "function": {"arguments": args}});
        if let Some(id) = id {
            c["id"] = json!(id);
            c["type"] = json!("function");
        }
        if let Some(name) = name {
            c["function"]["name"] = json!(name);
        }
        chunk(json!({"tool_calls": [c]}), None)
    };
    enc.chunk(
        &chunk(json!({"role": "assistant", "content": "Reading."}), None),
        &mut out,
    );
    enc.chunk(&call(0, Some("call_1"), Some("read"), ""), &mut out);
    enc.chunk(&call(0, None, None, "{\"p\":"), &mut out);
    enc.chunk(&call(0, None, None, "1}"), &mut out);
    enc.chunk(&call(1, Some("call_2"), Some("list"), "{}"), &mut out);
    enc.chunk(&chunk(json!({}), Some("tool_calls")), &mut out);
    enc.chunk(&usage_chunk(), &mut out);
    enc.finish(&mut out);
    let ev = events(&out);
    assert_eq!(
        types(&ev),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(
        ev[8].1["item"],
        json!({"type": "function_call", "id": "fc_c9_0", "call_id": "call_1", "name": "read",
               "arguments": "", "status": "in_progress"})
    );
    assert_eq!(ev[8].1["output_index"], 1);
    assert_eq!(ev[11].1["arguments"], "{\"p\":1}");
    assert_eq!(ev[13].1["output_index"], 2);
    let out = &ev[17].1["response"]["output"];
    assert_eq!(out.as_array().map(Vec::len), Some(3));
    assert_eq!(
        out[2],
        json!({"type": "function_call", "id": "fc_c9_1", "call_id": "call_2", "name": "list",
               "arguments": "{}", "status": "completed"})
    );
}

#[test]
fn reasoning_then_length() {
    let mut enc = StreamEncoder::new("m", &Map::new());
    let mut out = Vec::new();
    enc.chunk(&chunk(json!({"reasoning_content": "Think"}), None), &mut out);
    enc.chunk(&chunk(json!({"reasoning_content": "ing."}), None), &mut out);
    enc.chunk(&chunk(json!({"content": "Once"}), Some("length")), &mut out);
    enc.finish(&mut out);
    let ev = events(&out);
    assert_eq!(
        types(&ev),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete"
        ]
    );
    assert_eq!(ev[6].1["text"], "Thinking.");
    let r = &ev[15].1["response"];
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"], json!({"reason": "max_output_tokens"}));
    assert_eq!(r["output"][0]["summary"][0]["text"], "Thinking.");
    assert_eq!(r["usage"], Value::Null);
}

#[test]
fn an_error_after_the_start_fails_the_response() {
    let mut enc = StreamEncoder::new("m", &Map::new());
    let mut out = Vec::new();
    enc.chunk(&chunk(json!({"content": "Par"}), None), &mut out);
    enc.fail("server_error", "the provider went away", &mut out);
    enc.chunk(&chunk(json!({"content": "tial"}), None), &mut out);
    enc.finish(&mut out);
    let ev = events(&out);
    assert_eq!(
        types(&ev),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.failed"
        ]
    );
    let r = &ev[5].1["response"];
    assert_eq!(r["status"], "failed");
    assert_eq!(
        r["error"],
        json!({"code": "server_error", "message": "the provider went away"})
    );

    // Failing before anything was written still starts the response.
    let mut enc = StreamEncoder::new("m", &Map::new());
    let mut out = Vec::new();
    enc.fail("rate_limit_exceeded", "slow down", &mut out);
    let ev = events(&out);
    assert_eq!(
        types(&ev),
        ["response.created", "response.in_progress", "response.failed"]
    );
    assert_eq!(ev[0].1["response"]["id"], ev[2].1["response"]["id"]);
    assert!(ev[0].1["response"]["id"].as_str().unwrap().starts_with("resp_"));
}

#[test]
fn a_recorded_codex_request_parses() {
    let body: Value = serde_json::from_str(include_str!(
        "../../../tests/fixtures/agents/codex_responses.json"
    ))
    .unwrap();
    let p = parse(obj(body)).unwrap();
    assert_eq!(p.model, "gpt-5-codex");
    assert!(p.stream);
    assert_eq!(p.native_only, None);
    assert_eq!(
        p.dropped,
        [
            "tools.4",
            "tools.8",
            "reasoning.summary",
            "include",
            "store",
            "prompt_cache_key",
            "client_metadata"
        ]
    );
    let roles: Vec<&str> = p.chat.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "system", "user", "user"]);
    let tools = p.chat.extra["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 7, "the function tools");
    assert!(tools
        .iter()
        .all(|t| t["type"] == "function" && t["function"]["name"].is_string()));
    assert!(p.chat.extra.get("reasoning_effort").is_none());
}
