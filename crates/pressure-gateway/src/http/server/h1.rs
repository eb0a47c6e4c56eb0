//! The common HTTP/1.1 request served in place: one buffer kept per
//! connection, one parse of each head, the response head and a small body
//! written in one system call. What hyper's connection machinery (its
//! dispatcher, state machine and encoders) costs per request is most of what
//! the gateway spent beyond nginx on a proxied request (issue 22).
//!
//! A plaintext connection starts here. This module serves a request only
//! when it is sure to answer it as hyper would: HTTP/1.1, a method other
//! than `CONNECT`, no `Transfer-Encoding`, `Expect` or `Upgrade`, at most
//! one valid `Content-Length` whose body is already read whole. Anything
//! else — HTTP/2's preface, HTTP/1.0, a chunked or still-arriving body, an
//! upgrade, a head that does not parse or grows past `maxHeaderBytes` —
//! hands the connection, with every byte not yet consumed, to hyper for the
//! rest of its life ([`Ended::HandOff`]), so hyper answers it exactly as
//! before (its `400`, `431`, `414`, its `100 Continue`, its upgrades).
//!
//! Responses are framed as hyper frames them: `content-length` when the
//! body's size is known, chunked otherwise, no body for `HEAD`, `1xx`,
//! `204` and `304`; a `date` header unless the response has one;
//! `connection: close` when the connection ends after it (the client asked,
//! or the server is stopping). A response body that fails mid-way, or ends
//! short of its `content-length`, drops the connection, as hyper does.

use super::ConnService;
use super::HttpService;
use crate::http::wire::write_header_line;
use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use std::cell::RefCell;
use std::io::Write as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

/// Headers one request may have (hyper's default bound too).
const MAX_HEADERS: usize = 100;
/// A body frame at most this large is copied behind the head (one write);
/// a larger one is written on its own.
const COALESCE: usize = 16 * 1024;
/// hyper's bound on a request target; a longer one gets its `414`.
const MAX_URI_LEN: usize = (u16::MAX - 1) as usize;

/// How serving in place ended.
pub(super) enum Ended<I> {
    /// The connection is done: closed by either side, failed, or drained.
    Closed,
    /// hyper serves the rest: the socket, and the bytes read from it and
    /// not consumed, which hyper must read first.
    HandOff(I, Bytes),
}

/// Serves `io`'s requests with `svc` until the connection ends or a request
/// needs hyper (module docs). `stop` turning `true` closes the connection
/// between requests, after the one in flight (answered with
/// `connection: close`). The end of the connection while a request is in
/// flight drops that request.
pub(super) async fn serve<I, S>(
    mut io: I,
    svc: &ConnService<S>,
    stop: &mut watch::Receiver<bool>,
    max_head: usize,
) -> Ended<I>
where
    I: AsyncRead + AsyncWrite + Unpin,
    S: HttpService,
{
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(4 * 1024);
    let mut offsets = Offsets::with_capacity(32);
    // The last response's header map, cleared: the next request's (as
    // hyper does), so a request allocates no map.
    let mut spare: Option<HeaderMap> = None;
    let mut stopping = *stop.borrow();
    loop {
        // The next request's head, whole.
        let head = loop {
            if !buf.is_empty() {
                match parse(&buf, max_head, &mut offsets) {
                    Parsed::Head(h) => break h,
                    Parsed::Partial => {}
                    Parsed::Hyper => return hand_off(io, buf),
                }
            }
            if buf.is_empty() && stopping {
                return Ended::Closed;
            }
            buf.reserve(4 * 1024);
            let read = if stopping || !buf.is_empty() {
                io.read_buf(&mut buf).await
            } else {
                tokio::select! {
                    biased;
                    r = io.read_buf(&mut buf) => r,
                    _ = stop.changed() => {
                        stopping = true;
                        continue;
                    }
                }
            };
            match read {
                Ok(0) if buf.is_empty() => return Ended::Closed,
                // A partial head and the end: hyper's to answer.
                Ok(0) => return hand_off(io, buf),
                Ok(_) => {}
                Err(_) => return Ended::Closed,
            }
        };
        let raw = buf.split_to(head.len).freeze();
        let (req, close) = match head.request(&raw, &offsets, &mut spare, &mut buf) {
            Some(r) => r,
            // A target or header `http` refuses where httparse did not:
            // hyper's answer, from the head's first byte.
            None => {
                let mut all = BytesMut::with_capacity(raw.len() + buf.len());
                all.extend_from_slice(&raw);
                all.extend_from_slice(&buf);
                return hand_off(io, all);
            }
        };
        let is_head = req.method() == Method::HEAD;
        // While the answer is prepared the socket is watched: a client
        // that goes away drops the request, and with it its slots and its
        // upstream exchange (as hyper does). Pipelined bytes are kept.
        let answer = svc.call_body(req);
        tokio::pin!(answer);
        let answered = loop {
            if buf.len() >= max_head {
                break answer.as_mut().await;
            }
            buf.reserve(4 * 1024);
            tokio::select! {
                biased;
                r = answer.as_mut() => break r,
                read = io.read_buf(&mut buf) => match read {
                    Ok(0) | Err(_) => return Ended::Closed,
                    Ok(_) => {}
                },
            }
        };
        let resp: Response<Body> = match answered {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let close = close || stopping || *stop.borrow();
        if !write_response(&mut io, &mut out, resp, is_head, close, &mut spare).await || close {
            let _ = io.shutdown().await;
            return Ended::Closed;
        }
        stopping = *stop.borrow();
    }
}

/// hyper takes the connection with what is buffered.
fn hand_off<I>(io: I, buf: BytesMut) -> Ended<I> {
    Ended::HandOff(io, buf.freeze())
}

/// What a look at the buffer found.
enum Parsed {
    /// A whole head this module serves.
    Head(Head),
    /// Not a whole head yet.
    Partial,
    /// hyper's to serve.
    Hyper,
}

/// Where a part of the head is: its first byte and the one after its last.
type Span = (u32, u32);

/// Each header's name and value; one list per connection, reused.
type Offsets = Vec<(Span, Span)>;

/// A parsed head: where its parts are in the buffer, what it asks.
struct Head {
    /// The head's length, its blank line included.
    len: usize,
    method: Method,
    path: Span,
    /// The body's length (already in the buffer behind the head).
    body: usize,
    /// The client asked to close after this request.
    close: bool,
}

/// Looks at `buf` for a whole head; its headers' places go to `headers`.
fn parse(buf: &[u8], max_head: usize, headers: &mut Offsets) -> Parsed {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Partial) if buf.len() < max_head => return Parsed::Partial,
        // Too long, too many headers, malformed: hyper's answer.
        _ => return Parsed::Hyper,
    };
    if req.version != Some(1) {
        return Parsed::Hyper;
    }
    let (Some(method), Some(path)) = (req.method, req.path) else {
        return Parsed::Hyper;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Hyper;
    };
    if method == Method::CONNECT || path.is_empty() || path.len() > MAX_URI_LEN {
        return Parsed::Hyper;
    }
    let base = buf.as_ptr() as usize;
    // Within the head, which `max_head` bounds; `u32` keeps the list small.
    let at = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        let start = u32::try_from(start).unwrap_or(u32::MAX);
        (
            start,
            start.saturating_add(u32::try_from(s.len()).unwrap_or(u32::MAX)),
        )
    };
    let mut body = None;
    let mut close = false;
    headers.clear();
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        // The names that decide, told apart by length first.
        let is = |wanted: &[u8]| name.eq_ignore_ascii_case(wanted);
        match name.len() {
            17 if is(b"transfer-encoding") => return Parsed::Hyper,
            6 if is(b"expect") => return Parsed::Hyper,
            7 if is(b"upgrade") => return Parsed::Hyper,
            14 if is(b"content-length") => match (body, content_length(h.value)) {
                (None, Some(n)) => body = Some(n),
                _ => return Parsed::Hyper,
            },
            10 if is(b"connection") => {
                for token in h.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        return Parsed::Hyper;
                    }
                }
            }
            _ => {}
        }
        headers.push((at(name), at(h.value)));
    }
    // A body not read whole yet is hyper's to stream.
    let body = match usize::try_from(body.unwrap_or(0)) {
        Ok(b) if buf.len() - len >= b => b,
        _ => return Parsed::Hyper,
    };
    Parsed::Head(Head {
        len,
        method,
        path: at(path.as_bytes()),
        body,
        close,
    })
}

/// A `Content-Length` value as hyper accepts it: digits only.
fn content_length(v: &[u8]) -> Option<u64> {
    crate::http::wire::decimal(v)
}

impl Head {
    /// The request, its parts sharing `head`'s bytes, its headers in the
    /// map `spare` holds (or a new one); its body taken from the front of
    /// `rest`; `true` when the connection closes after it. `None`, with
    /// nothing taken, when `http` refuses its target or a header that
    /// httparse let through.
    fn request(
        self,
        head: &Bytes,
        headers: &Offsets,
        spare: &mut Option<HeaderMap>,
        rest: &mut BytesMut,
    ) -> Option<(Request<Body>, bool)> {
        let range = |(a, b): Span| a as usize..b as usize;
        let uri = Uri::from_maybe_shared(head.slice(range(self.path))).ok()?;
        let mut map = spare.take().unwrap_or_default();
        map.reserve(headers.len());
        for &(name, value) in headers {
            match (
                HeaderName::from_bytes(&head[range(name)]),
                HeaderValue::from_maybe_shared(head.slice(range(value))),
            ) {
                (Ok(name), Ok(value)) => {
                    map.append(name, value);
                }
                _ => {
                    map.clear();
                    *spare = Some(map);
                    return None;
                }
            }
        }
        let body = if self.body == 0 {
            Body::empty()
        } else {
            Body::from(rest.split_to(self.body).freeze())
        };
        let mut req = Request::new(body);
        *req.method_mut() = self.method;
        *req.version_mut() = Version::HTTP_11;
        *req.uri_mut() = uri;
        *req.headers_mut() = map;
        Some((req, self.close))
    }
}

/// Writes `resp` on `io` (module docs for the framing), its header map left
/// in `spare`, cleared; `false` when the connection cannot go on (a write
/// failed, the body failed or came short).
async fn write_response<I: AsyncWrite + Unpin>(
    io: &mut I,
    out: &mut Vec<u8>,
    resp: Response<Body>,
    is_head: bool,
    close: bool,
    spare: &mut Option<HeaderMap>,
) -> bool {
    let (parts, mut body) = resp.into_parts();
    let framing = write_head(out, parts, body.size_hint().exact(), is_head, close, spare);
    // What a length-framed body has left to send; `None` when chunked.
    let mut left = match framing {
        Framing::None => {
            drop(body);
            return io.write_all(out).await.is_ok();
        }
        Framing::Length(n) => Some(n),
        Framing::Chunked => None,
    };
    loop {
        if body.is_end_stream() {
            break;
        }
        // A frame that is ready joins the bytes already waiting; otherwise
        // those go out before waiting for it.
        let next = match body.frame().now_or_never() {
            Some(f) => f,
            None => {
                if !out.is_empty() {
                    if io.write_all(out).await.is_err() {
                        return false;
                    }
                    out.clear();
                }
                body.frame().await
            }
        };
        let mut data = match next {
            None => break,
            Some(Err(_)) => return false,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(d) => d,
                // Trailers: not sent on HTTP/1.1 (as hyper, unasked).
                Err(_) => continue,
            },
        };
        if data.is_empty() {
            continue;
        }
        match &mut left {
            Some(left) => {
                let n = u64::try_from(data.len()).unwrap_or(u64::MAX);
                if n > *left {
                    // More than the length promised: the connection
                    // cannot carry on.
                    data.truncate(usize::try_from(*left).unwrap_or(0));
                    let _ = io.write_all(out).await;
                    let _ = io.write_all(&data).await;
                    return false;
                }
                *left -= n;
            }
            None => {
                let _ = write!(out, "{:x}\r\n", data.len());
            }
        }
        if data.len() <= COALESCE {
            out.extend_from_slice(&data);
        } else {
            if io.write_all(out).await.is_err() {
                return false;
            }
            out.clear();
            if io.write_all(&data).await.is_err() {
                return false;
            }
        }
        if left.is_none() {
            out.extend_from_slice(b"\r\n");
        }
    }
    drop(body);
    match left {
        None => out.extend_from_slice(b"0\r\n\r\n"),
        Some(0) => {}
        Some(_) => {
            // The body ended short of its length.
            let _ = io.write_all(out).await;
            return false;
        }
    }
    out.is_empty() || io.write_all(out).await.is_ok()
}

/// Writes the response head into `out` (cleared first): the status line,
/// the service's headers but its framing ones, then ours (the length or
/// chunked, `date`, `connection: close` when `close`); the header map goes
/// to `spare`, cleared. `exact` is the body's exact size when known.
/// Answers how the body is framed.
fn write_head(
    out: &mut Vec<u8>,
    parts: http::response::Parts,
    exact: Option<u64>,
    is_head: bool,
    close: bool,
    spare: &mut Option<HeaderMap>,
) -> Framing {
    let status = parts.status;
    let bodiless = is_head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    // hyper's rules: no length on 1xx and 204; a length given by the
    // service is written as given; else the body's own size, or chunked.
    let may_have_length = !(status.is_informational() || status == StatusCode::NO_CONTENT);
    out.clear();
    status_line(out, status, &parts.extensions);
    let mut declared = None;
    let mut has_date = false;
    let mut has_connection = false;
    for (name, value) in &parts.headers {
        if *name == header::CONTENT_LENGTH {
            match content_length(value.as_bytes()) {
                Some(n) if may_have_length && declared.is_none() => declared = Some(n),
                // Unreadable, repeated, or not allowed here.
                _ => continue,
            }
        } else if *name == header::TRANSFER_ENCODING {
            // The framing is ours.
            continue;
        } else if *name == header::DATE {
            has_date = true;
        } else if *name == header::CONNECTION {
            has_connection = true;
        }
        write_header_line(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let mut headers = parts.headers;
    headers.clear();
    *spare = Some(headers);
    // How the body is framed: a length to count down, or chunked.
    let framing = match (bodiless, declared, exact) {
        (true, None, Some(n)) if is_head && n > 0 && status != StatusCode::NOT_MODIFIED => {
            length_line(out, n);
            Framing::None
        }
        (true, _, _) => Framing::None,
        (false, Some(n), _) => Framing::Length(n),
        (false, None, Some(n)) => {
            length_line(out, n);
            Framing::Length(n)
        }
        (false, None, None) => {
            write_header_line(out, b"transfer-encoding", b"chunked");
            Framing::Chunked
        }
    };
    if !has_date {
        DATE.with(|d| write_header_line(out, b"date", d.borrow_mut().now()));
    }
    if close && !has_connection {
        write_header_line(out, b"connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

/// How a response body is framed on the wire.
enum Framing {
    /// No body.
    None,
    /// This many bytes.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
}

fn status_line(out: &mut Vec<u8>, status: StatusCode, ext: &http::Extensions) {
    let custom = ext.get::<hyper::ext::ReasonPhrase>();
    if status == StatusCode::OK && custom.is_none() {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    match custom {
        Some(reason) => out.extend_from_slice(reason.as_bytes()),
        None => out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
}

fn length_line(out: &mut Vec<u8>, n: u64) {
    let mut digits = itoa::Buffer::new();
    write_header_line(out, b"content-length", digits.format(n).as_bytes());
}

thread_local! {
    /// This thread's `date` value, formatted once a second.
    static DATE: RefCell<CachedDate> = RefCell::new(CachedDate::default());
}

/// The `date` header's value of the current second.
#[derive(Default)]
struct CachedDate {
    second: u64,
    value: Vec<u8>,
}

impl CachedDate {
    fn now(&mut self) -> &[u8] {
        // The wall clock, for the `date` header only (as hyper reads it).
        #[allow(clippy::disallowed_methods)]
        let now = std::time::SystemTime::now();
        let second = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if second != self.second || self.value.is_empty() {
            self.second = second;
            self.value = httpdate::fmt_http_date(now).into_bytes();
        }
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &[u8]) -> Parsed {
        parse(raw, 64 * 1024, &mut Vec::new())
    }

    #[test]
    fn a_plain_request_is_served_in_place() {
        let mut offsets = Vec::new();
        let raw = b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let Parsed::Head(h) = parse(raw, 1024, &mut offsets) else {
            panic!("served in place");
        };
        assert_eq!(h.method, Method::GET);
        assert!(h.close);
        assert_eq!(h.body, 0);
        let raw = Bytes::from_static(raw);
        let len = h.len;
        let (req, close) = h
            .request(&raw.slice(..len), &offsets, &mut None, &mut BytesMut::new())
            .expect("a request");
        assert!(close);
        assert_eq!(req.uri(), "/a?b=1");
        assert_eq!(req.headers()["host"], "x");
    }

    #[test]
    fn a_whole_body_is_served_in_place_a_partial_one_is_not() {
        let raw = b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
        let Parsed::Head(h) = head(raw) else {
            panic!("whole body")
        };
        assert_eq!(h.body, 3);
        assert!(matches!(head(&raw[..raw.len() - 1]), Parsed::Hyper));
    }

    #[test]
    fn what_hyper_must_answer_is_handed_over() {
        for raw in [
            &b"GET / HTTP/1.0\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na",
            b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na",
            b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
            b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"CONNECT x:443 HTTP/1.1\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
        ] {
            assert!(
                matches!(head(raw), Parsed::Hyper),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(matches!(head(b"GET / HTTP/1.1\r\nHost"), Parsed::Partial));
        // Longer than the bound, still partial: hyper's 431.
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost: xxxxxxxx", 16, &mut Vec::new()),
            Parsed::Hyper
        ));
    }

    /// A connection service over `router`, as the server makes one.
    fn conn_service(router: axum::Router) -> ConnService<axum::Router> {
        ConnService {
            inner: parking_lot::Mutex::new(router),
            peer: ([127, 0, 0, 1], 1).into(),
            activity: None,
            tls: false,
        }
    }

    #[tokio::test]
    async fn requests_are_answered_in_place_until_one_is_handed_over_byte_exact() {
        let router = axum::Router::new().route("/x", axum::routing::get(|| async { "in place" }));
        let svc = conn_service(router);
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let chunked = &b"POST /y HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..];
        let mut sent = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET /x HTTP/1.1\r\n\r\n".to_vec();
        sent.extend_from_slice(chunked);
        client.write_all(&sent).await.expect("write");
        let (_tx, mut stop) = watch::channel(false);
        let Ended::HandOff(_, unread) = serve(server, &svc, &mut stop, 64 * 1024).await else {
            panic!("the chunked request is hyper's");
        };
        // hyper gets exactly the bytes of the request it must serve.
        assert_eq!(&unread[..], chunked);
        let mut answers = vec![0u8; 4096];
        let n = client.read(&mut answers).await.expect("read");
        let text = String::from_utf8_lossy(&answers[..n]);
        assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{text}");
        assert_eq!(text.matches("content-length: 8\r\n").count(), 2, "{text}");
        assert_eq!(text.matches("\r\n\r\nin place").count(), 2, "{text}");
    }

    #[tokio::test]
    async fn a_stop_closes_an_idle_connection_and_the_end_of_the_client_drops_it() {
        let svc = conn_service(axum::Router::new());
        let (client, server) = tokio::io::duplex(1024);
        let (tx, mut stop) = watch::channel(false);
        let served = serve(server, &svc, &mut stop, 1024);
        tx.send(true).expect("stop");
        assert!(matches!(served.await, Ended::Closed));
        drop(client);
        let (client, server) = tokio::io::duplex(1024);
        drop(client);
        let (_tx, mut stop) = watch::channel(false);
        assert!(matches!(
            serve(server, &svc, &mut stop, 1024).await,
            Ended::Closed
        ));
    }

    #[test]
    fn a_target_http_refuses_is_left_to_hyper_with_nothing_taken() {
        // Every visible byte in a target: whatever httparse lets through
        // and `Uri` refuses must not become a request (hyper answers it).
        let mut refused = 0;
        for b in 0x21u8..0x7f {
            let mut raw = b"GET /a".to_vec();
            raw.push(b);
            raw.extend_from_slice(b"b HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut offsets = Vec::new();
            let Parsed::Head(h) = parse(&raw, 1024, &mut offsets) else {
                continue;
            };
            let len = h.len;
            let head = Bytes::from(raw).slice(..len);
            let mut rest = BytesMut::from(&b"next"[..]);
            let ok = Uri::from_maybe_shared(head.slice(4..len - 22)).is_ok();
            match h.request(&head, &offsets, &mut None, &mut rest) {
                Some((req, _)) => assert!(ok, "{:?} became {}", b as char, req.uri()),
                None => {
                    assert!(!ok, "{:?} refused", b as char);
                    assert_eq!(&rest[..], b"next", "nothing taken");
                    refused += 1;
                }
            }
        }
        assert!(refused > 0, "some byte is httparse's and not http's");
    }

    #[test]
    fn content_lengths_are_digits_only() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"123"), Some(123));
        for bad in [&b""[..], b"-1", b"1 ", b"0x1", b"99999999999999999999"] {
            assert_eq!(content_length(bad), None);
        }
    }
}
