//! A server span per `ShouldRateLimit` call when the service is traced
//! (`gateway.rls` under `gateway.tracing`): the caller's `traceparent`
//! continued, the domain and the answer recorded.

use crate::support::req;
use pressure_core::trace::{Sampler, SpanKind, Tracer, Value};
use pressure_core::{MemoryBackend, ResourceBroker};
use pressure_rls::{serve_grpc_traced, Plan, RateLimitClient, RateLimiter};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_is_a_server_span_under_the_callers_trace() {
    let broker = ResourceBroker::builder(MemoryBackend::new()).build();
    let yaml =
        "domain: traced\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let plan = Plan::from_texts(&[("t.yaml".into(), yaml.into())]).expect("plan");
    let limiter = Arc::new(RateLimiter::new(broker, plan));
    let (tracer, mut spans) = Tracer::new(Sampler::default(), 16);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve_grpc_traced(
        limiter,
        listener,
        async move {
            let _ = stopped.await;
        },
        Some(tracer),
    ));
    let mut client = RateLimitClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let trace = "77777777777777777777777777777777";
    for want in ["admitted", "refused"] {
        let mut md = tonic::metadata::MetadataMap::new();
        md.insert(
            "traceparent",
            format!("00-{trace}-00f067aa0ba902b7-01").parse().expect("value"),
        );
        client
            .should_rate_limit_with(req("traced", &[&[("k", "v")]]), md)
            .await
            .expect("an answer");
        let span = tokio::time::timeout(Duration::from_secs(10), spans.recv())
            .await
            .expect("a span in time")
            .expect("a span");
        assert_eq!(span.kind, SpanKind::Server);
        assert_eq!(span.context.trace_id_hex(), trace);
        assert_eq!(
            span.parent,
            Some([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
        );
        assert!(span
            .attributes
            .iter()
            .any(|(k, v)| k == "pressure.domain" && *v == Value::from("traced")));
        let result = span
            .events
            .iter()
            .find(|e| e.name == "pressure.admission")
            .and_then(|e| e.attributes.iter().find(|(k, _)| k == "pressure.result"))
            .map(|(_, v)| v.clone());
        assert_eq!(result, Some(Value::from(want)));
    }
    let _ = stop.send(());
    served.await.expect("joined").expect("served");
}
