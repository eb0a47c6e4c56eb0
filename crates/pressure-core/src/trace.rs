//! Distributed traces, the part every crate shares: W3C trace context
//! (`traceparent` / `tracestate`), finished spans as plain values, and a
//! [`Tracer`] that hands them to an exporter through a bounded queue.
//!
//! A [`Tracer`] never waits: [`Span::end`] puts the span in the queue with
//! `try_send`, and a full queue (the exporter slow, hung or down) drops
//! the span and counts it ([`Tracer::dropped`]). Tracing off is no tracer
//! at all (`Option<Tracer>` is `None`): callers branch on it once and do
//! nothing else.
//!
//! The exporter (OTLP over HTTP or gRPC) lives in the gateway; it reads
//! the queue's other end ([`Tracer::new`]).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The `traceparent` header's name.
pub const TRACEPARENT: &str = "traceparent";
/// The `tracestate` header's name.
pub const TRACESTATE: &str = "tracestate";

/// Where a span sits in a trace: its trace, its own id, whether the trace
/// is sampled, and the vendor state carried beside (`tracestate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanContext {
    /// The trace's id (never all zero).
    pub trace_id: [u8; 16],
    /// The span's id (never all zero).
    pub span_id: [u8; 8],
    /// Whether the trace is recorded (the `sampled` flag).
    pub sampled: bool,
    /// The `tracestate` header, passed on untouched.
    pub state: Option<Arc<str>>,
}

fn hex_into(bytes: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.as_bytes();
    if s.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        out[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

impl SpanContext {
    /// Parses a `traceparent` header (version `00`, or a later one read
    /// as `00`), with the `tracestate` beside it. `None` when it is
    /// malformed or names the all-zero trace or span.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let mut parts = traceparent.trim().split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        let version: [u8; 1] = unhex(version)?;
        if version[0] == 0xff || (version[0] == 0 && parts.next().is_some()) {
            return None;
        }
        let trace_id: [u8; 16] = unhex(trace)?;
        let span_id: [u8; 8] = unhex(span)?;
        let flags: [u8; 1] = unhex(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            sampled: flags[0] & 1 == 1,
            state: tracestate.filter(|s| !s.is_empty()).map(Arc::from),
        })
    }

    /// The `traceparent` header naming this span as the parent.
    pub fn traceparent(&self) -> String {
        let mut out = String::with_capacity(55);
        out.push_str("00-");
        hex_into(&self.trace_id, &mut out);
        out.push('-');
        hex_into(&self.span_id, &mut out);
        out.push_str(if self.sampled { "-01" } else { "-00" });
        out
    }

    /// The trace id in lower-case hex (32 characters).
    pub fn trace_id_hex(&self) -> String {
        let mut out = String::with_capacity(32);
        hex_into(&self.trace_id, &mut out);
        out
    }
}

/// A span's kind (OTLP's `SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside the process.
    Internal,
    /// A request served.
    Server,
    /// A request made to another service.
    Client,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(Cow<'static, str>),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl From<&'static str> for Value {
    fn from(v: &'static str) -> Self {
        Value::Str(Cow::Borrowed(v))
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(Cow::Owned(v))
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Int(i64::from(v))
    }
}
impl From<u16> for Value {
    fn from(v: u16) -> Self {
        Value::Int(i64::from(v))
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

/// One attribute: a key and its value.
pub type Attribute = (Cow<'static, str>, Value);

/// Something that happened at a point of a span's life.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    /// Its name (`pressure.admission`, `pressure.fallback`, …).
    pub name: Cow<'static, str>,
    /// When, in nanoseconds since the Unix epoch.
    pub time_unix_nanos: u64,
    /// What is known of it.
    pub attributes: Vec<Attribute>,
}

/// A finished span, as the exporter receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanData {
    /// The span's place in its trace.
    pub context: SpanContext,
    /// The parent span's id, when the span has one.
    pub parent: Option<[u8; 8]>,
    /// Its name.
    pub name: Cow<'static, str>,
    /// Its kind.
    pub kind: SpanKind,
    /// When it started, in nanoseconds since the Unix epoch.
    pub start_unix_nanos: u64,
    /// When it ended, likewise.
    pub end_unix_nanos: u64,
    /// Its attributes.
    pub attributes: Vec<Attribute>,
    /// Its events.
    pub events: Vec<SpanEvent>,
    /// Whether it ended in error (OTLP status `ERROR`), with a message.
    pub error: Option<Cow<'static, str>>,
}

/// Which traces are recorded (`OTEL_TRACES_SAMPLER`, `sampleRatio`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// The share of new traces (no parent) recorded, `0.0..=1.0`.
    pub ratio: f64,
    /// Whether a span with a parent follows the parent's `sampled` flag
    /// (`parentbased_*`, the default) rather than the ratio.
    pub parent_based: bool,
}

impl Default for Sampler {
    fn default() -> Self {
        Self {
            ratio: 1.0,
            parent_based: true,
        }
    }
}

/// Now, in nanoseconds since the Unix epoch.
// OTLP spans carry wall-clock times by definition: this is a span's
// timestamp, never a limiter's time.
#[allow(clippy::disallowed_methods)]
pub fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn new_span_id() -> [u8; 8] {
    loop {
        let id: [u8; 8] = rand::random();
        if id != [0; 8] {
            return id;
        }
    }
}

fn new_trace_id() -> [u8; 16] {
    loop {
        let id: [u8; 16] = rand::random();
        if id != [0; 16] {
            return id;
        }
    }
}

struct TracerInner {
    queue: tokio::sync::mpsc::Sender<SpanData>,
    dropped: AtomicU64,
    sampler: Sampler,
}

/// Starts spans and hands the finished ones to the exporter's queue
/// (module docs). Cheap to clone.
#[derive(Clone)]
pub struct Tracer {
    inner: Arc<TracerInner>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("sampler", &self.inner.sampler)
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl Tracer {
    /// A tracer sampling with `sampler` whose queue holds `capacity`
    /// finished spans; the receiver is the exporter's.
    pub fn new(sampler: Sampler, capacity: usize) -> (Self, tokio::sync::mpsc::Receiver<SpanData>) {
        let (queue, rx) = tokio::sync::mpsc::channel(capacity.max(1));
        let inner = TracerInner {
            queue,
            dropped: AtomicU64::new(0),
            sampler,
        };
        (
            Self {
                inner: Arc::new(inner),
            },
            rx,
        )
    }

    /// Spans dropped so far: the queue was full, or the exporter gone.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    /// Spans dropped by the exporter itself (an export that failed).
    pub fn count_dropped(&self, n: u64) {
        self.inner.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Starts a span under `parent` (a remote parent from `traceparent`,
    /// or a local span's context). `None` when the trace is not sampled:
    /// the caller then records nothing, but may still propagate
    /// [`SpanContext::traceparent`] of the parent.
    pub fn start(
        &self,
        parent: Option<&SpanContext>,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
    ) -> Option<Span> {
        let sampler = self.inner.sampler;
        let sampled = match parent {
            Some(p) if sampler.parent_based => p.sampled,
            _ => sampler.ratio >= 1.0 || (sampler.ratio > 0.0 && rand::random::<f64>() < sampler.ratio),
        };
        if !sampled {
            return None;
        }
        let context = SpanContext {
            trace_id: parent.map_or_else(new_trace_id, |p| p.trace_id),
            span_id: new_span_id(),
            sampled: true,
            state: parent.and_then(|p| p.state.clone()),
        };
        Some(Span {
            tracer: self.clone(),
            data: SpanData {
                context,
                parent: parent.map(|p| p.span_id),
                name: name.into(),
                kind,
                start_unix_nanos: now_unix_nanos(),
                end_unix_nanos: 0,
                attributes: Vec::new(),
                events: Vec::new(),
                error: None,
            },
        })
    }

    fn finish(&self, data: SpanData) {
        if self.inner.queue.try_send(data).is_err() {
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A span being recorded: ended (and queued for export) by [`Span::end`]
/// or when dropped.
#[derive(Debug)]
pub struct Span {
    tracer: Tracer,
    data: SpanData,
}

impl Span {
    /// The span's place in its trace (a child's parent; `traceparent`).
    pub fn context(&self) -> &SpanContext {
        &self.data.context
    }

    /// Sets an attribute.
    pub fn set(&mut self, key: impl Into<Cow<'static, str>>, value: impl Into<Value>) {
        self.data.attributes.push((key.into(), value.into()));
    }

    /// Records an event now.
    pub fn event(&mut self, name: impl Into<Cow<'static, str>>, attributes: Vec<Attribute>) {
        self.data.events.push(SpanEvent {
            name: name.into(),
            time_unix_nanos: now_unix_nanos(),
            attributes,
        });
    }

    /// Marks the span failed, with `message`.
    pub fn fail(&mut self, message: impl Into<Cow<'static, str>>) {
        self.data.error = Some(message.into());
    }

    /// Renames the span (the server span learns its route late).
    pub fn rename(&mut self, name: impl Into<Cow<'static, str>>) {
        self.data.name = name.into();
    }

    /// Ends the span now and queues it for export.
    pub fn end(self) {
        drop(self);
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let mut data = std::mem::replace(
            &mut self.data,
            SpanData {
                context: SpanContext {
                    trace_id: [0; 16],
                    span_id: [0; 8],
                    sampled: false,
                    state: None,
                },
                parent: None,
                name: Cow::Borrowed(""),
                kind: SpanKind::Internal,
                start_unix_nanos: 0,
                end_unix_nanos: 0,
                attributes: Vec::new(),
                events: Vec::new(),
                error: None,
            },
        );
        data.end_unix_nanos = now_unix_nanos().max(data.start_unix_nanos);
        self.tracer.finish(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_refuses_bad_ones() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = SpanContext::parse(tp, Some("k=v")).expect("valid");
        assert!(c.sampled);
        assert_eq!(c.traceparent(), tp);
        assert_eq!(c.state.as_deref(), Some("k=v"));
        assert_eq!(c.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert!(SpanContext::parse(bad, None).is_none(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts() {
        let (tracer, mut rx) = Tracer::new(Sampler::default(), 1);
        let parent = tracer.start(None, "a", SpanKind::Server).expect("sampled");
        let child = tracer
            .start(Some(parent.context()), "b", SpanKind::Client)
            .expect("sampled");
        assert_eq!(child.context().trace_id, parent.context().trace_id);
        child.end();
        parent.end();
        assert_eq!(tracer.dropped(), 1);
        let got = rx.recv().await.expect("one span");
        assert_eq!(got.name, "b");
        let unsampled = SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", None);
        assert!(tracer.start(unsampled.as_ref(), "c", SpanKind::Server).is_none());
        let (never, _rx) = Tracer::new(
            Sampler {
                ratio: 0.0,
                parent_based: true,
            },
            1,
        );
        assert!(never.start(None, "d", SpanKind::Server).is_none());
    }
}
