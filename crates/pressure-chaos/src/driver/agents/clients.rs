//! The agent clients: workers that call the gateway's Messages and
//! Responses endpoints as three tenants, streaming or not, paced, and
//! record each answer with its dialect's shape checked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pressure_mock::BAD_REQUEST_MARKER;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::shapes::check;
use super::{AgentSample, Dialect, INVALID_TENANT, PACE, TENANTS};
use crate::driver::load::{ms_since, request_shape, Sample, CLIENT_TIMEOUT, PROMPTS};
use crate::driver::scenario::{Streaming, CLAUDE_PRIMARY, GPT_PRIMARY};

/// A load of agent clients: how many, for how long, at which gateway.
#[derive(Debug, Clone)]
pub(super) struct Load {
    /// `http://127.0.0.1:<port>`.
    pub(super) root: String,
    pub(super) concurrency: usize,
    pub(super) duration: Duration,
    pub(super) streaming: Streaming,
    pub(super) tag: String,
}

/// Worker `w`'s dialect, tenant and whether it streams.
pub(super) fn worker(w: usize, streaming: Streaming) -> (Dialect, &'static str, bool) {
    let dialect = if w.is_multiple_of(2) {
        Dialect::Messages
    } else {
        Dialect::Responses
    };
    (dialect, TENANTS[w % TENANTS.len()].0, streaming.for_worker(w / 2))
}

pub(super) async fn drive(load: &Load, t0: Instant, done: Arc<AtomicU64>) -> Vec<AgentSample> {
    let Ok(client) = reqwest::Client::builder()
        .pool_max_idle_per_host(load.concurrency)
        .timeout(CLIENT_TIMEOUT)
        .build()
    else {
        return Vec::new();
    };
    let end = t0 + load.duration;
    let workers = (0..load.concurrency).map(|w| {
        let client = client.clone();
        let load = load.clone();
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let (dialect, tenant, stream) = worker(w, load.streaming);
            let mut samples = Vec::new();
            let mut n: usize = 0;
            let mut next = Instant::now();
            while next < end {
                tokio::time::sleep_until(next).await;
                next = Instant::now() + PACE;
                let (bad, index) = request_shape(n, w);
                let id = format!("{}-{tenant}-{w}-{n}", load.tag);
                let call = Call {
                    dialect,
                    tenant: if bad { INVALID_TENANT.0 } else { tenant },
                    stream,
                    bad,
                    prompt: index,
                };
                samples.push(one(&client, &load.root, t0, id, call).await);
                done.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            samples
        })
    });
    let mut out = Vec::new();
    for samples in futures::future::join_all(workers).await.into_iter().flatten() {
        out.extend(samples);
    }
    out.sort_by(|a, b| a.sample.start_ms.total_cmp(&b.sample.start_ms));
    out
}

#[derive(Debug, Clone, Copy)]
struct Call {
    dialect: Dialect,
    tenant: &'static str,
    stream: bool,
    bad: bool,
    prompt: usize,
}

/// The request body of `call`.
fn body(call: Call) -> Value {
    let prompt = PROMPTS[call.prompt % PROMPTS.len()];
    let text = if call.bad {
        format!("{prompt} {BAD_REQUEST_MARKER}")
    } else {
        prompt.to_owned()
    };
    let system = "You are a coding agent. Answer briefly.";
    let mut body = match call.dialect {
        Dialect::Messages => json!({
            "model": CLAUDE_PRIMARY,
            "max_tokens": 64,
            "system": system,
            "messages": [ { "role": "user", "content": text } ]
        }),
        Dialect::Responses => json!({
            "model": GPT_PRIMARY,
            "instructions": system,
            "input": [ { "role": "user", "content": text } ],
            "max_output_tokens": 64
        }),
    };
    if call.stream {
        body["stream"] = Value::Bool(true);
    }
    body
}

/// The most bytes of an answer kept for its checks.
const MAX_BODY: usize = 1 << 20;

async fn one(client: &reqwest::Client, root: &str, t0: Instant, id: String, call: Call) -> AgentSample {
    let start_ms = ms_since(t0);
    let mut out = AgentSample {
        sample: Sample {
            id: id.clone(),
            start_ms,
            end_ms: start_ms,
            status: 0,
            degradation: None,
            bad: call.bad,
            stream: call.stream,
            stream_error: false,
        },
        dialect: call.dialect,
        tenant: call.tenant,
        shape: Err("no answer".into()),
        retry_after: false,
        prompt: call.prompt,
    };
    let mut req = client
        .post(format!("{root}{}", call.dialect.path()))
        .header("x-request-id", &id)
        .json(&body(call));
    req = match call.dialect {
        Dialect::Messages => req
            .header("x-api-key", call.tenant)
            .header("anthropic-version", "2023-06-01"),
        Dialect::Responses => req.bearer_auth(call.tenant),
    };
    if let Ok(resp) = req.send().await {
        let status = resp.status().as_u16();
        out.sample.status = status;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        out.sample.degradation = header("x-pressure-degradation");
        out.retry_after = header("retry-after").is_some();
        let sse = header("content-type").is_some_and(|c| c.starts_with("text/event-stream"));
        let mut bytes = resp.bytes_stream();
        let mut all = Vec::new();
        let mut failed = false;
        while let Some(chunk) = bytes.next().await {
            match chunk {
                Ok(c) if all.len() + c.len() <= MAX_BODY => all.extend_from_slice(&c),
                Ok(_) => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        let text = String::from_utf8_lossy(&all);
        out.shape = if failed {
            Err("the answer broke off".into())
        } else {
            check(call.dialect, status, sse, call.stream, &text)
        };
        out.sample.stream_error = sse && out.shape.is_err();
        if failed && !sse {
            out.sample.status = 0;
        }
    }
    out.sample.end_ms = ms_since(t0);
    out
}
