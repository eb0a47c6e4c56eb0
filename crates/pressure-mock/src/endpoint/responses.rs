//! `POST /v1/responses` in OpenAI's wire format (the Responses API), with
//! the same phases, quota, faults, billing and recording as the other
//! endpoints (`decide.rs`).
//!
//! The request is read as leniently as OpenAI reads it: `model`, `input`
//! (a string, which is one user message, or an array of items: messages
//! — with or without `"type": "message"` — of role `user`, `assistant`,
//! `system` or `developer` whose content is a string or `input_text` /
//! `output_text` parts (images and files carry no text), `function_call`
//! and `function_call_output` items; `reasoning` items are skipped),
//! `instructions`, flat function `tools`, `tool_choice`,
//! `max_output_tokens`, `stream`, `prompt_cache_key`; other fields are
//! ignored. Malformed JSON, no `model`, no `input`, an `input` that is
//! neither a string nor an array, an item of unknown type or role → 400 in
//! OpenAI's error shape.
//!
//! Its input tokens are counted as the chat endpoint counts a prompt
//! (OpenAI's chat framing): `instructions` as a `system` turn, each message
//! as a turn of its role, a `function_call` as an `assistant` turn of its
//! arguments, a `function_call_output` as a `tool` turn of its output; tool
//! definitions are not counted (as in chat). Prompt caching is OpenAI's
//! automatic caching, as in chat (`cache.rs`): `input_tokens_details.cached_tokens`.
//!
//! The answer: when function tools are offered, `tool_choice` is not
//! `none` and the last input item is a user message, one `function_call`
//! of the tool `tool_choice` names (else the first) with arguments made up
//! from its JSON schema (a value per property, by type); otherwise — after
//! a `function_call_output`, say — the responder's text cut to the budget
//! as in chat, an `incomplete` response (`max_output_tokens`) when the
//! request's own cap cut it. Streamed, the events are OpenAI's, each with
//! an `event:` line and a `sequence_number` from 0: `response.created`,
//! `response.in_progress`, `response.output_item.added`, then for a message
//! `response.content_part.added`, `response.output_text.delta`s,
//! `response.output_text.done`, `response.content_part.done`, or for a
//! function call `response.function_call_arguments.delta`s and
//! `response.function_call_arguments.done`; then
//! `response.output_item.done` and `response.completed` (or
//! `response.incomplete`) with the whole response and its usage. A stream
//! failing midway ends with `response.failed`.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{content_events, Call, Due, Endpoint, Event, Output, Reply, Route};
use crate::cache::automatic_probe;
use crate::dialect::{unix_ms, Dialect};
use crate::record::BAD_REQUEST_MARKER;
use crate::responder::Turn;
use crate::tokens::{count_prompt, Counted};
use crate::wire::json_bytes;
use crate::wire::openai::STREAM_ERROR_MESSAGE;

/// At most this many argument deltas in a streamed function call.
const MAX_ARGUMENT_CHUNKS: usize = 4;

/// The Responses endpoint.
#[derive(Debug)]
pub(crate) struct Responses;

/// One input item, as the mock reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Message { role: String, text: String },
    FunctionCall { name: String, arguments: String },
    FunctionCallOutput { output: String },
}

/// The function call the answer makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolCall {
    name: String,
    arguments: String,
}

/// What the mock reads of a Responses request.
#[derive(Debug)]
pub(crate) struct Checked {
    model: String,
    stream: bool,
    instructions: Option<String>,
    items: Vec<Item>,
    /// `tools` as sent (echoed in the answer).
    tools: Vec<Value>,
    /// `tool_choice` as sent, `"auto"` when absent.
    tool_choice: Value,
    max_output_tokens: Option<u64>,
    prompt_cache_key: Option<String>,
    /// The function call to answer with, if any.
    call: Option<ToolCall>,
}

impl Checked {
    /// The conversation as turns: instructions, then the items.
    fn turns(&self) -> Vec<Turn> {
        let instructions = self.instructions.as_ref().map(|i| Turn::new("system", i.clone()));
        instructions
            .into_iter()
            .chain(self.items.iter().map(|item| match item {
                Item::Message { role, text } => Turn::new(role.clone(), text.clone()),
                Item::FunctionCall { arguments, .. } => Turn::new("assistant", arguments.clone()),
                Item::FunctionCallOutput { output } => Turn::new("tool", output.clone()),
            }))
            .collect()
    }
}

/// JSON's name for the type of `v`, for error messages.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A field that must be a string when present (and not null).
fn opt_str(obj: &Map<String, Value>, field: &str, path: &str) -> Result<Option<String>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(format!(
            "Invalid type for '{path}{field}': expected a string, but got {} instead.",
            kind_of(v)
        )),
    }
}

/// The text of a message's `content`: a string, or the text of its
/// `input_text` / `output_text` (and `text`, `refusal`) parts joined with
/// newlines; other parts (images, files, audio) carry none.
fn content_text(content: &Value, path: &str) -> Result<String, String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => Ok(parts
            .iter()
            .filter(|p| {
                matches!(
                    p.get("type").and_then(Value::as_str),
                    Some("input_text" | "output_text" | "text")
                )
            })
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")),
        v => Err(format!(
            "Invalid type for '{path}.content': expected a string or an array of content parts, but got {} instead.",
            kind_of(v)
        )),
    }
}

/// One input item at `input[i]`; `None` for items that carry nothing to
/// read (`reasoning`).
fn read_item(i: usize, v: &Value) -> Result<Option<Item>, String> {
    let path = format!("input[{i}]");
    let Value::Object(obj) = v else {
        return Err(format!(
            "Invalid type for '{path}': expected an input item object, but got {} instead.",
            kind_of(v)
        ));
    };
    let kind = match (obj.get("type").and_then(Value::as_str), obj.contains_key("role")) {
        (Some(t), _) => t,
        (None, true) => "message",
        (None, false) => return Err(format!("Missing required parameter: '{path}.type'.")),
    };
    match kind {
        "message" => {
            let role = opt_str(obj, "role", &format!("{path}."))?
                .ok_or_else(|| format!("Missing required parameter: '{path}.role'."))?;
            if !matches!(role.as_str(), "user" | "assistant" | "system" | "developer") {
                return Err(format!(
                    "Invalid value: '{role}'. Supported values are: 'user', 'assistant', 'system', and 'developer'. (at '{path}.role')"
                ));
            }
            let content = obj
                .get("content")
                .ok_or_else(|| format!("Missing required parameter: '{path}.content'."))?;
            let text = content_text(content, &path)?;
            Ok(Some(Item::Message { role, text }))
        }
        "function_call" => Ok(Some(Item::FunctionCall {
            name: opt_str(obj, "name", &format!("{path}."))?.unwrap_or_default(),
            arguments: opt_str(obj, "arguments", &format!("{path}."))?.unwrap_or_default(),
        })),
        "function_call_output" => {
            let output = match obj.get("output") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(parts @ Value::Array(_)) => content_text(parts, &path)?,
                Some(v) => v.to_string(),
            };
            Ok(Some(Item::FunctionCallOutput { output }))
        }
        "reasoning" | "item_reference" => Ok(None),
        other => Err(format!(
            "Invalid value: '{other}'. Supported values are: 'message', 'function_call', 'function_call_output' and 'reasoning'. (at '{path}.type')"
        )),
    }
}

/// A made-up value of a JSON schema: by its `type`, objects filled property
/// by property.
fn sample(schema: &Value, depth: usize) -> Value {
    let kind = schema.get("type").and_then(|t| match t {
        Value::String(s) => Some(s.as_str()),
        Value::Array(a) => a.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    });
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match kind {
        Some("string") => json!("mock"),
        Some("integer" | "number") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("object") | None if depth < 4 => {
            let props = schema.get("properties").and_then(Value::as_object);
            let filled: Map<String, Value> = props
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), sample(v, depth + 1)))
                .collect();
            Value::Object(filled)
        }
        _ => Value::Null,
    }
}

/// The function call to make, if any; see the module docs.
fn decide_call(tools: &[Value], tool_choice: &Value, items: &[Item]) -> Option<ToolCall> {
    let last_is_user = matches!(items.last(), Some(Item::Message { role, .. }) if role == "user");
    if !last_is_user || tool_choice.as_str() == Some("none") {
        return None;
    }
    let functions: Vec<&Value> = tools
        .iter()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
        .filter(|t| t.get("name").and_then(Value::as_str).is_some())
        .collect();
    let named = tool_choice.get("name").and_then(Value::as_str);
    let tool = match named {
        Some(n) => functions
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(n))?,
        None => functions.first()?,
    };
    let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
    let params = tool.get("parameters").cloned().unwrap_or(json!({}));
    let arguments = match sample(&params, 0) {
        Value::Object(m) => Value::Object(m),
        _ => json!({}),
    };
    Some(ToolCall {
        name: name.to_owned(),
        arguments: arguments.to_string(),
    })
}

/// The request, or the message of a 400 (worded like OpenAI's).
fn parse(body: &[u8]) -> Result<Checked, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("We could not parse the JSON body of your request: {e}"))?;
    let Value::Object(obj) = v else {
        return Err(format!(
            "Invalid type for the request body: expected an object, but got {} instead.",
            kind_of(&v)
        ));
    };
    let model = opt_str(&obj, "model", "")?
        .filter(|m| !m.is_empty())
        .ok_or("you must provide a model parameter")?;
    let items = match obj.get("input") {
        None | Some(Value::Null) => return Err("Missing required parameter: 'input'.".into()),
        Some(Value::String(s)) => vec![Item::Message {
            role: "user".into(),
            text: s.clone(),
        }],
        Some(Value::Array(items)) => {
            let mut read = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                read.extend(read_item(i, item)?);
            }
            read
        }
        Some(v) => {
            return Err(format!(
                "Invalid type for 'input': expected a string or an array of input items, but got {} instead.",
                kind_of(v)
            ))
        }
    };
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => t.clone(),
        Some(v) => {
            return Err(format!(
                "Invalid type for 'tools': expected an array, but got {} instead.",
                kind_of(v)
            ))
        }
    };
    let max_output_tokens = match obj.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
            format!("Invalid 'max_output_tokens': expected an integer of at least 1, but got {v}.")
        })?),
    };
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(format!(
                "Invalid type for 'stream': expected a boolean, but got {} instead.",
                kind_of(v)
            ))
        }
    };
    let tool_choice = obj
        .get("tool_choice")
        .filter(|v| !v.is_null())
        .cloned()
        .unwrap_or(json!("auto"));
    let call = decide_call(&tools, &tool_choice, &items);
    Ok(Checked {
        model,
        stream,
        instructions: opt_str(&obj, "instructions", "")?,
        items,
        tools,
        tool_choice,
        max_output_tokens,
        prompt_cache_key: opt_str(&obj, "prompt_cache_key", "")?,
        call,
    })
}

/// Splits `text` into at most `n` pieces of similar length, on char boundaries.
fn split_chars(text: &str, n: usize) -> Vec<&str> {
    let chars = text.chars().count();
    if chars == 0 {
        return Vec::new();
    }
    let per = chars.div_ceil(n.max(1));
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let cut = rest.char_indices().nth(per).map_or(rest.len(), |(i, _)| i);
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    out
}

/// The ids of one answer's objects.
struct Ids {
    response: String,
    item: String,
    call: String,
}

impl Ids {
    fn of(seq: usize, function: bool) -> Self {
        Self {
            response: format!("resp_mock_{seq}"),
            item: if function {
                format!("fc_mock_{seq}")
            } else {
                format!("msg_mock_{seq}")
            },
            call: format!("call_mock_{seq}"),
        }
    }
}

/// The `response` object: `status`, its `output` items and, once known,
/// its usage and error.
fn response(
    call: &Call<Checked>,
    out: &Output,
    ids: &Ids,
    status: &str,
    output: Vec<Value>,
    done: bool,
) -> Value {
    let req = &call.request;
    let usage = done.then(|| {
        json!({
            "input_tokens": out.input,
            "input_tokens_details": {"cached_tokens": out.cache.read},
            "output_tokens": out.tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": out.input.saturating_add(out.tokens),
        })
    });
    let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
    json!({
        "id": ids.response,
        "object": "response",
        "created_at": unix_ms() / 1_000,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": call.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "prompt_cache_key": req.prompt_cache_key,
        "tool_choice": req.tool_choice,
        "tools": req.tools,
        "usage": usage,
    })
}

/// One SSE event of type `kind` numbered `seq`, its other fields in `fields`.
fn event(kind: &str, seq: usize, fields: Value) -> Bytes {
    let mut data = Map::new();
    data.insert("type".into(), json!(kind));
    data.insert("sequence_number".into(), json!(seq));
    if let Value::Object(f) = fields {
        data.extend(f);
    }
    let json = json_bytes(&Value::Object(data));
    let mut bytes = format!("event: {kind}\ndata: ").into_bytes();
    bytes.extend_from_slice(&json);
    bytes.extend_from_slice(b"\n\n");
    Bytes::from(bytes)
}

/// One event of a streamed answer before it is numbered: when it is due,
/// its type, its fields, and whether sending it bills the output.
type Step = (Due, &'static str, Value, bool);

/// The answer's one output item in `item_status`: the function call of
/// `tool` with `text` as its arguments, or an assistant message of `text`
/// (no content yet while `in_progress`).
fn output_item(tool: Option<&ToolCall>, ids: &Ids, item_status: &str, text: &str) -> Value {
    match tool {
        Some(t) => json!({
            "type": "function_call",
            "id": ids.item,
            "call_id": ids.call,
            "name": t.name,
            "arguments": text,
            "status": item_status,
        }),
        None => {
            let content = if item_status == "in_progress" {
                json!([])
            } else {
                json!([{"type": "output_text", "text": text, "annotations": []}])
            };
            json!({
                "type": "message",
                "id": ids.item,
                "status": item_status,
                "role": "assistant",
                "content": content,
            })
        }
    }
}

/// A function call's streamed arguments: `arguments` in at most
/// [`MAX_ARGUMENT_CHUNKS`] deltas spread over the content time, then the
/// whole arguments at the end.
fn argument_steps(tool: &ToolCall, ids: &Ids, arguments: &str) -> Vec<Step> {
    let parts = split_chars(arguments, MAX_ARGUMENT_CHUNKS);
    let of = parts.len();
    let mut steps: Vec<Step> = parts
        .into_iter()
        .enumerate()
        .map(|(index, part)| {
            (
                Due::Content { index, of },
                "response.function_call_arguments.delta",
                json!({"item_id": ids.item, "output_index": 0, "delta": part}),
                false,
            )
        })
        .collect();
    steps.push((
        Due::End,
        "response.function_call_arguments.done",
        json!({"item_id": ids.item, "output_index": 0, "name": tool.name, "arguments": arguments}),
        false,
    ));
    steps
}

/// A message's streamed text: its content part opened, `text` in deltas
/// as the content events pace them, then the whole text and the part
/// closed at the end.
fn text_steps(ids: &Ids, text: &str) -> Vec<Step> {
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
    let place = json!({"item_id": ids.item, "output_index": 0, "content_index": 0});
    let with = |extra: Value| {
        let mut v = place.clone();
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    };
    let mut steps: Vec<Step> = vec![(
        Due::Start,
        "response.content_part.added",
        with(json!({"part": part("")})),
        false,
    )];
    for d in content_events(text, |p| Bytes::from(p.to_owned())) {
        let delta = String::from_utf8_lossy(&d.bytes).into_owned();
        steps.push((
            d.at,
            "response.output_text.delta",
            with(json!({"delta": delta})),
            false,
        ));
    }
    steps.push((
        Due::End,
        "response.output_text.done",
        with(json!({"text": text})),
        false,
    ));
    steps.push((
        Due::End,
        "response.content_part.done",
        with(json!({"part": part(text)})),
        false,
    ));
    steps
}

impl Endpoint for Responses {
    const ROUTE: Route = Route::new("/v1/responses", Dialect::OpenAi);
    type Request = Checked;

    fn read(body: &[u8]) -> Result<Call<Checked>, String> {
        let req = parse(body)?;
        let turns = req.turns();
        let counted: Vec<Counted<'_>> = turns
            .iter()
            .map(|t| Counted {
                role: &t.role,
                text: &t.text,
                name: None,
            })
            .collect();
        let input = count_prompt(&req.model, &counted);
        let cache = automatic_probe(&req.model, &counted, input, req.prompt_cache_key.as_deref());
        Ok(Call {
            model: req.model.clone(),
            stream: req.stream,
            marked: turns.iter().any(|t| t.text.contains(BAD_REQUEST_MARKER)),
            input,
            max_output: req.max_output_tokens,
            fixed_output: req.call.as_ref().map(|c| c.arguments.clone()),
            turns: Some(turns),
            cache,
            request: req,
        })
    }

    fn answer(call: &Call<Checked>, out: &Output) -> Reply {
        let tool = call.request.call.as_ref();
        let ids = Ids::of(out.seq, tool.is_some());
        let status = if out.capped { "incomplete" } else { "completed" };
        let done_item = output_item(tool, &ids, status, &out.text);
        let json = json_bytes(&response(call, out, &ids, status, vec![done_item.clone()], true));
        if !call.stream {
            return Reply {
                json,
                events: Vec::new(),
            };
        }
        let started = response(call, out, &ids, "in_progress", Vec::new(), false);
        let mut plan: Vec<Step> = vec![
            (
                Due::Start,
                "response.created",
                json!({ "response": started }),
                false,
            ),
            (
                Due::Start,
                "response.in_progress",
                json!({ "response": started }),
                false,
            ),
            (
                Due::Start,
                "response.output_item.added",
                json!({"output_index": 0, "item": output_item(tool, &ids, "in_progress", "")}),
                false,
            ),
        ];
        match tool {
            Some(t) => plan.extend(argument_steps(t, &ids, &out.text)),
            None => plan.extend(text_steps(&ids, &out.text)),
        }
        plan.push((
            Due::End,
            "response.output_item.done",
            json!({"output_index": 0, "item": done_item}),
            false,
        ));
        let last = response(call, out, &ids, status, vec![done_item], true);
        let kind = if out.capped {
            "response.incomplete"
        } else {
            "response.completed"
        };
        plan.push((Due::End, kind, json!({ "response": last }), true));
        let events = plan
            .into_iter()
            .enumerate()
            .map(|(seq, (at, kind, fields, bill))| Event {
                at,
                bytes: event(kind, seq, fields),
                bill,
            })
            .collect();
        Reply { json, events }
    }

    fn stream_error(call: &Call<Checked>, out: &Output, sent: usize) -> Bytes {
        let ids = Ids::of(out.seq, call.request.call.is_some());
        let mut failed = response(call, out, &ids, "failed", Vec::new(), false);
        failed["error"] = json!({"code": "server_error", "message": STREAM_ERROR_MESSAGE});
        event("response.failed", sent, json!({ "response": failed }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_a_string_or_items_read_leniently() {
        let r = parse(br#"{"model":"m","input":"hi"}"#).unwrap();
        assert_eq!(
            r.items,
            [Item::Message {
                role: "user".into(),
                text: "hi".into()
            }]
        );
        let r = parse(
            br#"{"model":"m","instructions":"be brief","input":[
                {"role":"developer","content":"dev"},
                {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"x"},{"type":"input_text","text":"b"}]},
                {"type":"reasoning","id":"rs_1","summary":[]},
                {"type":"function_call","call_id":"c","name":"f","arguments":"{\"x\":1}"},
                {"type":"function_call_output","call_id":"c","output":"42"}],
              "temperature":0.1,"store":false}"#,
        )
        .unwrap();
        let turns: Vec<(String, String)> = r.turns().into_iter().map(|t| (t.role, t.text)).collect();
        let want = [
            ("system", "be brief"),
            ("developer", "dev"),
            ("user", "a\nb"),
            ("assistant", r#"{"x":1}"#),
            ("tool", "42"),
        ];
        assert_eq!(turns, want.map(|(a, b)| (a.to_owned(), b.to_owned())));
        assert!(r.call.is_none(), "after a function_call_output: text");
        for (body, needle) in [
            (&b"{"[..], "parse the JSON"),
            (br#"{"input":"x"}"#, "model"),
            (br#"{"model":"m","input":5}"#, "'input'"),
            (br#"{"model":"m"}"#, "'input'"),
            (
                br#"{"model":"m","input":[{"role":"robot","content":"x"}]}"#,
                "robot",
            ),
            (br#"{"model":"m","input":[{"type":"bogus"}]}"#, "bogus"),
            (
                br#"{"model":"m","input":"x","max_output_tokens":-1}"#,
                "max_output_tokens",
            ),
        ] {
            let e = parse(body).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }

    #[test]
    fn a_user_turn_with_function_tools_gets_a_call_with_schema_arguments() {
        let tools = r#""tools":[{"type":"web_search"},{"type":"function","name":"weather","description":"d",
            "parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"unit":{"enum":["c","f"]}}}}]"#;
        let r = parse(format!(r#"{{"model":"m","input":"Paris?",{tools}}}"#).as_bytes()).unwrap();
        let call = r.call.unwrap();
        assert_eq!(call.name, "weather");
        let args: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(args, json!({"city": "mock", "days": 1, "unit": "c"}));
        let none =
            parse(format!(r#"{{"model":"m","input":"Paris?","tool_choice":"none",{tools}}}"#).as_bytes())
                .unwrap();
        assert!(none.call.is_none());
        assert_eq!(split_chars("abcdefghij", 4), ["abc", "def", "ghi", "j"]);
    }
}
