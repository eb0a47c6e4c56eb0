//! The HTTP floor: serving HTTP/1.1 and h2 (plain or TLS), and the reverse
//! proxy to the upstreams. It knows nothing of limits, plans or refusals:
//! the layers above hand the proxy an explicit [`proxy::ForwardRequest`] and
//! map its [`proxy::ProxyFailure`] to a refusal in one place.
//!
//! * [`server`]: the listeners, the connections, the in-place HTTP/1.1
//!   server (`server/h1.rs`) and the drain.
//! * [`proxy`]: pooled upstream connections and the raw HTTP/1.1 exchange.
//! * [`wire`]: the HTTP/1.1 bytes both write.
//! * [`tls`]: rustls for the listeners and the `https://` upstreams.
//! * [`stamp`], [`when_woken`], [`watched_body`], [`spare`]: the cheap
//!   clock, the waker that runs on wake, the body that reports its frames,
//!   and the extension map kept for the next request.

pub(crate) mod proxy;
pub(crate) mod server;
pub(crate) mod spare;
pub(crate) mod stamp;
pub(crate) mod tls;
pub(crate) mod watched_body;
pub(crate) mod when_woken;
pub(crate) mod wire;
