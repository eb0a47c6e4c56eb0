//! The dialects' shapes: whether an answer (a JSON body, an error, or an
//! event stream) is what a Messages or a Responses client expects, with
//! usage where it belongs and events in their order.

use serde_json::Value;

use super::Dialect;

/// Whether an answer of `status` (an event stream when `sse`, to a request
/// that asked for one when `asked`) has the dialect's shape.
pub(in crate::driver) fn check(
    dialect: Dialect,
    status: u16,
    sse: bool,
    asked: bool,
    text: &str,
) -> Result<(), String> {
    if !(200..300).contains(&status) {
        if sse {
            return Err(format!("a {status} as an event stream"));
        }
        return check_error(dialect, text);
    }
    match (sse, asked) {
        (true, true) => check_stream(dialect, text),
        (false, false) => check_json(dialect, text),
        (true, false) => Err("an event stream to a request for JSON".into()),
        (false, true) => Err("JSON to a request for a stream".into()),
    }
}

fn parse(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))
}

fn nonempty_str(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty())
}

/// An Anthropic `message` or a Responses `response` object.
fn check_json(dialect: Dialect, text: &str) -> Result<(), String> {
    let v = parse(text)?;
    match dialect {
        Dialect::Messages => {
            if v["type"] != "message" || v["role"] != "assistant" {
                return Err(format!(
                    "not an assistant message: type {}, role {}",
                    v["type"], v["role"]
                ));
            }
            let texts = v["content"].as_array().map_or(0, |c| {
                c.iter()
                    .filter(|b| b["type"] == "text" && nonempty_str(&b["text"]))
                    .count()
            });
            if texts == 0 {
                return Err("no text block in content".into());
            }
            if !nonempty_str(&v["stop_reason"]) || !nonempty_str(&v["model"]) || !nonempty_str(&v["id"]) {
                return Err("id, model or stop_reason missing".into());
            }
            usage(&v["usage"], "input_tokens", "output_tokens")
        }
        Dialect::Responses => {
            if v["object"] != "response" || v["status"] != "completed" {
                return Err(format!(
                    "not a completed response: object {}, status {}",
                    v["object"], v["status"]
                ));
            }
            let texts = v["output"].as_array().map_or(0, |items| {
                items
                    .iter()
                    .filter(|i| i["type"] == "message")
                    .flat_map(|i| i["content"].as_array().into_iter().flatten())
                    .filter(|c| c["type"] == "output_text" && nonempty_str(&c["text"]))
                    .count()
            });
            if texts == 0 {
                return Err("no output_text in output".into());
            }
            if !nonempty_str(&v["id"]) || !nonempty_str(&v["model"]) {
                return Err("id or model missing".into());
            }
            usage(&v["usage"], "input_tokens", "output_tokens")
        }
    }
}

fn usage(u: &Value, input: &str, output: &str) -> Result<(), String> {
    match (u[input].as_u64(), u[output].as_u64()) {
        (Some(_), Some(o)) if o > 0 => Ok(()),
        _ => Err(format!("usage without {input} / {output}: {u}")),
    }
}

/// Anthropic's `{"type":"error","error":{"type","message"}}` or OpenAI's
/// `{"error":{"message","type"}}`.
fn check_error(dialect: Dialect, text: &str) -> Result<(), String> {
    let v = parse(text)?;
    let e = &v["error"];
    let ok = match dialect {
        Dialect::Messages => v["type"] == "error" && nonempty_str(&e["type"]) && nonempty_str(&e["message"]),
        Dialect::Responses => nonempty_str(&e["message"]) && nonempty_str(&e["type"]),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "not a {} error body: {}",
            dialect.label(),
            truncated(text)
        ))
    }
}

fn truncated(text: &str) -> String {
    text.chars().take(160).collect()
}

/// The events of an SSE body: (event name, data), comments skipped; an
/// event without a name is named by its data's `type`.
fn events(text: &str) -> Result<Vec<(String, Value)>, String> {
    let mut out = Vec::new();
    for block in text.replace("\r\n", "\n").split("\n\n") {
        let mut name = None;
        let mut data = String::new();
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = Some(n.trim().to_owned());
            } else if let Some(d) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        if data.is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(&data).map_err(|e| format!("an event's data is not JSON ({e})"))?;
        let ty = v["type"].as_str().unwrap_or_default().to_owned();
        let name = name.unwrap_or_else(|| ty.clone());
        if name != ty {
            return Err(format!("event {name} carries data of type {ty:?}"));
        }
        out.push((name, v));
    }
    Ok(out)
}

/// The dialect's event order: Messages from `message_start` to
/// `message_stop` with text deltas and a `message_delta` carrying the stop
/// reason; Responses from `response.created` to `response.completed` with
/// text deltas and rising sequence numbers; neither with an error event.
fn check_stream(dialect: Dialect, text: &str) -> Result<(), String> {
    let evs = events(text)?;
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    let count = |n: &str| names.iter().filter(|x| **x == n).count();
    let (first, last, delta, known): (&str, &str, &str, &[&str]) = match dialect {
        Dialect::Messages => (
            "message_start",
            "message_stop",
            "content_block_delta",
            &[
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "ping",
            ],
        ),
        Dialect::Responses => (
            "response.created",
            "response.completed",
            "response.output_text.delta",
            &[
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ],
        ),
    };
    if names.first() != Some(&first) || names.last() != Some(&last) {
        return Err(format!(
            "{} events from {:?} to {:?} (want {first} … {last})",
            names.len(),
            names.first(),
            names.last()
        ));
    }
    if count(first) != 1 || count(last) != 1 {
        return Err(format!("{first} or {last} more than once"));
    }
    if let Some(odd) = names.iter().find(|n| !known.contains(n)) {
        return Err(format!("unexpected event {odd}"));
    }
    if count(delta) == 0 {
        return Err(format!("no {delta}"));
    }
    match dialect {
        Dialect::Messages => {
            let stop = evs
                .iter()
                .filter(|(n, _)| n == "message_delta")
                .filter(|(_, v)| nonempty_str(&v["delta"]["stop_reason"]))
                .count();
            if stop != 1 {
                return Err(format!("{stop} message_delta events with a stop_reason (want 1)"));
            }
        }
        Dialect::Responses => {
            let seq: Vec<u64> = evs
                .iter()
                .filter_map(|(_, v)| v["sequence_number"].as_u64())
                .collect();
            if seq.len() != evs.len() || seq.windows(2).any(|w| w[1] <= w[0]) {
                return Err("sequence numbers missing or not rising".into());
            }
            let done = &evs[evs.len() - 1].1["response"];
            if done["status"] != "completed" {
                return Err(format!("response.completed with status {}", done["status"]));
            }
            usage(&done["usage"], "input_tokens", "output_tokens")?;
        }
    }
    Ok(())
}
