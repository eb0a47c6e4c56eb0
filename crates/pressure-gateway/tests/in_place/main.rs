//! The common HTTP/1.1 request served in place, over raw sockets: pipelined
//! requests answered in order, each framed as hyper frames it (length,
//! chunked, none for `HEAD`), with `date`; a connection handed to hyper by a
//! request only hyper serves (a chunked body, a body still arriving) keeps
//! answering on the same socket, before and after; `Connection: close` ends
//! the connection after its answer; a refusal is framed the same.

use super::support;

use serde_json::{json, Value};
use std::time::Duration;
use support::{bounded, demo_config, TestGateway, TestUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One response as read off the socket.
#[derive(Debug)]
struct Raw {
    status: u16,
    /// Names lower-cased, in order.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body));
        })
    }
}

/// A client connection that reads responses one by one, keeping what it
/// read past the last one.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(gw: &TestGateway) -> Self {
        Self {
            stream: TcpStream::connect(gw.addr).await.expect("connect"),
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Reads more bytes; `false` at the end of the connection.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk))
            .await
            .expect("bytes within 10 s")
            .expect("read");
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    /// Exactly `n` bytes from the front.
    async fn take(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill().await, "the connection ended inside a body");
        }
        self.buf.drain(..n).collect()
    }

    /// One line (without its CRLF) from the front.
    async fn line(&mut self) -> String {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..at + 2).collect();
                return String::from_utf8_lossy(&line[..at]).into_owned();
            }
            assert!(self.fill().await, "the connection ended inside a line");
        }
    }

    /// The next response; `head` when it answers a `HEAD` (no body).
    async fn response(&mut self, head: bool) -> Raw {
        let status_line = self.line().await;
        let status = status_line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP/1.1 status line: {status_line:?}"));
        let mut headers = Vec::new();
        loop {
            let line = self.line().await;
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').expect("a header line");
            headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
        }
        let mut raw = Raw {
            status,
            headers,
            body: Vec::new(),
        };
        if head || status == 204 || status == 304 {
            return raw;
        }
        if raw.header("transfer-encoding") == Some("chunked") {
            loop {
                let size = usize::from_str_radix(self.line().await.trim(), 16).expect("a chunk size");
                if size == 0 {
                    assert_eq!(self.line().await, "", "no trailers");
                    break;
                }
                let data = self.take(size).await;
                raw.body.extend_from_slice(&data);
                assert_eq!(self.line().await, "", "a chunk ends with CRLF");
            }
        } else {
            let n: usize = raw
                .header("content-length")
                .expect("a length or chunked")
                .parse()
                .expect("a numeric length");
            raw.body = self.take(n).await;
        }
        raw
    }

    /// `GET path`, answered by the demo upstream's echo of that path.
    async fn echoes(&mut self, path: &str) {
        self.send(get(path).as_bytes()).await;
        assert_eq!(self.response(false).await.json()["path"], path);
    }

    /// Whether the server closed the connection (within 5 s).
    async fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), self.stream.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n")
}

async fn with_gateway<F, Fut>(pressure: Value, test: F)
where
    F: FnOnce(TestGateway) -> Fut,
    Fut: std::future::Future<Output = TestGateway>,
{
    bounded(async {
        let upstream = TestUpstream::demo().await;
        let gw = TestGateway::start(demo_config(&upstream, pressure)).await;
        let gw = test(gw).await;
        gw.stop().await;
        upstream.stop().await;
    })
    .await;
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_each_framed_and_dated() {
    with_gateway(json!({}), |gw| async move {
        let mut conn = Conn::open(&gw).await;
        conn.send(format!("{}{}{}", get("/a"), get("/b"), get("/c")).as_bytes())
            .await;
        for path in ["/a", "/b", "/c"] {
            let r = conn.response(false).await;
            assert_eq!(r.status, 200, "{r:?}");
            assert_eq!(r.json()["path"], path);
            assert_eq!(
                r.header("content-length"),
                Some(r.body.len().to_string().as_str())
            );
            assert!(r.header("date").is_some_and(|d| d.ends_with(" GMT")), "{r:?}");
            assert_eq!(r.header("transfer-encoding"), None);
        }
        gw
    })
    .await;
}

#[tokio::test]
async fn a_connection_handed_to_hyper_keeps_answering_on_the_same_socket() {
    with_gateway(json!({}), |gw| async move {
        let mut conn = Conn::open(&gw).await;
        conn.echoes("/before").await;
        // A chunked body: hyper's to read.
        conn.send(
            b"POST /collect HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n\
              5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        )
        .await;
        let r = conn.response(false).await;
        assert_eq!((r.status, r.body.as_slice()), (200, &b"11 bytes"[..]), "{r:?}");
        conn.echoes("/after").await;
        gw
    })
    .await;
}

#[tokio::test]
async fn a_body_read_whole_is_served_one_still_arriving_is_streamed() {
    with_gateway(json!({}), |gw| async move {
        let mut conn = Conn::open(&gw).await;
        conn.send(b"POST /collect HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello")
            .await;
        let r = conn.response(false).await;
        assert_eq!((r.status, r.body.as_slice()), (200, &b"5 bytes"[..]), "{r:?}");
        // The head first, the body later: the body arrives through hyper.
        conn.send(b"POST /collect HTTP/1.1\r\nHost: test\r\nContent-Length: 7\r\n\r\n")
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        conn.send(b"goodbye").await;
        let r = conn.response(false).await;
        assert_eq!((r.status, r.body.as_slice()), (200, &b"7 bytes"[..]), "{r:?}");
        gw
    })
    .await;
}

#[tokio::test]
async fn head_is_answered_with_its_length_and_no_body() {
    with_gateway(json!({}), |gw| async move {
        let mut conn = Conn::open(&gw).await;
        conn.send(b"HEAD /h HTTP/1.1\r\nHost: test\r\n\r\n").await;
        let head = conn.response(true).await;
        assert_eq!(head.status, 200, "{head:?}");
        // No body bytes came: the next answer starts right after the head.
        conn.echoes("/next").await;
        gw
    })
    .await;
}

#[tokio::test]
async fn a_body_of_unknown_length_is_chunked() {
    with_gateway(json!({}), |gw| async move {
        let mut conn = Conn::open(&gw).await;
        conn.send(get("/events").as_bytes()).await;
        let r = conn.response(false).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.header("content-length"), None);
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(text.matches("data: event").count(), 5, "{text}");
        // The connection goes on after the last chunk.
        conn.echoes("/then").await;
        gw
    })
    .await;
}

#[tokio::test]
async fn connection_close_ends_the_connection_after_its_answer() {
    with_gateway(json!({}), |gw| async move {
        let mut conn = Conn::open(&gw).await;
        conn.send(b"GET /bye HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            .await;
        let r = conn.response(false).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("connection"), Some("close"));
        assert!(conn.closed().await, "closed after the answer");
        gw
    })
    .await;
}

#[tokio::test]
async fn a_refusal_is_framed_and_the_connection_goes_on() {
    let pressure = json!({
        "perRoute": [ { "resource": "gateway:route:once", "pathPrefix": "/once",
                        "limits": { "requestsPerMinute": 1 } } ]
    });
    with_gateway(pressure, |gw| async move {
        let mut conn = Conn::open(&gw).await;
        conn.send(format!("{}{}", get("/once"), get("/once")).as_bytes())
            .await;
        assert_eq!(conn.response(false).await.status, 200);
        let refused = conn.response(false).await;
        assert_eq!(refused.status, 429, "{refused:?}");
        assert!(refused.header("retry-after").is_some(), "{refused:?}");
        assert_eq!(
            refused.header("content-length"),
            Some(refused.body.len().to_string().as_str())
        );
        conn.echoes("/other").await;
        gw
    })
    .await;
}
