//! Serving: the accept loop and the life of each client connection.
//!
//! * a plaintext connection's common HTTP/1.1 requests served in place
//!   ([`h1`]: one kept buffer, one parse, the answer in one write); the
//!   first request that needs more (HTTP/2, HTTP/1.0, a chunked or
//!   still-arriving body, `Expect`, an upgrade, a head that does not parse)
//!   hands the connection to hyper with every unread byte;
//! * hyper's HTTP/1 and HTTP/2 server for the rest and for TLS, upgrades
//!   enabled, the request head bounded by `limits.maxHeaderBytes` on both
//!   protocols (`431` on HTTP/1; HTTP/2 refuses the stream);
//! * client-side timeouts (`gateway.timeouts`): a head must arrive within
//!   `headerReadMs`; a connection with no request in flight and no bytes for
//!   `idleMs` is closed (also one that never sent a byte, or an h2c
//!   connection after its preface); a response the client stops reading for
//!   `sendMs` is dropped, which releases the request's slots;
//! * accept failures (`EMFILE` when the fd limit is hit) back off
//!   exponentially up to one second and are logged at most once a second
//!   with the count of the suppressed ones;
//! * TLS, when [`ServeOptions::tls`] is set (`crate::http::tls`): the handshake
//!   first, within `headerReadMs`, then the same HTTP/1.1 or HTTP/2 (ALPN)
//!   service; a failed handshake just closes the connection;
//! * graceful stop: when `shutdown` resolves the listener is closed, idle
//!   keep-alive connections are closed, requests and streams in flight
//!   finish, and [`serve_with`] returns once every connection is gone or
//!   the grace period is over (the rest are then dropped).

use crate::http::stamp::Stamp;
use crate::http::watched_body::{FrameWatch, WatchedBody};
use crate::http::when_woken::WhenWoken;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tower::ServiceExt;

pub(crate) mod core_share;

/// A service over whole requests that answers a response or fails with
/// `E`, cloned per request or connection, with futures that may move
/// between threads: a service under the gateway's route layer, an [`HttpService`] where a
/// server serves it.
pub trait BodyService<E>:
    tower::Service<Request<Body>, Response = Response<Body>, Error = E, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<S, E> BodyService<E> for S where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = E, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

mod h1;

/// How a listener serves its connections.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Largest request head, bytes.
    pub max_header_bytes: usize,
    /// A request head must be complete within this, from its first byte.
    pub header_read: Duration,
    /// A connection with nothing in flight and no bytes for this is closed.
    pub idle: Duration,
    /// A response write blocked for this (the client stopped reading) drops
    /// the connection.
    pub send: Duration,
    /// How long a stop waits for connections to finish.
    pub grace: Duration,
    /// Serve over TLS with this (current) certificate; `None`: plain.
    pub tls: Option<crate::http::tls::ServerTls>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_header_bytes: 64 * 1024,
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            send: Duration::from_secs(60),
            grace: Duration::from_secs(30),
            tls: None,
        }
    }
}

impl ServeOptions {
    /// The options of a gateway config (both listeners use them).
    pub fn from_config(cfg: &crate::settings::GatewayConfig) -> Self {
        let t = &cfg.timeouts;
        Self {
            max_header_bytes: cfg.limits.max_header_bytes,
            header_read: Duration::from_millis(t.header_read_ms),
            idle: Duration::from_millis(t.idle_ms),
            send: Duration::from_millis(t.send_ms),
            grace: Duration::from_millis(cfg.shutdown_grace_ms),
            tls: None,
        }
    }
}

/// What a stop left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Drained {
    /// Connections still open when the grace period ended (dropped).
    pub dropped: usize,
}

/// What a server serves: a [`BodyService`] that answers every request (its
/// errors are responses). Implemented by every such service (an axum
/// `Router`, the gateway's layered stack).
pub trait HttpService: BodyService<Infallible> {}

impl<S: BodyService<Infallible>> HttpService for S {}

/// Serves `service` on `listener` with default timeouts and `max_header_bytes`
/// until `shutdown` resolves (see [`serve_with`]).
pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    max_header_bytes: usize,
    shutdown: impl Future<Output = ()>,
) where
    S: HttpService,
{
    let options = ServeOptions {
        max_header_bytes,
        grace: Duration::from_secs(5),
        ..ServeOptions::default()
    };
    serve_with(listener, service, &options, shutdown).await;
}

/// Serves `service` on `listener` until `shutdown` resolves, then drains
/// (module docs).
pub async fn serve_with<S>(
    listener: TcpListener,
    service: S,
    options: &ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Drained
where
    S: HttpService,
{
    let source = Source::Listener(listener, AcceptFailures::default());
    serve_from(source, service, options, shutdown, detached).await
}

/// What a server tells a service about each connection before serving it
/// (see [`ConnLink`]): `true` when the service itself now counts that
/// connection's requests in flight and knows its peer, so the connection
/// neither wraps each response body nor adds `ConnectInfo` to each request.
pub(crate) type Attach<S> = fn(&mut S, &ConnLink) -> bool;

/// [`Attach`] for a service that knows nothing of connections.
pub(crate) fn detached<S>(_: &mut S, _: &ConnLink) -> bool {
    false
}

/// One client connection as a service attached to it sees it: the peer,
/// and the connection's activity, in which a request counts as in flight
/// from its head until its response body is done ([`ConnLink::in_flight`]).
#[derive(Clone)]
pub(crate) struct ConnLink {
    /// The client's address.
    pub(crate) peer: SocketAddr,
    activity: Arc<Activity>,
}

impl std::fmt::Debug for ConnLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnLink")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl ConnLink {
    /// Counts a request in flight on this connection until the guard is
    /// dropped (with the response body).
    pub(crate) fn in_flight(&self) -> InFlight {
        InFlight::new(Arc::clone(&self.activity))
    }
}

/// Where a server takes its connections from.
pub(crate) enum Source {
    /// Accepts them itself.
    Listener(TcpListener, AcceptFailures),
    /// Gets them accepted by a [`distribute`] task (another thread's
    /// runtime); ends when that task stops.
    Handed(tokio::sync::mpsc::Receiver<(std::net::TcpStream, SocketAddr)>),
}

impl Source {
    /// The next connection, or `None` once the source ends or `shutdown`
    /// resolves (the accept loops' one exit).
    async fn next_until<F: Future<Output = ()>>(
        &mut self,
        shutdown: std::pin::Pin<&mut F>,
    ) -> Option<(TcpStream, SocketAddr)> {
        tokio::select! {
            accepted = self.next() => accepted,
            () = shutdown => None,
        }
    }

    /// The next connection, registered with this thread's runtime; `None`
    /// when the source is done.
    async fn next(&mut self) -> Option<(TcpStream, SocketAddr)> {
        match self {
            Source::Listener(listener, failures) => loop {
                match listener.accept().await {
                    Ok(a) => {
                        failures.reset();
                        return Some(a);
                    }
                    Err(e) => failures.failed(&e).await,
                }
            },
            Source::Handed(rx) => loop {
                let (stream, peer) = rx.recv().await?;
                match TcpStream::from_std(stream) {
                    Ok(s) => return Some((s, peer)),
                    Err(e) => tracing::warn!(error = %e, "cannot take over an accepted connection"),
                }
            },
        }
    }
}

/// Accepts on `listener` and hands the connections round-robin to the
/// server threads behind `workers`, until `shutdown` resolves: one exclusive
/// listening socket (no `SO_REUSEPORT`, so no other process can share the
/// address), and every core serving.
pub(crate) async fn distribute(
    listener: TcpListener,
    workers: Vec<tokio::sync::mpsc::Sender<(std::net::TcpStream, SocketAddr)>>,
    shutdown: impl Future<Output = ()>,
) {
    let mut source = Source::Listener(listener, AcceptFailures::default());
    let mut next = 0usize;
    tokio::pin!(shutdown);
    while let Some((stream, peer)) = source.next_until(shutdown.as_mut()).await {
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        // Round-robin, skipping a worker whose queue is full.
        let mut item = (stream, peer);
        let mut sent = false;
        for _ in 0..workers.len() {
            let w = &workers[next % workers.len()];
            next = next.wrapping_add(1);
            match w.try_send(item) {
                Ok(()) => {
                    sent = true;
                    break;
                }
                Err(tokio::sync::mpsc::error::TrySendError::Full(back))
                | Err(tokio::sync::mpsc::error::TrySendError::Closed(back)) => item = back,
            }
        }
        if !sent {
            tracing::warn!(%peer, "every server thread is saturated; connection dropped");
        }
    }
}

/// Serves the connections of `source` until `shutdown` resolves (or the
/// source ends), then drains.
pub(crate) async fn serve_from<S>(
    mut source: Source,
    service: S,
    options: &ServeOptions,
    shutdown: impl Future<Output = ()>,
    attach: Attach<S>,
) -> Drained
where
    S: HttpService,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No timer for HTTP/1: the connection's watchdog bounds the request
    // head (`headerReadMs`), with no timer per request.
    builder.http1().max_buf_size(options.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(options.max_header_bytes).unwrap_or(u32::MAX));
    let builder = Arc::new(builder);
    let (stop_tx, stop_rx) = watch::channel(false);
    let open = Arc::new(AtomicUsize::new(0));
    let all_closed = Arc::new(tokio::sync::Notify::new());
    tokio::pin!(shutdown);
    while let Some((stream, peer)) = source.next_until(shutdown.as_mut()).await {
        let _ = stream.set_nodelay(true);
        open.fetch_add(1, Ordering::AcqRel);
        let conn = Connection {
            builder: Arc::clone(&builder),
            options: options.clone(),
            stop: stop_rx.clone(),
            open: Arc::clone(&open),
            all_closed: Arc::clone(&all_closed),
        };
        tokio::spawn(conn.run(stream, peer, service.clone(), attach));
    }
    drop(source);
    let _ = stop_tx.send(true);
    let deadline = Instant::now() + options.grace;
    loop {
        let notified = all_closed.notified();
        if open.load(Ordering::Acquire) == 0 {
            return Drained::default();
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            let dropped = open.load(Ordering::Acquire);
            if dropped > 0 {
                tracing::warn!(dropped, "grace period over; dropping connections still open");
            }
            return Drained { dropped };
        }
    }
}

/// Backs off after failed accepts and keeps their log lines rare.
#[derive(Debug, Default)]
pub(crate) struct AcceptFailures {
    delay: Duration,
    last_log: Option<Instant>,
    suppressed: u64,
}

impl AcceptFailures {
    fn reset(&mut self) {
        self.delay = Duration::ZERO;
    }

    async fn failed(&mut self, e: &io::Error) {
        let now = Instant::now();
        if self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            tracing::warn!(error = %e, suppressed = self.suppressed, "accept failed; backing off");
            self.last_log = Some(now);
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
        self.delay = (self.delay * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
        tokio::time::sleep(self.delay).await;
    }
}

/// One accepted connection and what it needs to serve itself.
struct Connection {
    builder: Arc<auto::Builder<TokioExecutor>>,
    options: ServeOptions,
    stop: watch::Receiver<bool>,
    open: Arc<AtomicUsize>,
    all_closed: Arc<tokio::sync::Notify>,
}

impl Connection {
    async fn run<S>(mut self, stream: TcpStream, peer: SocketAddr, mut service: S, attach: Attach<S>)
    where
        S: HttpService,
    {
        let activity = Arc::new(Activity::new());
        let io = Watched {
            inner: stream,
            activity: Arc::clone(&activity),
            unread: Bytes::new(),
        };
        let link = ConnLink {
            peer,
            activity: Arc::clone(&activity),
        };
        let attached = attach(&mut service, &link);
        let svc = ConnService {
            inner: parking_lot::Mutex::new(service),
            peer,
            activity: (!attached).then(|| Arc::clone(&activity)),
            tls: self.options.tls.is_some(),
        };
        match self.options.tls.clone() {
            None => {
                if let Some(rest) = self.serve_in_place(io, &svc, &activity, peer).await {
                    self.serve(rest, svc, &activity, peer).await;
                }
            }
            Some(tls) => {
                if let Some(io) = tls.accept(io, self.options.header_read, peer).await {
                    if io.get_ref().1.alpn_protocol() == Some(b"h2") {
                        activity.http2();
                    }
                    self.serve(io, svc, &activity, peer).await;
                }
            }
        }
        if self.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all_closed.notify_waiters();
        }
    }

    /// Serves the common HTTP/1.1 requests of a plaintext connection in
    /// place ([`h1`]) until it ends, expires or drains (`None`), or until a
    /// request needs hyper: then the socket, with the bytes read and not
    /// consumed in front, for [`Connection::serve`].
    async fn serve_in_place<S>(
        &mut self,
        io: Watched,
        svc: &ConnService<S>,
        activity: &Activity,
        peer: SocketAddr,
    ) -> Option<Watched>
    where
        S: HttpService,
    {
        let mut stop = self.stop.clone();
        let served = h1::serve(io, svc, &mut stop, self.options.max_header_bytes);
        tokio::pin!(served);
        let mut watchdog = WhenWoken::new(activity.expired(&self.options));
        tokio::select! {
            biased;
            ended = served.as_mut() => match ended {
                h1::Ended::Closed => None,
                h1::Ended::HandOff(mut io, unread) => {
                    io.unread = unread;
                    Some(io)
                }
            },
            reason = &mut watchdog => {
                tracing::debug!(%peer, reason, "closing connection");
                None
            }
        }
    }

    /// Serves HTTP on `io` until the connection ends, expires or drains.
    async fn serve<I, S>(&mut self, io: I, svc: ConnService<S>, activity: &Activity, peer: SocketAddr)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: HttpService,
    {
        // The connection (and its socket) is gone when this block ends.
        {
            let conn = self.builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
            tokio::pin!(conn);
            let mut stopping = *self.stop.borrow();
            if stopping {
                conn.as_mut().graceful_shutdown();
            }
            // The watchdog and the stop signal are polled only when their
            // own wakers fired, not on each of the socket's wakes.
            let mut watchdog = WhenWoken::new(activity.expired(&self.options));
            let mut stop = self.stop.clone();
            let mut stopped = WhenWoken::new(async move { stop.changed().await.is_ok() });
            loop {
                tokio::select! {
                    biased;
                    _ = conn.as_mut() => break,
                    reason = &mut watchdog => {
                        tracing::debug!(%peer, reason, "closing connection");
                        break;
                    }
                    changed = &mut stopped, if !stopping => {
                        stopping = true;
                        if changed {
                            conn.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
        }
    }
}

/// What a connection's watchdog reads: requests in flight, the last byte
/// read or written, since when a write has been blocked, and since when a
/// request head has been arriving (milliseconds since `base`; 0 = not
/// blocked, no head arriving).
///
/// Its clock is [`Stamp`]'s, read at every read and write of the socket;
/// the watchdog's sleeps are relative to now.
struct Activity {
    base: Stamp,
    in_flight: AtomicUsize,
    last_io_ms: AtomicU64,
    blocked_since_ms: AtomicU64,
    /// The first byte read with no request in flight: a head is arriving
    /// (HTTP/1), until the request is handed to the service.
    head_since_ms: AtomicU64,
    /// Whether any byte was read yet (the first ones tell HTTP/2's
    /// preface).
    read_any: AtomicBool,
    /// HTTP/2 (its preface, or ALPN): no head timer; its streams are
    /// bounded by the h2 server itself.
    h2: AtomicBool,
}

/// What an HTTP/2 client sends first (RFC 9113 §3.4), as far as it tells
/// the two protocols apart.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

impl Activity {
    fn new() -> Self {
        Self {
            base: Stamp::now(),
            in_flight: AtomicUsize::new(0),
            last_io_ms: AtomicU64::new(0),
            blocked_since_ms: AtomicU64::new(0),
            head_since_ms: AtomicU64::new(0),
            read_any: AtomicBool::new(false),
            h2: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed_ms().max(1)
    }

    fn touched(&self) {
        self.last_io_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// The connection speaks HTTP/2: no head timer from now on.
    fn http2(&self) {
        self.h2.store(true, Ordering::Relaxed);
        self.head_since_ms.store(0, Ordering::Relaxed);
    }

    /// `bytes` were read from the client.
    fn read(&self, bytes: &[u8]) {
        let now = self.now_ms();
        self.last_io_ms.store(now, Ordering::Relaxed);
        if !self.read_any.swap(true, Ordering::Relaxed) {
            let n = bytes.len().min(H2_PREFACE.len());
            if n > 0 && bytes[..n] == H2_PREFACE[..n] {
                self.http2();
            }
        }
        if self.in_flight.load(Ordering::Relaxed) == 0
            && !self.h2.load(Ordering::Relaxed)
            && self.head_since_ms.load(Ordering::Relaxed) == 0
        {
            self.head_since_ms.store(now, Ordering::Relaxed);
        }
    }

    /// Resolves when the connection must be dropped, with the reason.
    async fn expired(&self, o: &ServeOptions) -> &'static str {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        // Woken at least this often, so a deadline that starts while the
        // watchdog sleeps is seen when it passes.
        let tick = ms(o.idle.min(o.send).min(o.header_read)).max(1);
        loop {
            let now = self.now_ms();
            let blocked = self.blocked_since_ms.load(Ordering::Relaxed);
            let mut next = now + tick;
            if blocked > 0 {
                let deadline = blocked.saturating_add(ms(o.send));
                if now >= deadline {
                    return "the client stopped reading the response";
                }
                next = next.min(deadline);
            }
            let head = self.head_since_ms.load(Ordering::Relaxed);
            if head > 0 {
                let deadline = head.saturating_add(ms(o.header_read));
                if now >= deadline {
                    return "no complete request head within headerReadMs";
                }
                next = next.min(deadline);
            }
            if self.in_flight.load(Ordering::Relaxed) == 0 {
                let deadline = self.last_io_ms.load(Ordering::Relaxed).saturating_add(ms(o.idle));
                if now >= deadline {
                    return "idle";
                }
                next = next.min(deadline);
            }
            tokio::time::sleep(Duration::from_millis(next - now)).await;
        }
    }
}

/// The service of one connection: puts the peer address in each request,
/// and counts the request as in flight from its head until its response
/// body is done (or dropped), so the idle clock never runs while the
/// gateway is still working on an answer, however long that takes. A
/// service attached to the connection ([`Attach`]) does both itself, with
/// no extension and no body wrapper of the connection's.
struct ConnService<S> {
    /// Called in place when it is ready (it always is, in the gateway), a
    /// clone of it otherwise: no clone per request. The lock is only held
    /// for the call (hyper calls with `&self`).
    inner: parking_lot::Mutex<S>,
    peer: SocketAddr,
    /// The connection's activity, when the service is not attached to it.
    activity: Option<Arc<Activity>>,
    /// The connection is TLS: requests carry [`crate::http::tls::ClientTls`].
    tls: bool,
}

impl<S> hyper::service::Service<Request<hyper::body::Incoming>> for ConnService<S>
where
    S: HttpService,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ConnCall<S>;

    fn call(&self, req: Request<hyper::body::Incoming>) -> Self::Future {
        // A request without a body (most) gets the empty body, which
        // boxes nothing.
        self.call_body(req.map(|body| {
            if http_body::Body::is_end_stream(&body) {
                Body::empty()
            } else {
                Body::new(body)
            }
        }))
    }
}

impl<S: HttpService> ConnService<S> {
    /// Calls the service with `req` (whoever parsed it: hyper, or [`h1`]).
    fn call_body(&self, mut req: Request<Body>) -> ConnCall<S> {
        let guard = self.activity.as_ref().map(|a| {
            req.extensions_mut().insert(ConnectInfo(self.peer));
            InFlight::new(Arc::clone(a))
        });
        if self.tls {
            req.extensions_mut().insert(crate::http::tls::ClientTls);
        }
        let fut = {
            let mut inner = self.inner.lock();
            let mut cx = Context::from_waker(std::task::Waker::noop());
            match inner.poll_ready(&mut cx) {
                Poll::Ready(Ok(())) => futures::future::Either::Left(inner.call(req)),
                Poll::Ready(Err(never)) => match never {},
                Poll::Pending => futures::future::Either::Right(inner.clone().oneshot(req)),
            }
        };
        ConnFuture { fut, guard }
    }
}

/// What a [`ConnService`] call returns: the service's own future when it was
/// ready, a oneshot on a clone of it otherwise.
type ConnCall<S> = ConnFuture<
    futures::future::Either<
        <S as tower::Service<Request<Body>>>::Future,
        tower::util::Oneshot<S, Request<Body>>,
    >,
>;

pin_project_lite::pin_project! {
    /// The answer of a [`ConnService`]: the service's own, its body
    /// holding the request's [`InFlight`] when the connection counts it.
    struct ConnFuture<F> {
        #[pin]
        fut: F,
        guard: Option<InFlight>,
    }
}

impl<F: Future<Output = Result<Response<Body>, Infallible>>> Future for ConnFuture<F> {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let resp = std::task::ready!(this.fut.poll(cx))?;
        Poll::Ready(Ok(match this.guard.take() {
            Some(guard) => resp.map(|b| Body::new(WatchedBody::new(b, guard))),
            None => resp,
        }))
    }
}

/// Counts a request in flight until its response body is done or dropped.
pub(crate) struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(a: Arc<Activity>) -> Self {
        a.in_flight.fetch_add(1, Ordering::Relaxed);
        // The head is complete.
        a.head_since_ms.store(0, Ordering::Relaxed);
        Self(a)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touched();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body keeps its connection counted as busy.
impl FrameWatch for InFlight {}

/// The client socket, noting every byte read or written and blocked writes.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// Bytes read (and noted) before hyper took the connection over from
    /// [`h1`]: read again first.
    unread: Bytes,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read(&buf.filled()[before..]);
        }
        r
    }
}

impl Watched {
    fn note_write<T>(&self, r: &Poll<io::Result<T>>) {
        match r {
            Poll::Pending => {
                let _ = self.activity.blocked_since_ms.compare_exchange(
                    0,
                    self.activity.now_ms(),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Poll::Ready(_) => {
                self.activity.blocked_since_ms.store(0, Ordering::Relaxed);
                self.activity.touched();
            }
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_write(&r);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note_write(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
