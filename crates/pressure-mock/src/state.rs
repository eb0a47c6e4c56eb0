//! The mock's shared state: the behaviour in force, the quota, the random
//! draws, and what it recorded (arrivals, billing, in-flight counts).
//!
//! Every lock here is a `parking_lot` lock held for a few field updates,
//! never across an `.await`, so thousands of requests per second and
//! hundreds in flight do not queue behind each other.
//!
//! Two guards make billing and "client gone" independent of how a request
//! ends: a [`Tracker`] (one per request) counts it in flight and marks its
//! arrival `client_gone` when dropped before the answer was complete; an
//! [`OutputBill`] bills the output tokens when generation finishes — at
//! once when the handler gets there, or from a detached task when the
//! handler or body was dropped first (the client went away).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::http::HeaderMap;
use parking_lot::{Mutex, RwLock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

use crate::behaviour::{Behaviour, Latency, Phase};
use crate::cache::{CacheUse, PromptCache};
use crate::price::{Billed, Price};
use crate::quota::QuotaBook;
use crate::record::{
    Arrival, MockStats, ModelBill, Outcome, ATTEMPT_HEADER, PROBE_HEADER, REQUEST_ID_HEADER,
};
use crate::responder::Responder;

/// Whole milliseconds of `d`, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A request header as text, when present and visible ASCII.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// The behaviour in force and when it was set.
#[derive(Debug, Clone)]
pub(crate) struct Current {
    pub(crate) behaviour: Arc<Behaviour>,
    pub(crate) set_at: Instant,
}

/// Token counts of one model (the bill is computed from them on demand,
/// so rounding never accumulates).
#[derive(Debug, Clone, Copy, Default)]
struct Tokens {
    requests: u64,
    billed: Billed,
}

/// Arrivals and counters since start or the last reset.
#[derive(Debug, Default)]
struct Records {
    /// Bumped by every reset, so late billing of an older request is dropped.
    generation: u64,
    arrivals: Vec<Arrival>,
    /// The cache classes of each arrival's input, beside `arrivals` (an
    /// [`Arrival`] keeps its JSON shape; its `micro_usd` uses these).
    caches: Vec<CacheUse>,
    by_status: BTreeMap<u16, u64>,
    by_outcome: BTreeMap<Outcome, u64>,
    by_endpoint: BTreeMap<&'static str, u64>,
    models: BTreeMap<String, Tokens>,
}

/// Where an arrival was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArrivalRef {
    generation: u64,
    index: usize,
}

impl ArrivalRef {
    /// The arrival's sequence number.
    pub(crate) fn seq(self) -> usize {
        self.index
    }
}

/// What one request turned out to be, before it is recorded.
#[derive(Debug, Clone)]
pub(crate) struct Draft {
    pub(crate) at: Instant,
    /// The path called (`/v1/chat/completions`, `/v1/messages`).
    pub(crate) endpoint: &'static str,
    pub(crate) model: String,
    pub(crate) request_id: Option<String>,
    pub(crate) attempt: Option<u32>,
    pub(crate) traceparent: Option<String>,
    pub(crate) probe: bool,
    pub(crate) stream: bool,
    pub(crate) phase: String,
}

impl Draft {
    /// The record of a request to `endpoint` that arrived `at` in `phase`,
    /// with the pipeline's tags (request id, attempt, probe) from its
    /// headers; the model and `stream` are filled in once it is parsed.
    pub(crate) fn arriving(at: Instant, endpoint: &'static str, headers: &HeaderMap, phase: &str) -> Self {
        Self {
            at,
            endpoint,
            model: String::new(),
            request_id: header(headers, REQUEST_ID_HEADER).map(str::to_owned),
            traceparent: header(headers, "traceparent").map(str::to_owned),
            attempt: header(headers, ATTEMPT_HEADER).and_then(|v| v.parse().ok()),
            probe: header(headers, PROBE_HEADER).is_some_and(|v| !matches!(v, "false" | "0")),
            stream: false,
            phase: phase.to_owned(),
        }
    }

    /// Records the `model` a body that is no valid request still names.
    pub(crate) fn model_of_invalid(&mut self, body: &[u8]) {
        self.model = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                v.get("model")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_default();
    }
}

/// The fault a request draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    Error,
    Overload,
    Hang,
    Stall,
    StreamError,
}

/// The state shared by the handlers and the [`MockProvider`](crate::MockProvider) handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) started: Instant,
    current: RwLock<Current>,
    pub(crate) quota: Mutex<QuotaBook>,
    /// The prompt-cache prefixes seen (cleared by a reset).
    pub(crate) cache: Mutex<PromptCache>,
    records: Mutex<Records>,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    rng: Mutex<StdRng>,
    prices: BTreeMap<String, Price>,
    default_price: Price,
    pub(crate) responder: Arc<dyn Responder>,
    shutdown: watch::Sender<bool>,
}

impl Shared {
    pub(crate) fn new(
        behaviour: Behaviour,
        prices: BTreeMap<String, Price>,
        default_price: Price,
        responder: Arc<dyn Responder>,
        seed: Option<u64>,
    ) -> Self {
        let started = Instant::now();
        let rng = match seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        Self {
            started,
            current: RwLock::new(Current {
                behaviour: Arc::new(behaviour),
                set_at: started,
            }),
            quota: Mutex::new(QuotaBook::default()),
            cache: Mutex::new(PromptCache::default()),
            records: Mutex::new(Records::default()),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            rng: Mutex::new(rng),
            prices,
            default_price,
            responder,
            shutdown: watch::channel(false).0,
        }
    }

    /// The behaviour in force and when it was set.
    pub(crate) fn current(&self) -> Current {
        self.current.read().clone()
    }

    /// Replaces the behaviour (already validated), restarts the phase clock
    /// and forgets the quota logs: a new behaviour is a fresh provider.
    pub(crate) fn set_behaviour(&self, behaviour: Behaviour) {
        *self.current.write() = Current {
            behaviour: Arc::new(behaviour),
            set_at: Instant::now(),
        };
        self.quota.lock().clear();
    }

    /// The phase in force at `at`.
    pub(crate) fn phase_at(&self, at: Instant) -> Phase {
        let cur = self.current.read();
        let elapsed = at.saturating_duration_since(cur.set_at);
        let ms = millis(elapsed);
        cur.behaviour.phase_at(ms).1.clone()
    }

    /// Milliseconds from the mock's start to `at`.
    pub(crate) fn ms_since_start(&self, at: Instant) -> u64 {
        millis(at.saturating_duration_since(self.started))
    }

    /// One uniform draw decides the fault: `errorShare`, then
    /// `overloadShare`, then `hangShare`, then `stallShare`, then
    /// `streamErrorShare`, else none.
    pub(crate) fn draw_fault(&self, phase: &Phase) -> Fault {
        if phase.error_share <= 0.0
            && phase.overload_share <= 0.0
            && phase.hang_share <= 0.0
            && phase.stall_share <= 0.0
            && phase.stream_error_share <= 0.0
        {
            return Fault::None;
        }
        let u: f64 = self.rng.lock().random();
        let over = phase.error_share + phase.overload_share;
        if u < phase.error_share {
            Fault::Error
        } else if u < over {
            Fault::Overload
        } else if u < over + phase.hang_share {
            Fault::Hang
        } else if u < over + phase.hang_share + phase.stall_share {
            Fault::Stall
        } else if u < over + phase.hang_share + phase.stall_share + phase.stream_error_share {
            Fault::StreamError
        } else {
            Fault::None
        }
    }

    /// The latency of one answer: uniform in `minMs..=maxMs`, plus `tailMs`
    /// with probability `tailShare`.
    pub(crate) fn draw_latency(&self, l: &Latency) -> Duration {
        let mut rng = self.rng.lock();
        let base = if l.max_ms > l.min_ms {
            rng.random_range(l.min_ms..=l.max_ms)
        } else {
            l.min_ms
        };
        let tail = if l.tail_share > 0.0 && rng.random::<f64>() < l.tail_share {
            l.tail_ms
        } else {
            0
        };
        Duration::from_millis(base.saturating_add(tail))
    }

    /// Records one request; its input tokens are billed (0 when not).
    pub(crate) fn record(&self, d: Draft, outcome: Outcome, status: u16, input_tokens: u64) -> ArrivalRef {
        self.record_cached(d, outcome, status, input_tokens, CacheUse::default())
    }

    /// Records one request whose `input_tokens` are billed, `cache` of
    /// them at the prompt-cache prices.
    pub(crate) fn record_cached(
        &self,
        d: Draft,
        outcome: Outcome,
        status: u16,
        input_tokens: u64,
        cache: CacheUse,
    ) -> ArrivalRef {
        let at_ms = d.at.saturating_duration_since(self.started).as_secs_f64() * 1_000.0;
        let mut r = self.records.lock();
        let index = r.arrivals.len();
        *r.by_status.entry(status).or_default() += 1;
        *r.by_outcome.entry(outcome).or_default() += 1;
        *r.by_endpoint.entry(d.endpoint).or_default() += 1;
        if !d.model.is_empty() {
            let m = r.models.entry(d.model.clone()).or_default();
            m.requests += 1;
            m.billed.input = m.billed.input.saturating_add(input_tokens);
            m.billed.cache.write = m.billed.cache.write.saturating_add(cache.write);
            m.billed.cache.read = m.billed.cache.read.saturating_add(cache.read);
        }
        r.caches.push(cache);
        r.arrivals.push(Arrival {
            seq: u64::try_from(index).unwrap_or(u64::MAX),
            at_ms,
            model: d.model,
            endpoint: d.endpoint.to_owned(),
            request_id: d.request_id,
            traceparent: d.traceparent,
            attempt: d.attempt,
            probe: d.probe,
            stream: d.stream,
            phase: d.phase,
            outcome,
            status,
            input_tokens,
            output_tokens: 0,
            micro_usd: 0,
            client_gone: false,
        });
        ArrivalRef {
            generation: r.generation,
            index,
        }
    }

    /// Bills `tokens` of output to the arrival (dropped if a reset came in between).
    fn bill_output(&self, at: ArrivalRef, tokens: u64) {
        let mut r = self.records.lock();
        if r.generation != at.generation {
            return;
        }
        let Some(a) = r.arrivals.get_mut(at.index) else {
            return;
        };
        a.output_tokens += tokens;
        let model = a.model.clone();
        let m = r.models.entry(model).or_default();
        m.billed.output = m.billed.output.saturating_add(tokens);
    }

    /// Marks the arrival's client as gone.
    fn mark_client_gone(&self, at: ArrivalRef) {
        let mut r = self.records.lock();
        if r.generation == at.generation {
            if let Some(a) = r.arrivals.get_mut(at.index) {
                a.client_gone = true;
            }
        }
    }

    fn price(&self, model: &str) -> Price {
        self.prices.get(model).copied().unwrap_or(self.default_price)
    }

    /// The counters now.
    pub(crate) fn stats(&self) -> MockStats {
        let phase = self.phase_at(Instant::now()).name;
        let r = self.records.lock();
        let mut s = MockStats {
            requests: u64::try_from(r.arrivals.len()).unwrap_or(u64::MAX),
            by_status: r.by_status.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            by_outcome: r.by_outcome.clone(),
            by_endpoint: r.by_endpoint.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            phase,
            ..MockStats::default()
        };
        for (model, t) in &r.models {
            let b = &t.billed;
            let micro_usd = self.price(model).of(b);
            s.billed_input_tokens = s.billed_input_tokens.saturating_add(b.input);
            s.billed_output_tokens = s.billed_output_tokens.saturating_add(b.output);
            s.billed_cache_write_input_tokens =
                s.billed_cache_write_input_tokens.saturating_add(b.cache.write);
            s.billed_cache_read_input_tokens = s.billed_cache_read_input_tokens.saturating_add(b.cache.read);
            s.billed_micro_usd = s.billed_micro_usd.saturating_add(micro_usd);
            s.by_model.insert(
                model.clone(),
                ModelBill {
                    requests: t.requests,
                    input_tokens: b.input,
                    output_tokens: b.output,
                    cache_write_input_tokens: b.cache.write,
                    cache_read_input_tokens: b.cache.read,
                    micro_usd,
                },
            );
        }
        s
    }

    /// Every arrival since start or the last reset, in order.
    pub(crate) fn arrivals(&self) -> Vec<Arrival> {
        let (mut arrivals, caches) = {
            let r = self.records.lock();
            (r.arrivals.clone(), r.caches.clone())
        };
        for (a, cache) in arrivals.iter_mut().zip(caches) {
            a.micro_usd = self.price(&a.model).of(&Billed {
                input: a.input_tokens,
                cache,
                output: a.output_tokens,
            });
        }
        arrivals
    }

    /// Clears arrivals, counters, the quota logs and the prompt cache; the highest in-flight
    /// count restarts from the requests in flight now.
    pub(crate) fn reset(&self) {
        {
            let mut r = self.records.lock();
            let generation = r.generation + 1;
            *r = Records {
                generation,
                ..Records::default()
            };
        }
        self.quota.lock().clear();
        self.cache.lock().clear();
        self.max_in_flight
            .store(self.in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Tells every waiting handler and body to end.
    pub(crate) fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Whether shutdown has begun.
    pub(crate) fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Resolves once shutdown has begun.
    pub(crate) fn shutdown_signal(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.shutdown.subscribe();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    }
}

/// One request in flight; see the module docs.
#[derive(Debug)]
pub(crate) struct Tracker {
    shared: Arc<Shared>,
    arrival: Option<ArrivalRef>,
    done: bool,
}

impl Tracker {
    /// Counts a request in flight from now until the tracker is dropped.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::Relaxed);
        Self {
            shared,
            arrival: None,
            done: false,
        }
    }

    /// The arrival to mark if the client goes away.
    pub(crate) fn attach(&mut self, at: ArrivalRef) {
        self.arrival = Some(at);
    }

    /// The answer is complete: dropping the tracker no longer means the client went away.
    pub(crate) fn finish(&mut self) {
        self.done = true;
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.done && !self.shared.shutting_down() {
            if let Some(at) = self.arrival {
                self.shared.mark_client_gone(at);
            }
        }
    }
}

/// The output tokens of an answer, billed once when generation finishes;
/// see the module docs.
#[derive(Debug)]
pub(crate) struct OutputBill {
    shared: Arc<Shared>,
    arrival: ArrivalRef,
    tokens: u64,
    due: Instant,
    billed: bool,
}

impl OutputBill {
    /// `tokens` of output for `arrival`, generated by `due`.
    pub(crate) fn new(shared: Arc<Shared>, arrival: ArrivalRef, tokens: u64, due: Instant) -> Self {
        Self {
            shared,
            arrival,
            tokens,
            due,
            billed: false,
        }
    }

    /// Bills nothing: generation failed (a stream that ends in an error).
    pub(crate) fn forgo(mut self) {
        self.billed = true;
    }

    /// Bills now (generation finished as the answer was sent).
    pub(crate) fn bill_now(&mut self) {
        if !self.billed {
            self.billed = true;
            self.shared.bill_output(self.arrival, self.tokens);
        }
    }
}

impl Drop for OutputBill {
    fn drop(&mut self) {
        if self.billed {
            return;
        }
        self.billed = true;
        let (shared, arrival, tokens, due) = (self.shared.clone(), self.arrival, self.tokens, self.due);
        match tokio::runtime::Handle::try_current() {
            // Generation goes on without the client: bill when it would have finished.
            Ok(handle) if due > Instant::now() => {
                handle.spawn(async move {
                    tokio::time::sleep_until(due).await;
                    shared.bill_output(arrival, tokens);
                });
            }
            _ => shared.bill_output(arrival, tokens),
        }
    }
}
