//! `pressure rls` as Envoy sees it: a real tonic client against the service
//! on 127.0.0.1:0. `readme`: every example of envoyproxy/ratelimit's README,
//! as written there; `decisions`: all-must-pass with nothing consumed on a
//! denial, hits, headers, overrides; `edge`: no 2N at a window edge, on an
//! injected clock; `outage`: Redis down and the failure modes; `reload`:
//! a file edit applies live and keeps the counters; `cluster`: two services
//! on one Redis Cluster share one limit; `bounds`: long values, floods of
//! values and huge `hits_addend`s stay bounded and never reset a count.

mod bounds;
mod cluster;
mod decisions;
mod edge;
mod outage;
mod readme;
mod reload;
mod support;
mod traces;
