//! The gateway's JSON log lines, written straight into the line buffer.
//!
//! Byte for byte what `tracing_subscriber`'s JSON format writes (`timestamp`,
//! `level`, `fields`, `target`), without its per-line work: it formats the
//! timestamp into a `String`, builds a serde serializer per line and each
//! `Debug` field (the message is one) into a `String` before escaping it.
//! One `pressure::llm` answer line cost 22,700 instructions that way, an
//! eighth of a whole chat completion (`docs/benchmarks.md`); the access log
//! writes one line per request.
//!
//! Lines that carry more than fields — an event inside a span (the JSON
//! format adds `span` and `spans`) or a record forwarded from the `log`
//! crate (whose metadata is normalised first) — are handed to the stock
//! formatter, so every line stays what log shippers already parse.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Json, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// The event formatter of `--log-format json` (module docs). Install it with
/// [`format::JsonFields`] as the field formatter, as the stock JSON format
/// does, so the lines it hands on format their spans alike.
pub(crate) struct JsonLines<T = Rfc3339> {
    timer: T,
    stock: format::Format<Json, T>,
}

impl JsonLines<Rfc3339> {
    /// Lines stamped with the system time, RFC 3339 in UTC.
    pub(crate) fn new() -> Self {
        Self::with_timer(Rfc3339)
    }
}

/// The system time as `tracing_subscriber`'s
/// [`SystemTime`](tracing_subscriber::fmt::time::SystemTime) writes it
/// (RFC 3339, UTC, microseconds: `2026-12-02T11:00:00.123456Z`), through
/// `humantime`'s formatter: a fifth of the instructions of the stock one,
/// which converts through a calendar type and `fmt` per field.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rfc3339;

impl FormatTime for Rfc3339 {
    // A log line's stamp is wall-clock time by definition; the limiter never
    // reads it.
    #[allow(clippy::disallowed_methods)]
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write!(
            w,
            "{}",
            humantime::format_rfc3339_micros(std::time::SystemTime::now())
        )
    }
}

impl<T: FormatTime + Clone> JsonLines<T> {
    /// Lines stamped by `timer`.
    pub(crate) fn with_timer(timer: T) -> Self {
        let stock = format::format().json().with_timer(timer.clone());
        Self { timer, stock }
    }
}

impl<S, N, T> FormatEvent<S, N> for JsonLines<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
    T: FormatTime,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let in_span = event.parent().is_some() || (event.is_contextual() && ctx.lookup_current().is_some());
        if in_span || meta.fields().field("log.target").is_some() {
            return self.stock.format_event(ctx, w, event);
        }
        w.write_str("{\"timestamp\":\"")?;
        // RFC 3339: nothing in it needs escaping.
        self.timer.format_time(&mut w)?;
        w.write_str("\",\"level\":\"")?;
        w.write_str(meta.level().as_str())?;
        w.write_str("\",\"fields\":{")?;
        let mut fields = Fields {
            out: &mut w,
            first: true,
            state: Ok(()),
        };
        event.record(&mut fields);
        fields.state?;
        w.write_str("},\"target\":")?;
        string(&mut w, meta.target())?;
        w.write_str("}\n")
    }
}

/// Writes one event's fields as JSON object members, in the order they were
/// recorded (as the stock format's field map does).
struct Fields<'a, W> {
    out: &'a mut W,
    first: bool,
    state: fmt::Result,
}

impl<W: Write> Fields<'_, W> {
    /// Writes `"name":` then `value`, with the separating comma.
    fn member(&mut self, field: &Field, value: impl FnOnce(&mut W) -> fmt::Result) {
        if self.state.is_err() {
            return;
        }
        self.state = (|| {
            if !std::mem::take(&mut self.first) {
                self.out.write_char(',')?;
            }
            string(self.out, field.name())?;
            self.out.write_char(':')?;
            value(self.out)
        })();
    }
}

impl<W: Write> Visit for Fields<'_, W> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.member(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.member(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.member(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // serde_json's own rendering: shortest round trip, `null` when not finite.
        self.member(field, |w| match serde_json::Number::from_f64(value) {
            Some(n) => write!(w, "{n}"),
            None => w.write_str("null"),
        });
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.member(field, |w| string(w, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.member(field, |w| {
            w.write_char('"')?;
            write!(Escaped(w), "{value:?}")?;
            w.write_char('"')
        });
    }
}

/// Writes `s` as a JSON string.
fn string<W: Write + ?Sized>(w: &mut W, s: &str) -> fmt::Result {
    w.write_char('"')?;
    Escaped(w).write_str(s)?;
    w.write_char('"')
}

/// Escapes what passes through it as serde_json escapes a string's content:
/// `"` and `\`, and control characters (short forms where JSON has them).
struct Escaped<'a, W: ?Sized>(&'a mut W);

impl<W: Write + ?Sized> Write for Escaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Most values need no escape: one pass without an early exit (the
        // compiler checks many bytes at a time), then the whole at once.
        let plain = s
            .bytes()
            .fold(true, |ok, b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'));
        if plain {
            return self.0.write_str(s);
        }
        let mut start = 0;
        for (i, b) in s.bytes().enumerate() {
            let short = match b {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0x08 => "\\b",
                0x0c => "\\f",
                0..=0x1f => "",
                _ => continue,
            };
            self.0.write_str(&s[start..i])?;
            if short.is_empty() {
                write!(self.0, "\\u{b:04x}")?;
            } else {
                self.0.write_str(short)?;
            }
            start = i + 1;
        }
        self.0.write_str(&s[start..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::format::JsonFields;
    use tracing_subscriber::fmt::MakeWriter;

    /// A fixed instant, so both formatters stamp the same text.
    #[derive(Clone)]
    struct Fixed;

    impl FormatTime for Fixed {
        fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
            w.write_str("2026-12-02T11:00:00.123456Z")
        }
    }

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("sink").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Sink {
        type Writer = Sink;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    /// Events of every field kind, with text that needs escaping.
    fn events() {
        let err = io::Error::other("broken \"pipe\"\n");
        tracing::info!(target: "pressure::llm", request_id = "demo-1", level = 0u64, attempts = 2u64,
            status = 200u64, elapsed_ms = 182u64, "llm answer");
        tracing::warn!(target: "pressure::llm", request_id = "r\"2\\", error = "timeout",
            "llm request failed: {} after {} ms", "upstream \"x\"", 4000);
        tracing::info!(target: "pressure::access", negative = -42i64, yes = true, no = false,
            share = 0.25f64, whole = 1.0f64, big = 1e21f64, tiny = 1.5e-7f64, nan = f64::NAN,
            inf = f64::INFINITY, wide = 170141183460469231731687303715884105727i128,
            path = "/ä/ü\u{1}\u{1f}\u{7f}\t\r\u{8}\u{c}");
        tracing::error!(target: "pressure_gateway::x", shape = ?Some(("q\"", vec![1u8, 2])),
            shown = %"display \"text\"", error = &err as &(dyn std::error::Error + 'static));
        tracing::debug!("no fields but the message, with a line\nbreak");
        tracing::info!(target: "pressure::denial", message = "explicit message field", n = 3u64);
        let span = tracing::info_span!("outer", id = 7u64);
        span.in_scope(|| tracing::info!(target: "pressure::llm", inside = true, "in a span"));
    }

    fn capture(own: bool) -> String {
        let sink = Sink::default();
        let builder = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(sink.clone());
        if own {
            let subscriber = builder
                .fmt_fields(JsonFields::new())
                .event_format(JsonLines::with_timer(Fixed))
                .finish();
            tracing::subscriber::with_default(subscriber, events);
        } else {
            let subscriber = builder.json().with_timer(Fixed).finish();
            tracing::subscriber::with_default(subscriber, events);
        }
        let bytes = sink.0.lock().expect("sink").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    #[test]
    fn lines_are_byte_for_byte_the_stock_json_format() {
        let stock = capture(false);
        let own = capture(true);
        assert_eq!(stock.lines().count(), 7, "{stock}");
        for (a, b) in stock.lines().zip(own.lines()) {
            assert_eq!(a, b);
            serde_json::from_str::<serde_json::Value>(b).expect("valid JSON");
        }
        assert_eq!(stock, own);
        // The span line went through the stock formatter with its span.
        assert!(own.contains("\"span\":{\"id\":7,\"name\":\"outer\"}"), "{own}");
    }

    fn stamp(timer: &impl FormatTime) -> String {
        let mut out = String::new();
        timer.format_time(&mut Writer::new(&mut out)).expect("format");
        out
    }

    #[test]
    fn the_timestamp_is_the_stock_system_time_format() {
        use tracing_subscriber::fmt::time::SystemTime;
        // Taken a moment apart: equal to the second but for a second
        // boundary between the two, which a retry steps over.
        for _ in 0..5 {
            let stock = stamp(&SystemTime);
            let own = stamp(&Rfc3339);
            assert_eq!(own.len(), stock.len(), "{own} vs {stock}");
            assert_eq!(own.len(), "2026-12-02T11:00:00.123456Z".len(), "{own}");
            assert!(own.ends_with('Z') && own.as_bytes()[19] == b'.', "{own}");
            if own[..19] == stock[..19] {
                return;
            }
        }
        panic!("the two clocks never agreed to the second");
    }
}
