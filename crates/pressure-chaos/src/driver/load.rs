//! The clients: `concurrency` workers, each sending one chat completion
//! after the other through the gateway until the load ends (a closed loop,
//! like users waiting for their answer), recording one [`Sample`] each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::scenario::Streaming;
use super::stack::USE_CASE;
use pressure_mock::BAD_REQUEST_MARKER;

/// Every this many requests a worker sends one the provider must refuse
/// (400), to check that no 400 is ever retried.
pub(super) const BAD_REQUEST_EVERY: usize = 30;
/// The longest a client waits for one answer (the use case's deadline is
/// shorter; this only bounds the run if something is broken).
pub(super) const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);

/// The `n`-th request of worker `w`: whether it is one of the marked bad
/// ones (every [`BAD_REQUEST_EVERY`]-th, staggered by worker), and the
/// index of its prompt in [`PROMPTS`].
pub(super) fn request_shape(n: usize, w: usize) -> (bool, usize) {
    // Counters of one run, far from the top: wrapping keeps it total.
    let k = n.wrapping_add(w);
    (k % BAD_REQUEST_EVERY == BAD_REQUEST_EVERY - 1, k % PROMPTS.len())
}

/// Support-ticket prompts (about 100 tokens each), two of which the keyword
/// rules can answer.
pub(super) const PROMPTS: &[&str] = &[
    "Hello, I was charged twice for my subscription this month and I would like a refund for the second charge. The invoice number is INV-20931 and the payment went through on my company card ending 4411. Could you please look into it and let me know how long the refund usually takes? Thanks a lot.",
    "Since this morning the export to CSV button does nothing in the reports section. I tried Chrome and Firefox, cleared the cache and logged out and in again, but nothing happens and there is no error message either. Our weekly review is tomorrow, so any workaround would help.",
    "My parcel was supposed to arrive on Tuesday but the tracking page has said 'in transit' for five days now without any update. The order number is 55-1832. Can you tell me where it is, or send a replacement if it is lost? I need the cables for an installation next week.",
    "I cannot log in anymore: the password reset email never arrives, I checked spam and the address is correct. I also tried the link on the phone app and it says my token has expired. My account is registered under the work email of our clinic and several colleagues depend on it.",
    "We would love to be able to schedule reports to be sent automatically every Monday to a list of addresses, including people outside the organisation. Is something like that on the roadmap? Right now somebody has to remember to export and forward them by hand every week.",
    "Please cancel my plan at the end of the current billing period. We are moving to a different tool for budget reasons, nothing wrong with the service itself. Make sure no further invoice is sent after that, and tell me how to export our data before the account closes.",
    "The mobile app crashes every time I open the calendar view on Android 14 (Pixel 7). It worked fine until the update last Thursday. I reinstalled it and restarted the phone, but it still closes after about two seconds on that screen. Other screens seem to be fine.",
    "Our team was upgraded to the business tier but two of the seats still show the old limits, and the admin panel does not let me reassign them. Can you fix the seats and check that the prorated amount on the next invoice is right? We do not want to be charged for unused seats.",
];

/// One client request and what came back.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    /// The `x-request-id` sent (and the event id the mock sees).
    pub id: String,
    /// When it was sent, ms since the load started.
    pub start_ms: f64,
    /// When the answer was complete (the stream's end), ms since the load started.
    pub end_ms: f64,
    /// HTTP status (0: no answer).
    pub status: u16,
    /// `x-pressure-degradation` of the answer, when present.
    pub degradation: Option<String>,
    /// Whether this request carried the bad-request marker.
    pub bad: bool,
    /// Whether this request asked for a stream.
    pub stream: bool,
    /// Whether a stream ended with an error event instead of `[DONE]`.
    pub stream_error: bool,
}

impl Sample {
    /// Client latency, ms.
    pub(super) fn latency_ms(&self) -> f64 {
        self.end_ms - self.start_ms
    }

    /// The label of its result: the degradation level, or `error:<status>`.
    pub(super) fn result(&self) -> String {
        match (&self.degradation, self.status) {
            (Some(d), 200 | 202) if !self.stream_error => d.clone(),
            (Some(d), 200) => format!("{d}+stream_error"),
            (_, 0) => "error:no_answer".to_owned(),
            (_, s) => format!("error:{s}"),
        }
    }

    /// Whether a model (primary or backup) answered it.
    pub(super) fn answered_by_model(&self) -> bool {
        self.status == 200
            && !self.stream_error
            && self
                .degradation
                .as_deref()
                .is_some_and(|d| d == "primary" || d.starts_with("backup"))
    }
}

/// What the clients do.
#[derive(Debug, Clone)]
pub(super) struct Load {
    /// The gateway's chat completions URL.
    pub url: String,
    /// Concurrent clients.
    pub concurrency: usize,
    /// How long clients start new requests.
    pub duration: Duration,
    /// Which workers ask for streams.
    pub streaming: Streaming,
    /// A prefix making request ids unique to the run.
    pub tag: String,
}

/// Runs the load from `t0`; `done` counts finished requests (for a progress bar).
pub(super) async fn drive(load: &Load, t0: Instant, done: Arc<AtomicU64>) -> Vec<Sample> {
    let client = match reqwest::Client::builder()
        .pool_max_idle_per_host(load.concurrency)
        .timeout(CLIENT_TIMEOUT)
        .build()
    {
        Ok(c) => c,
        Err(_) => return Vec::new(),
    };
    let end = t0 + load.duration;
    let workers = (0..load.concurrency).map(|w| {
        let client = client.clone();
        let load = load.clone();
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut n: usize = 0;
            while Instant::now() < end {
                let (bad, index) = request_shape(n, w);
                let prompt = PROMPTS[index];
                let id = format!("{}-{w}-{n}", load.tag);
                let stream = load.streaming.for_worker(w);
                samples.push(one(&client, &load.url, t0, id, prompt, bad, stream).await);
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
    out.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    out
}

pub(super) fn ms_since(t0: Instant) -> f64 {
    Instant::now().saturating_duration_since(t0).as_secs_f64() * 1_000.0
}

async fn one(
    client: &reqwest::Client,
    url: &str,
    t0: Instant,
    id: String,
    prompt: &str,
    bad: bool,
    stream: bool,
) -> Sample {
    let text = if bad {
        format!("{prompt} {BAD_REQUEST_MARKER}")
    } else {
        prompt.to_owned()
    };
    let mut body = json!({
        "model": USE_CASE,
        "messages": [
            { "role": "system", "content": "You are a support assistant. Answer briefly." },
            { "role": "user", "content": text }
        ],
        "max_tokens": 64
    });
    if stream {
        body["stream"] = Value::Bool(true);
    }
    let start_ms = ms_since(t0);
    let mut sample = Sample {
        id: id.clone(),
        start_ms,
        end_ms: start_ms,
        status: 0,
        degradation: None,
        bad,
        stream,
        stream_error: false,
    };
    let sent = client
        .post(url)
        .header("x-request-id", &id)
        .json(&body)
        .send()
        .await;
    if let Ok(resp) = sent {
        sample.status = resp.status().as_u16();
        sample.degradation = resp
            .headers()
            .get("x-pressure-degradation")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let mut bytes = resp.bytes_stream();
        let mut tail = Vec::new();
        let mut failed = false;
        while let Some(chunk) = bytes.next().await {
            match chunk {
                Ok(c) => {
                    tail.extend_from_slice(&c);
                    if tail.len() > 4_096 {
                        tail.drain(..tail.len() - 4_096);
                    }
                }
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        if sse {
            let text = String::from_utf8_lossy(&tail);
            sample.stream_error = failed || !text.contains("data: [DONE]");
        } else if failed {
            sample.status = 0;
        }
    }
    sample.end_ms = ms_since(t0);
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_labelled() {
        let mut s = Sample {
            id: "x".into(),
            start_ms: 10.0,
            end_ms: 60.0,
            status: 200,
            degradation: Some("primary".into()),
            bad: false,
            stream: false,
            stream_error: false,
        };
        assert_eq!(s.result(), "primary");
        assert!(s.answered_by_model());
        assert_eq!(s.latency_ms(), 50.0);
        s.stream_error = true;
        assert_eq!(s.result(), "primary+stream_error");
        assert!(!s.answered_by_model());
        s.stream_error = false;
        s.degradation = Some("rules".into());
        assert!(!s.answered_by_model());
        s.status = 400;
        s.degradation = None;
        assert_eq!(s.result(), "error:400");
        s.status = 0;
        assert_eq!(s.result(), "error:no_answer");
    }
}
