//! [`SseParser`]: server-sent events split out of a byte stream, for the
//! chat-completions stream and the translation of Anthropic's.
//!
//! Lines end with `\n` (a `\r` before it is dropped); `data:` lines of one
//! event are joined with `\n`, `event:` names it, a line starting with `:`
//! is a comment (a keep-alive), an empty line dispatches the event. The
//! bytes of an unfinished line are kept for the next chunk.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;

use super::body::{BodyError, BodyStream};

/// The chat-completions SSE text of an internal chunk carrying one
/// provider event verbatim ([`NATIVE_FIELD`](super::types::NATIVE_FIELD)):
/// no choices, so the chat path sees nothing in it; an ingress of the
/// provider's own dialect passes the event on unchanged.
pub(crate) fn native_event_chunk(name: Option<&str>, data: &str) -> String {
    // Written directly (the name and data escaped as JSON strings): one
    // event's copy costs one pass over its bytes, no JSON tree.
    let quoted = |t: &str| serde_json::to_string(t).unwrap_or_else(|_| "\"\"".to_owned());
    let name = name.map_or_else(|| "null".to_owned(), quoted);
    format!(
        "data: {{\"id\":\"\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"\",\"choices\":[],\"{}\":{{\"event\":{name},\"data\":{}}}}}\n\n",
        super::types::NATIVE_FIELD,
        quoted(data)
    )
}

/// A provider's events, one at a time and in order, as the
/// chat-completions SSE text they stand for (empty when nothing).
pub(crate) trait EventTranslate: Send + 'static {
    /// The SSE text for one event (`event:` name and `data:`).
    fn event(&mut self, name: Option<&str>, data: &str) -> String;
}

/// A response body of a provider's events, translated on the fly by `T`:
/// every body chunk from the provider yields one translated chunk (possibly
/// empty), so the read timeout between chunks measures the provider's
/// silence, not the translation's.
struct Translated<T> {
    body: BodyStream,
    parser: SseParser,
    translator: T,
    ended: bool,
}

impl<T: EventTranslate> Translated<T> {
    /// The chat-completions SSE text of `events`.
    fn translate(&mut self, events: Vec<SseEvent>) -> String {
        events
            .iter()
            .map(|(name, data)| self.translator.event(name.as_deref(), data))
            .collect()
    }
}

impl<T: EventTranslate + Unpin> Stream for Translated<T> {
    type Item = Result<Bytes, BodyError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        match this.body.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(bytes))) => {
                let events = this.parser.feed(&bytes);
                let out = this.translate(events);
                Poll::Ready(Some(Ok(Bytes::from(out))))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => {
                this.ended = true;
                let events = this.parser.finish();
                let out = this.translate(events);
                if out.is_empty() {
                    Poll::Ready(None)
                } else {
                    Poll::Ready(Some(Ok(Bytes::from(out))))
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// `body` (a provider's events) as chat-completions events, by `translator`.
pub(crate) fn translate_body_with<T: EventTranslate + Unpin>(body: BodyStream, translator: T) -> BodyStream {
    Box::pin(Translated {
        body,
        parser: SseParser::default(),
        translator,
        ended: false,
    })
}

/// One event: its `event:` name, if any, and its data.
pub(crate) type SseEvent = (Option<String>, String);

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    data: Option<String>,
    event: Option<String>,
}

impl SseParser {
    /// The events completed by `bytes`.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos;
            let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
            self.line(line.strip_suffix('\r').unwrap_or(&line), &mut events);
            start = end + 1;
        }
        self.buf.drain(..start);
        events
    }

    /// The body ended: the events of a last line without a newline and of
    /// a pending event.
    pub(crate) fn finish(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        if !self.buf.is_empty() {
            let line = String::from_utf8_lossy(&self.buf).into_owned();
            self.buf.clear();
            self.line(line.trim_end_matches('\r'), &mut events);
        }
        self.dispatch(&mut events);
        events
    }

    fn line(&mut self, line: &str, events: &mut Vec<SseEvent>) {
        if line.is_empty() {
            return self.dispatch(events);
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let name = self.event.take();
        if let Some(data) = self.data.take() {
            events.push((name, data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_span_chunks_and_comments_are_skipped() {
        let mut p = SseParser::default();
        assert!(p.feed(b": keep-alive\nevent: ping\nda").is_empty());
        let got = p.feed(b"ta: {}\r\n\ndata: a\ndata: b\n\ndata: tail");
        assert_eq!(
            got,
            vec![
                (Some("ping".to_owned()), "{}".to_owned()),
                (None, "a\nb".to_owned())
            ]
        );
        assert_eq!(p.finish(), vec![(None, "tail".to_owned())]);
    }
}
