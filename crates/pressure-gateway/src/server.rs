//! Serving: an accept loop on a bound listener with hyper's HTTP/1 and
//! HTTP/2 server, the request-head bound (`431` beyond it; hyper answers
//! malformed requests with `400`), the client address in the request
//! extensions, and graceful shutdown.

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Serves `service` on `listener` until `shutdown` resolves; connections in
/// flight are then given a moment to finish.
pub async fn serve<S>(
    listener: TcpListener,
    service: S,
    max_header_bytes: usize,
    shutdown: impl Future<Output = ()>,
) where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .max_buf_size(max_header_bytes.max(8192))
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(std::time::Duration::from_secs(30));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let svc = service
            .clone()
            .map_request(move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req.map(Body::new)
            });
        let conn =
            builder.serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(svc));
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
    }
}

/// The peer address of a request, when served by [`serve`].
pub fn client_addr<B>(req: &Request<B>) -> Option<SocketAddr> {
    req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}
