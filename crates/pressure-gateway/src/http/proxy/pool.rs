//! The proxy's upstream connections: HTTP/1.1 connections of its own
//! (`hyper::client::conn::http1`), the idle ones kept per upstream origin
//! (scheme and authority) for reuse.
//!
//! Each server thread builds its own [`Proxy`](super::Proxy), so a pool
//! serves one thread: the lock around it is never contended there, and a
//! checkout is a short scan of the origins (a gateway has a handful) with no
//! hashing and no boxed future. It keeps what hyper-util's pooled client
//! did for the proxy:
//!
//! * connecting is the [`UpstreamConnector`]'s (TCP with the connect
//!   timeout, TLS for `https://` upstreams); the connection's task is
//!   spawned with upgrades enabled (WebSocket tunnels);
//! * a connection goes back to the pool once it can take another request:
//!   at once when the response was read whole with its head, otherwise
//!   from a task that waits until it has been read; the newest idle
//!   connection is reused first, and one idle for 90 s (or closed by the
//!   upstream) is dropped, at checkout or by a task that sweeps the pool
//!   every 90 s;
//! * a request that a reused connection gave back unsent (the upstream
//!   closed it in the meantime) is sent again, on another connection; on a
//!   fresh connection it is not.
//!
//! Beside hyper's connections each origin keeps plain-TCP ones for the
//! exchanges of `exchange.rs` (a routed request, whole, to an `http://`
//! upstream, no upgrade: [`Pool::exchange`]). They are kept by the same
//! rules; as no task watches them while idle, a closed one is found at
//! checkout, by a read that costs no system call while nothing arrived.
//! A reused one that closes before any byte of an answer came has its
//! request sent again on another connection when the method is
//! idempotent (nginx's and Envoy's rule for a reset on a kept connection).

use super::connector::UpstreamConnector;
use super::exchange::{self, RawConn};
use super::exchange_error::ExchangeError;
use super::headers::Forwarding;
use super::routing::Upstream;
use axum::body::Body;
use bytes::Bytes;
use http::uri::Authority;
use http::{request, Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{Builder, SendRequest};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// How long an idle pooled upstream connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The connections of one proxy. Cheap to clone: clones share them.
#[derive(Clone)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    connector: UpstreamConnector,
    idle: Mutex<Idle>,
}

/// The idle connections, per origin.
#[derive(Default)]
struct Idle {
    origins: Vec<Origin>,
    /// Whether the sweeping task runs.
    sweeping: bool,
}

/// One upstream origin and its idle connections, oldest first.
struct Origin {
    https: bool,
    authority: Authority,
    conns: Vec<Kept<SendRequest<Body>>>,
    raw: Vec<Kept<RawConn>>,
}

impl Origin {
    /// Byte for byte (an upstream's authority is the same value on every
    /// request; `Authority`'s own `==` ignores case, byte by byte).
    fn is(&self, https: bool, authority: &Authority) -> bool {
        self.https == https && self.authority.as_str() == authority.as_str()
    }
}

/// A connection that can say whether it could take a request now.
trait Reusable {
    fn is_open(&self) -> bool;
}

impl Reusable for SendRequest<Body> {
    /// Open and ready.
    fn is_open(&self) -> bool {
        self.is_ready()
    }
}

impl Reusable for RawConn {
    /// Open, nothing unasked on it.
    fn is_open(&self) -> bool {
        RawConn::is_open(self)
    }
}

/// An idle connection and since when it idles.
struct Kept<C> {
    conn: C,
    since: Instant,
}

impl<C: Reusable> Kept<C> {
    /// Idle from now.
    fn new(conn: C) -> Self {
        Self {
            conn,
            since: Instant::now(),
        }
    }

    /// Whether it can take a request: not idle too long, and open.
    fn is_usable(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) < IDLE_TIMEOUT && self.conn.is_open()
    }
}

/// The newest usable connection of `kept` (the unusable ones met on the
/// way are dropped).
fn newest_usable<C: Reusable>(kept: &mut Vec<Kept<C>>) -> Option<C> {
    if kept.is_empty() {
        return None;
    }
    let now = Instant::now();
    while let Some(k) = kept.pop() {
        if k.is_usable(now) {
            return Some(k.conn);
        }
    }
    None
}

/// Takes the connections of `kept` that are no longer usable into `gone`.
fn drop_unusable<C: Reusable>(kept: &mut Vec<Kept<C>>, now: Instant, gone: &mut Vec<Kept<C>>) {
    let (keep, unusable): (Vec<_>, Vec<_>) = std::mem::take(kept).into_iter().partition(|c| c.is_usable(now));
    *kept = keep;
    gone.extend(unusable);
}

/// Where a plain-TCP connection goes back to once its response is read
/// whole.
pub(crate) struct Home {
    shared: Arc<Shared>,
    authority: Authority,
}

impl std::fmt::Debug for Home {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Home")
            .field("authority", &self.authority)
            .finish()
    }
}

impl exchange::Home for Home {
    /// Puts `conn` back among its origin's idle connections.
    fn put_back(self, conn: RawConn) {
        self.shared.put_back_raw(&self.authority, conn);
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self.shared.idle.lock();
        let conns: usize = idle.origins.iter().map(|o| o.conns.len() + o.raw.len()).sum();
        f.debug_struct("Pool")
            .field("connector", &self.shared.connector)
            .field("idle", &conns)
            .finish()
    }
}

impl Pool {
    /// An empty pool that connects with `connector`.
    pub(crate) fn new(connector: UpstreamConnector) -> Self {
        Self {
            shared: Arc::new(Shared {
                connector,
                idle: Mutex::new(Idle::default()),
            }),
        }
    }

    /// Sends `req` (its target in origin-form, its `Host` set) to
    /// `upstream` on an idle connection, or a new one, and answers the
    /// response head.
    pub(crate) async fn send(
        &self,
        upstream: &Upstream,
        mut req: Request<Body>,
    ) -> Result<Response<Incoming>, ExchangeError> {
        let https = upstream.is_https();
        loop {
            let (mut tx, reused) = match self.checkout(https, upstream.authority()) {
                Some(tx) => (tx, true),
                // Boxed: connecting is rare, and its state would otherwise
                // be carried (and moved) by every request's future.
                None => (Box::pin(self.connect(upstream)).await?, false),
            };
            match tx.try_send_request(req).await {
                Ok(response) => {
                    self.when_idle(https, upstream.authority(), tx);
                    return Ok(response);
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => {
                        tracing::trace!(
                            upstream = upstream.name(),
                            error = %error.error(),
                            "unsent request on a pooled connection; sending it again"
                        );
                        req = unsent;
                    }
                    Some(_) => return Err(ExchangeError::Canceled(error.into_error())),
                    None => return Err(ExchangeError::SendRequest(error.into_error())),
                },
            }
        }
    }

    /// Sends `parts` with its whole `body` (its target in origin-form) and
    /// the `forwarding` headers in place of its own to the `http://` upstream on a kept plain-TCP connection,
    /// or a new one, in this task (`exchange.rs`), and answers the
    /// response, its body streaming from the connection.
    pub(crate) async fn exchange(
        &self,
        upstream: &Upstream,
        parts: &request::Parts,
        forwarding: &Forwarding,
        body: &Bytes,
    ) -> Result<Response<Body>, ExchangeError> {
        loop {
            let (mut conn, reused) = match self.checkout_raw(upstream.authority()) {
                Some(conn) => (conn, true),
                // Boxed, as in `send`.
                None => (Box::pin(self.connect_raw(upstream)).await?, false),
            };
            match conn.exchange(parts, forwarding, body).await {
                Ok(head) => {
                    let home = || Home {
                        shared: Arc::clone(&self.shared),
                        authority: upstream.authority().clone(),
                    };
                    return Ok(exchange::respond(conn, head, home));
                }
                Err(failed) if reused && failed.unanswered && parts.method.is_idempotent() => {
                    tracing::trace!(
                        upstream = upstream.name(),
                        error = %failed.error,
                        "a kept connection closed before answering; sending the request again"
                    );
                }
                Err(failed) => return Err(failed.error),
            }
        }
    }

    /// The newest usable idle plain-TCP connection to the `http://` origin.
    fn checkout_raw(&self, authority: &Authority) -> Option<RawConn> {
        let mut idle = self.shared.idle.lock();
        let origin = idle.origins.iter_mut().find(|o| o.is(false, authority))?;
        newest_usable(&mut origin.raw)
    }

    /// A new plain-TCP connection to the `http://` upstream.
    async fn connect_raw(&self, upstream: &Upstream) -> Result<RawConn, ExchangeError> {
        let io = self
            .shared
            .connector
            .connect_tcp(upstream.dial_uri())
            .await
            .map_err(ExchangeError::Connect)?;
        Ok(RawConn::new(io))
    }

    /// The newest usable idle connection to the origin, if any (the
    /// unusable ones met on the way are dropped).
    fn checkout(&self, https: bool, authority: &Authority) -> Option<SendRequest<Body>> {
        let mut idle = self.shared.idle.lock();
        let origin = idle.origins.iter_mut().find(|o| o.is(https, authority))?;
        newest_usable(&mut origin.conns)
    }

    /// Puts `tx` back in the pool once its connection can take another
    /// request: now, or from a task that waits for it (a response body
    /// still to read). A closed connection is dropped.
    fn when_idle(&self, https: bool, authority: &Authority, mut tx: SendRequest<Body>) {
        if tx.is_ready() {
            self.shared.put_back(https, authority, tx);
            return;
        }
        if tx.is_closed() {
            return;
        }
        let shared = Arc::downgrade(&self.shared);
        let authority = authority.clone();
        tokio::spawn(async move {
            if tx.ready().await.is_ok() {
                if let Some(shared) = shared.upgrade() {
                    shared.put_back(https, &authority, tx);
                }
            }
        });
    }

    /// A new connection to `upstream`, its task spawned, ready for a
    /// request.
    async fn connect(&self, upstream: &Upstream) -> Result<SendRequest<Body>, ExchangeError> {
        let mut connector = self.shared.connector.clone();
        let io = tower::Service::call(&mut connector, upstream.dial_uri())
            .await
            .map_err(ExchangeError::Connect)?;
        let (mut tx, conn) = Builder::new()
            .handshake(io)
            .await
            .map_err(ExchangeError::SendRequest)?;
        // The connection's own error, if it fails before it is ready: more
        // telling than "connection closed".
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            if let Err(error) = conn.with_upgrades().await {
                tracing::debug!(%error, "upstream connection error");
                let _ = failed_tx.send(error);
            }
        });
        match tx.ready().await {
            Ok(()) => Ok(tx),
            Err(closed) if closed.is_closed() => {
                Err(ExchangeError::SendRequest(failed_rx.await.unwrap_or(closed)))
            }
            Err(error) => Err(ExchangeError::SendRequest(error)),
        }
    }
}

impl Shared {
    /// Adds `tx`, ready, to the origin's idle connections; starts the sweep
    /// with the first one.
    fn put_back(self: &Arc<Self>, https: bool, authority: &Authority, tx: SendRequest<Body>) {
        let mut idle = self.idle.lock();
        origin(&mut idle, https, authority).conns.push(Kept::new(tx));
        self.sweep_from(idle);
    }

    /// Adds `conn`, its response read whole, to the `http://` origin's idle
    /// plain-TCP connections; starts the sweep with the first one.
    fn put_back_raw(self: &Arc<Self>, authority: &Authority, conn: RawConn) {
        let mut idle = self.idle.lock();
        origin(&mut idle, false, authority).raw.push(Kept::new(conn));
        self.sweep_from(idle);
    }

    /// Starts the sweeping task unless it runs.
    fn sweep_from(self: &Arc<Self>, mut idle: parking_lot::MutexGuard<'_, Idle>) {
        if !idle.sweeping {
            idle.sweeping = true;
            drop(idle);
            tokio::spawn(sweep(Arc::downgrade(self)));
        }
    }
}

/// The origin's entry, made when it has none.
fn origin<'a>(idle: &'a mut Idle, https: bool, authority: &Authority) -> &'a mut Origin {
    match idle.origins.iter().position(|o| o.is(https, authority)) {
        Some(at) => &mut idle.origins[at],
        None => {
            idle.origins.push(Origin {
                https,
                authority: authority.clone(),
                conns: Vec::new(),
                raw: Vec::new(),
            });
            let last = idle.origins.len() - 1;
            &mut idle.origins[last]
        }
    }
}

/// Every [`IDLE_TIMEOUT`], drops the idle connections that are no longer
/// usable (closed by the upstream, or idle too long); ends with the pool.
async fn sweep(shared: Weak<Shared>) {
    let start = Instant::now() + IDLE_TIMEOUT;
    let mut tick = tokio::time::interval_at(start, IDLE_TIMEOUT);
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let now = Instant::now();
        let dropped = {
            let mut idle = shared.idle.lock();
            let mut dropped = (Vec::new(), Vec::new());
            for origin in &mut idle.origins {
                drop_unusable(&mut origin.conns, now, &mut dropped.0);
                drop_unusable(&mut origin.raw, now, &mut dropped.1);
            }
            idle.origins.retain(|o| !o.conns.is_empty() || !o.raw.is_empty());
            dropped
        };
        // Closed outside the lock.
        drop(dropped);
    }
}
