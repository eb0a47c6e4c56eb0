//! One HTTP/1.1 exchange on a kept plain-TCP upstream connection, run in
//! the request's own task.
//!
//! A routed request reaches the proxy whole (its body read under the body
//! limit), so sending it is one write of bytes known in advance, and the
//! answer needs no second task: the head is read and parsed (`httparse`,
//! the parser hyper uses) here, and the body streams from the connection
//! as the client's side reads it ([`UpstreamBody`]). That saves what
//! hyper's client connection costs per request: its task and the channel
//! to it, and the wake-ups between the two tasks.
//!
//! What hyper's connection does besides stays done: a response's framing
//! is read from its head (`Content-Length`, chunked, or to the close);
//! `1xx` answers before the final one are skipped; a connection goes back
//! to its pool only when its response was read whole, nothing more came
//! on it, and the upstream did not ask to close it; a response that cannot
//! be framed without guessing (two lengths, a length that is not a number)
//! is refused, and its connection closed. The response's hop-by-hop
//! headers are left out of its map as it is built. Upgrades, `https://` upstreams
//! and streamed request bodies keep hyper's connection (`pool.rs`).

use super::chunked::{Chunked, Step};
use super::exchange_error::ExchangeError;
use super::headers::{strip_hop_by_hop, Forwarding, HopRule};
use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::uri::PathAndQuery;
use http::{request, response, HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};
use http_body::{Frame, SizeHint};
use smallvec::SmallVec;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The most header fields a response head may have (hyper's default).
const MAX_HEADERS: usize = 100;
/// The largest response head.
const MAX_HEAD: usize = 64 * 1024;
/// A request body up to this size is written with its head, in one write.
const INLINE_BODY: usize = 16 * 1024;
/// Bytes made room for before a read.
const READ_SIZE: usize = 16 * 1024;

/// A kept upstream connection: its socket, what was read from it and not
/// yet given out, and the buffer the request heads are written in.
pub(crate) struct RawConn {
    io: TcpStream,
    buf: BytesMut,
    out: Vec<u8>,
}

/// How a response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (`HEAD`, `204`, `304`, `101`).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// The chunked coding.
    Chunked,
    /// Until the upstream closes the connection.
    Close,
}

/// A final response head, its framing and whether its connection may be
/// kept.
pub(crate) struct Head {
    parts: response::Parts,
    framing: Framing,
    keep: bool,
}

/// A failed exchange, and whether no byte of an answer came (then an
/// idempotent request may be sent again on another connection).
pub(crate) struct Failed {
    pub(crate) error: ExchangeError,
    pub(crate) unanswered: bool,
}

impl std::fmt::Debug for RawConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawConn")
            .field("peer", &self.io.peer_addr().ok())
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl RawConn {
    /// A connection over `io`, nothing read yet.
    pub(crate) fn new(io: TcpStream) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            out: Vec::new(),
        }
    }

    /// Whether it can take a request: the upstream has not closed it and
    /// sent nothing unasked. No system call while nothing arrived on it
    /// since the last read.
    pub(crate) fn is_open(&self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Sends the request (`parts` with its target in origin-form, the
    /// `forwarding` headers in place of its own, and its whole `body`) and
    /// reads the final response head.
    pub(crate) async fn exchange(
        &mut self,
        parts: &request::Parts,
        forwarding: &Forwarding,
        body: &Bytes,
    ) -> Result<Head, Failed> {
        let inline = body.len() <= INLINE_BODY;
        encode_request(&mut self.out, parts, forwarding, body, inline);
        let mut written = self.io.write_all(&self.out).await;
        if written.is_ok() && !inline {
            written = self.io.write_all(body).await;
        }
        if let Err(error) = written {
            return Err(Failed {
                error: ExchangeError::Io(error),
                unanswered: true,
            });
        }
        let head_request = parts.method == Method::HEAD;
        let mut answered = false;
        loop {
            let parsed = if self.buf.is_empty() {
                Ok(None)
            } else {
                parse_head(&mut self.buf, head_request)
            };
            match parsed {
                Ok(Some(head))
                    if head.parts.status.is_informational()
                        && head.parts.status != StatusCode::SWITCHING_PROTOCOLS => {}
                Ok(Some(head)) => return Ok(head),
                Ok(None) if self.buf.len() >= MAX_HEAD => {
                    return Err(Failed {
                        error: ExchangeError::BadResponse("the response head is too large".into()),
                        unanswered: false,
                    })
                }
                Ok(None) => match std::future::poll_fn(|cx| self.poll_fill(cx)).await {
                    Ok(0) => {
                        return Err(Failed {
                            error: ExchangeError::Io(closed_early()),
                            unanswered: !answered,
                        })
                    }
                    Ok(_) => answered = true,
                    Err(error) => {
                        return Err(Failed {
                            error: ExchangeError::Io(error),
                            unanswered: !answered,
                        })
                    }
                },
                Err(error) => {
                    return Err(Failed {
                        error,
                        unanswered: false,
                    })
                }
            }
        }
    }

    /// Reads what has arrived into the buffer: the count read, 0 at the
    /// upstream's close. Through the socket's `AsyncRead`, which forgets
    /// its readiness after a short read: the next checkout's probe then
    /// makes no system call.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            self.buf.reserve(READ_SIZE);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }
}

/// The error of a connection closed before its response was whole.
fn closed_early() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed before message completed",
    )
}

/// Writes the request head into `out` (and the body after it, `inline`):
/// the request line, the headers as they are but those `forwarding`
/// replaces (written after them) and `Content-Length`, which is the
/// body's (sent when there is a body, when the client sent one, or for a
/// method that carries a body).
fn encode_request(
    out: &mut Vec<u8>,
    parts: &request::Parts,
    forwarding: &Forwarding,
    body: &[u8],
    inline: bool,
) {
    out.clear();
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", PathAndQuery::as_str);
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut had_length = false;
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH {
            had_length = true;
            continue;
        }
        if forwarding.replaces(name) {
            continue;
        }
        crate::http::wire::write_header_line(out, name.as_str().as_bytes(), value.as_bytes());
    }
    forwarding.write(out);
    if !body.is_empty() || had_length || matches!(parts.method, Method::POST | Method::PUT | Method::PATCH) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if inline {
        out.extend_from_slice(body);
    }
}

/// The response head at the front of `buf`, taken from it; `None` while
/// it is not whole.
fn parse_head(buf: &mut BytesMut, head_request: bool) -> Result<Option<Head>, ExchangeError> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut parsed,
        buf,
        &mut slots,
    ) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => {
            return Err(ExchangeError::BadResponse(format!(
                "invalid response head: {error}"
            )))
        }
    };
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| ExchangeError::BadResponse("invalid HTTP status-code parsed".into()))?;
    let http11 = parsed.version == Some(1);
    let base = buf.as_ptr().addr();
    let mut fields: SmallVec<[(HeaderName, usize, usize); 16]> = SmallVec::new();
    let mut length: Option<u64> = None;
    let mut chunked = None;
    let mut close = !http11;
    let mut strip_after = false;
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| ExchangeError::BadResponse("invalid HTTP header parsed".into()))?;
        let value = field.value;
        if name == CONTENT_LENGTH {
            let this = content_length(value)?;
            if length.is_some_and(|known| known != this) {
                return Err(ExchangeError::BadResponse(
                    "two different Content-Length values".into(),
                ));
            }
            length = Some(this);
        } else if name == TRANSFER_ENCODING {
            let last = value.rsplit(|b| *b == b',').next().unwrap_or_default();
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name == CONNECTION {
            close |= value
                .split(|b| *b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
        // Hop-by-hop headers are not the client's: left out here rather
        // than stripped from the map afterwards.
        match HopRule::of(&name, value) {
            HopRule::Keep => {}
            HopRule::Drop => continue,
            HopRule::StripAfter => strip_after = true,
        }
        let start = value.as_ptr().addr() - base;
        fields.push((name, start, start + value.len()));
    }
    let head = buf.split_to(len).freeze();
    let mut headers = HeaderMap::with_capacity(fields.len());
    for (name, start, end) in fields {
        let value = HeaderValue::from_maybe_shared(head.slice(start..end))
            .map_err(|_| ExchangeError::BadResponse("invalid HTTP header parsed".into()))?;
        headers.append(name, value);
    }
    if strip_after {
        strip_hop_by_hop(&mut headers);
    }
    let framing = if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Empty
    } else {
        match (chunked, length) {
            // A length beside the coding is ignored, and the connection
            // not kept (RFC 9112 §6.3).
            (Some(true), Some(_)) => {
                close = true;
                Framing::Chunked
            }
            (Some(true), None) => Framing::Chunked,
            (Some(false), _) | (None, None) => {
                close = true;
                Framing::Close
            }
            (None, Some(length)) => Framing::Length(length),
        }
    };
    let (mut parts, ()) = Response::new(()).into_parts();
    parts.status = status;
    parts.version = Version::HTTP_11;
    parts.headers = headers;
    Ok(Some(Head {
        parts,
        framing,
        keep: !close && status != StatusCode::SWITCHING_PROTOCOLS,
    }))
}

/// A `Content-Length` value: digits, or a list of the same digits.
fn content_length(value: &[u8]) -> Result<u64, ExchangeError> {
    let bad = || ExchangeError::BadResponse("invalid Content-Length".into());
    let mut length = None;
    for item in value.split(|b| *b == b',') {
        let this = crate::http::wire::decimal(item.trim_ascii()).ok_or_else(bad)?;
        if length.is_some_and(|known| known != this) {
            return Err(bad());
        }
        length = Some(this);
    }
    length.ok_or_else(bad)
}

/// Where a kept connection goes once its response is read whole: the
/// pool's idle connections of its origin (`pool.rs`), named here so the
/// exchange needs nothing of the pool.
pub(crate) trait Home: Send + Unpin + 'static {
    /// Puts `conn` back among the idle connections it came from.
    fn put_back(self, conn: RawConn);
}

/// The response to give the client: `head` with its body, whole when it
/// came with the head (the connection then goes home at once), streamed
/// from `conn` otherwise.
pub(crate) fn respond<H: Home>(mut conn: RawConn, head: Head, home: impl FnOnce() -> H) -> Response<Body> {
    let Head { parts, framing, keep } = head;
    let buffered = conn.buf.len() as u64;
    let body = match framing {
        Framing::Empty => {
            settle(conn, keep, home);
            Body::empty()
        }
        Framing::Length(0) => {
            settle(conn, keep, home);
            Body::empty()
        }
        Framing::Length(n) if n <= buffered => {
            let whole = conn
                .buf
                .split_to(usize::try_from(n).unwrap_or(usize::MAX))
                .freeze();
            settle(conn, keep, home);
            Body::from(whole)
        }
        Framing::Length(n) => Body::new(UpstreamBody::new(conn, Streaming::Length(n), keep.then(home))),
        Framing::Chunked => Body::new(UpstreamBody::new(
            conn,
            Streaming::Chunked(Chunked::default()),
            keep.then(home),
        )),
        Framing::Close => Body::new(UpstreamBody::<H>::new(conn, Streaming::Close, None)),
    };
    Response::from_parts(parts, body)
}

/// Puts a connection whose response was read whole back in its pool,
/// unless it is not to be kept or the upstream sent more than it was
/// asked (then it is closed).
fn settle<H: Home>(conn: RawConn, keep: bool, home: impl FnOnce() -> H) {
    if keep && conn.buf.is_empty() {
        home().put_back(conn);
    }
}

/// How much of a streamed body is left.
#[derive(Debug)]
enum Streaming {
    Length(u64),
    Chunked(Chunked),
    Close,
}

/// A response body read from its upstream connection as the client's
/// side asks for it. Read whole, the connection goes home (when it may be
/// kept); dropped before, the connection is closed.
#[derive(Debug)]
pub(crate) struct UpstreamBody<H> {
    conn: Option<RawConn>,
    left: Streaming,
    home: Option<H>,
}

impl<H: Home> UpstreamBody<H> {
    fn new(conn: RawConn, left: Streaming, home: Option<H>) -> Self {
        Self {
            conn: Some(conn),
            left,
            home,
        }
    }

    /// The body is whole: the connection goes home if it may.
    fn finish(&mut self) {
        if let (Some(conn), Some(home)) = (self.conn.take(), self.home.take()) {
            if conn.buf.is_empty() {
                home.put_back(conn);
            }
        }
    }

    /// The body's end, or its failure, and the connection closed.
    fn fail(&mut self, error: io::Error) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.conn = None;
        Poll::Ready(Some(Err(error)))
    }
}

impl<H: Home> http_body::Body for UpstreamBody<H> {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match &mut this.left {
                Streaming::Length(left) if !conn.buf.is_empty() => {
                    let n = usize::try_from(*left).map_or(conn.buf.len(), |left| left.min(conn.buf.len()));
                    let data = conn.buf.split_to(n).freeze();
                    *left -= n as u64;
                    if *left == 0 {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Streaming::Length(_) => {}
                Streaming::Chunked(chunked) => match chunked.decode(&mut conn.buf) {
                    Ok(Step::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Step::Done) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Step::More) => {}
                    Err(error) => return this.fail(io::Error::new(io::ErrorKind::InvalidData, error)),
                },
                Streaming::Close if !conn.buf.is_empty() => {
                    return Poll::Ready(Some(Ok(Frame::data(conn.buf.split().freeze()))));
                }
                Streaming::Close => {}
            }
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(this.left, Streaming::Close) => {
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(closed_early()),
                Ok(_) => {}
                Err(error) => return this.fail(error),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() || matches!(self.left, Streaming::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.left {
            Streaming::Length(left) => SizeHint::with_exact(left),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(input: &[u8], head_request: bool) -> Result<Option<(Head, BytesMut)>, ExchangeError> {
        let mut buf = BytesMut::from(input);
        Ok(parse_head(&mut buf, head_request)?.map(|h| (h, buf)))
    }

    fn framing(input: &str) -> (Framing, bool) {
        let (h, _) = head(input.as_bytes(), false).expect("valid").expect("whole");
        (h.framing, h.keep)
    }

    #[test]
    fn a_head_is_parsed_into_parts_and_the_rest_stays() {
        let (h, rest) = head(
            b"HTTP/1.1 201 Created\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 3\r\n\r\nabcNEXT",
            false,
        )
        .expect("valid")
        .expect("whole");
        assert_eq!(h.parts.status, StatusCode::CREATED);
        let values: Vec<_> = h.parts.headers.get_all("x-a").iter().collect();
        assert_eq!(values, ["1", "2"]);
        assert_eq!(h.framing, Framing::Length(3));
        assert!(h.keep);
        assert_eq!(&rest[..], b"abcNEXT");
        assert!(head(b"HTTP/1.1 200 OK\r\nContent-Le", false)
            .expect("valid so far")
            .is_none());
    }

    /// The map the exchange builds is the full head's map with its
    /// hop-by-hop headers stripped (what hyper's response got).
    #[test]
    fn hop_by_hop_headers_are_left_out_as_the_full_strip_would() {
        let heads: [&[(&str, &str)]; 7] = [
            &[
                ("connection", "keep-alive"),
                ("keep-alive", "timeout=5"),
                ("x-a", "1"),
            ],
            &[
                ("Connection", "Keep-Alive, x-private"),
                ("x-private", "1"),
                ("x-a", "2"),
            ],
            &[("connection", "close"), ("close", "named"), ("x-a", "3")],
            &[
                ("x-private", "1"),
                ("connection", "keep-alive"),
                ("connection", "x-private"),
            ],
            &[
                ("transfer-encoding", "chunked"),
                ("te", "trailers"),
                ("trailer", "x-t"),
                ("upgrade", "h2c"),
                ("proxy-connection", "keep-alive"),
                ("proxy-authenticate", "Basic"),
                ("x-a", "4"),
            ],
            &[("connection", " , keep-alive ,"), ("x-a", "5"), ("x-a", "6")],
            &[("x-a", "7")],
        ];
        for fields in heads {
            let mut text = String::from("HTTP/1.1 200 OK\r\n");
            let mut full = HeaderMap::new();
            for (name, value) in fields {
                text.push_str(&format!("{name}: {value}\r\n"));
                full.append(
                    HeaderName::from_bytes(name.as_bytes()).expect("name"),
                    HeaderValue::from_str(value).expect("value"),
                );
            }
            text.push_str("\r\n");
            strip_hop_by_hop(&mut full);
            let (h, _) = head(text.as_bytes(), false).expect("valid").expect("whole");
            assert_eq!(h.parts.headers, full, "{fields:?}");
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
            (Framing::Length(5), true)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n"),
            (Framing::Length(5), true)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"),
            (Framing::Chunked, true)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"),
            (Framing::Chunked, false)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            (Framing::Close, false)
        );
        assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n"), (Framing::Close, false));
        assert_eq!(
            framing("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"),
            (Framing::Empty, true)
        );
        assert_eq!(
            framing("HTTP/1.1 304 Not Modified\r\n\r\n"),
            (Framing::Empty, true)
        );
        assert_eq!(
            framing("HTTP/1.1 101 Switching Protocols\r\n\r\n"),
            (Framing::Empty, false)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n"),
            (Framing::Length(0), false)
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n"),
            (Framing::Length(1), false)
        );
        let (h, _) = head(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
            .expect("valid")
            .expect("whole");
        assert_eq!(h.framing, Framing::Empty, "the answer to HEAD has no body");
        assert_eq!(h.parts.headers[CONTENT_LENGTH], "9");
    }

    #[test]
    fn heads_that_cannot_be_framed_are_refused() {
        for bad in [
            "NOT HTTP AT ALL\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            "HTTP/1.1 099 Low\r\n\r\n",
        ] {
            assert!(
                matches!(head(bad.as_bytes(), false), Err(ExchangeError::BadResponse(_))),
                "{bad:?}"
            );
        }
        let mut many = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..=MAX_HEADERS {
            many.push_str(&format!("x-{i}: 1\r\n"));
        }
        many.push_str("\r\n");
        assert!(matches!(
            head(many.as_bytes(), false),
            Err(ExchangeError::BadResponse(_))
        ));
    }

    #[test]
    fn a_request_is_written_with_its_length_and_forwarding() {
        let req = |method: Method, length: Option<&str>| {
            let mut b = http::Request::builder()
                .method(method)
                .uri("/a?b=1")
                .header("host", "gw.example")
                .header("x-forwarded-proto", "planted");
            if let Some(l) = length {
                b = b.header("content-length", l);
            }
            b.body(()).expect("request").into_parts().0
        };
        let upstream = HeaderValue::from_static("up:80");
        let write = |out: &mut Vec<u8>, parts: &request::Parts, body: &[u8], inline: bool| {
            let forwarding = Forwarding::of(&parts.headers, None, None, &upstream, false);
            encode_request(out, parts, &forwarding, body, inline);
        };
        let head = "host: up:80\r\nx-forwarded-proto: http\r\n";
        let mut out = Vec::new();
        write(&mut out, &req(Method::GET, None), b"", true);
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("GET /a?b=1 HTTP/1.1\r\n{head}\r\n")
        );
        write(&mut out, &req(Method::GET, Some("0")), b"", true);
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("GET /a?b=1 HTTP/1.1\r\n{head}content-length: 0\r\n\r\n")
        );
        write(&mut out, &req(Method::POST, None), b"", true);
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("POST /a?b=1 HTTP/1.1\r\n{head}content-length: 0\r\n\r\n")
        );
        write(&mut out, &req(Method::PUT, Some("999")), b"hello", true);
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("PUT /a?b=1 HTTP/1.1\r\n{head}content-length: 5\r\n\r\nhello")
        );
        write(&mut out, &req(Method::PUT, None), b"hello", false);
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("PUT /a?b=1 HTTP/1.1\r\n{head}content-length: 5\r\n\r\n")
        );
    }
}
