//! A built-in upstream for trying the gateway on a machine with nothing
//! else running (`pressure gateway --demo-upstream`): it answers every path
//! with a small JSON echo, `/slow` streams five chunks over a second,
//! `/events` is a short `text/event-stream`, and `POST /v1/chat/completions`
//! answers like an OpenAI-compatible provider (a canned reply with usage), so
//! the gateway's LLM endpoint can be tried too; `POST /v1/embeddings`
//! answers small deterministic vectors (`embed`).
//!
//! It lives beside the mock provider rather than in the gateway: it is a
//! stand-in for what the gateway sits in front of, and the CLI and the
//! gateway's tests serve it without the gateway carrying a demo.

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::CONTENT_TYPE;
use axum::http::Method;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use std::time::Duration;
use tokio::net::TcpListener;

/// The demo upstream's router.
pub fn router() -> Router {
    Router::new().fallback(handle)
}

async fn handle(req: Request) -> Response {
    let path = req.uri().path().to_owned();
    match path.as_str() {
        "/v1/chat/completions" if req.method() == Method::POST => chat(req).await,
        "/v1/embeddings" if req.method() == Method::POST => embed(req).await,
        "/slow" => stream("application/octet-stream", |i| format!("chunk {i}\n")),
        "/events" => stream("text/event-stream", |i| format!("data: event {i}\n\n")),
        _ => {
            let body = serde_json::json!({
                "upstream": "demo",
                "method": req.method().as_str(),
                "path": path,
                "forwardedFor": req.headers().get("x-forwarded-for").and_then(|v| v.to_str().ok()),
            });
            json_response(&body)
        }
    }
}

/// The request's JSON body (up to 1 MiB); `null` when it is not JSON.
async fn read_json(req: Request) -> serde_json::Value {
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    serde_json::from_slice(&body).unwrap_or_default()
}

/// `body` as an `application/json` response.
fn json_response(body: &serde_json::Value) -> Response {
    Response::builder()
        .header(CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

/// A canned OpenAI-style completion that echoes the model and the length of
/// the last message.
async fn chat(req: Request) -> Response {
    let parsed = read_json(req).await;
    let model = parsed["model"].as_str().unwrap_or("demo").to_owned();
    let last = parsed["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let prompt_tokens = u64::try_from(last.len() / 4 + 8).unwrap_or(u64::MAX);
    let answer = format!(
        "Demo answer from {model}: you said {} characters.",
        last.chars().count()
    );
    if parsed["stream"].as_bool() == Some(true) {
        return chat_stream(model, answer, prompt_tokens);
    }
    let out = serde_json::json!({
        "id": "chatcmpl-demo",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{ "index": 0, "finish_reason": "stop",
                      "message": { "role": "assistant", "content": answer } }],
        "usage": { "prompt_tokens": prompt_tokens, "completion_tokens": 12,
                   "total_tokens": prompt_tokens + 12 }
    });
    json_response(&out)
}

/// Vector length of the demo's embeddings when the request gives no `dimensions`.
const DEMO_DIMENSIONS: u64 = 8;

/// OpenAI-style embeddings: one unit vector per input (a string or an
/// array of strings; token ids are embedded by their text form), derived
/// from an FNV-1a hash of the input, `dimensions` long (8 by default), and
/// `usage` of about a token per four characters. Always floats.
async fn embed(req: Request) -> Response {
    let parsed = read_json(req).await;
    let model = parsed["model"].as_str().unwrap_or("demo").to_owned();
    let dims = parsed["dimensions"]
        .as_u64()
        .unwrap_or(DEMO_DIMENSIONS)
        .clamp(1, 4096);
    let inputs: Vec<String> = match &parsed["input"] {
        serde_json::Value::Array(items) if items.iter().all(|i| !i.is_number()) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
            .collect(),
        other => vec![other.as_str().map_or_else(|| other.to_string(), str::to_owned)],
    };
    let mut prompt_tokens = 0u64;
    let data: Vec<serde_json::Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            prompt_tokens += u64::try_from(text.len()).unwrap_or(u64::MAX).div_ceil(4).max(1);
            let mut h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            let raw: Vec<f64> = (0..dims)
                .map(|_| {
                    h ^= h << 13;
                    h ^= h >> 7;
                    h ^= h << 17;
                    #[allow(clippy::cast_precision_loss)]
                    let unit = (h >> 11) as f64 / (1u64 << 53) as f64;
                    unit * 2.0 - 1.0
                })
                .collect();
            let norm = raw
                .iter()
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt()
                .max(f64::MIN_POSITIVE);
            let vector: Vec<f64> = raw.iter().map(|x| (x / norm * 1e4).round() / 1e4).collect();
            serde_json::json!({ "object": "embedding", "index": index, "embedding": vector })
        })
        .collect();
    let out = serde_json::json!({
        "object": "list", "data": data, "model": model,
        "usage": { "prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens }
    });
    json_response(&out)
}

/// The same answer as server-sent events, one word per chunk, then the
/// usage chunk and `[DONE]`, like OpenAI with `include_usage`.
fn chat_stream(model: String, answer: String, prompt_tokens: u64) -> Response {
    let chunk = |delta: serde_json::Value, finish: Option<&str>, usage: Option<serde_json::Value>| {
        let mut c = serde_json::json!({
            "id": "chatcmpl-demo", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        if let Some(u) = usage {
            c["choices"] = serde_json::json!([]);
            c["usage"] = u;
        }
        format!("data: {c}\n\n")
    };
    let mut events = vec![chunk(
        serde_json::json!({ "role": "assistant", "content": "" }),
        None,
        None,
    )];
    for word in answer.split_inclusive(' ') {
        events.push(chunk(serde_json::json!({ "content": word }), None, None));
    }
    events.push(chunk(serde_json::json!({}), Some("stop"), None));
    let usage = serde_json::json!({ "prompt_tokens": prompt_tokens, "completion_tokens": 12,
                                    "total_tokens": prompt_tokens + 12 });
    events.push(chunk(serde_json::json!({}), None, Some(usage)));
    events.push("data: [DONE]\n\n".to_owned());
    let s = futures::stream::iter(
        events
            .into_iter()
            .map(|e| Ok::<_, std::convert::Infallible>(Bytes::from(e))),
    );
    Response::builder()
        .header(CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(s))
        .unwrap_or_default()
}

fn stream(content_type: &'static str, chunk: fn(u32) -> String) -> Response {
    let s = futures::stream::unfold(0u32, move |i| async move {
        if i == 5 {
            return None;
        }
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(chunk(i))), i + 1))
    });
    Response::builder()
        .header(CONTENT_TYPE, content_type)
        .body(Body::from_stream(s))
        .unwrap_or_default()
}

/// Serves the demo upstream on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    axum::serve(listener, router()).await
}
