//! The OTLP exporter of the gateway's traces (`docs/tracing.md`): finished
//! spans come out of the [`Tracer`]'s bounded queue, are batched (up to
//! [`MAX_BATCH`] spans or [`BATCH_DELAY`] after the first) and sent to the
//! receiver over HTTP/protobuf or gRPC, one export at a time, each given
//! [`EXPORT_TIMEOUT`].
//!
//! Nothing on the request path waits for it: a span is queued with
//! `try_send`, and while an export hangs or fails the queue fills and the
//! spans past [`QUEUE_CAPACITY`] are dropped. Dropped spans (a full queue,
//! or an export that failed) are counted in
//! `pressure_trace_spans_dropped_total`, exported ones in
//! `pressure_trace_spans_exported_total`.

mod proto;

use crate::metrics::GatewayMetrics;
use crate::settings::{OtlpProtocol, ResolvedTracing};
use bytes::Bytes;
use http::{header, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pressure_core::trace::{SpanData, SpanKind, Tracer, Value};
use prost::Message;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Finished spans waiting for export, at most.
pub(crate) const QUEUE_CAPACITY: usize = 2048;
/// Spans in one export, at most.
pub(crate) const MAX_BATCH: usize = 512;
/// How long a batch waits for more spans after its first.
pub(crate) const BATCH_DELAY: Duration = Duration::from_millis(200);
/// How long one export may take before its spans are given up.
pub(crate) const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the exporter of `config` (on the current runtime) and returns
/// the tracer feeding it; its counters go in `metrics`.
pub(crate) fn start(config: ResolvedTracing, metrics: &GatewayMetrics) -> Tracer {
    let (tracer, rx) = Tracer::new(config.sampler, QUEUE_CAPACITY);
    let exported = Arc::new(AtomicU64::new(0));
    let scraped = (tracer.clone(), Arc::clone(&exported));
    metrics.add_section(Arc::new(move |out: &mut String| {
        let (tracer, exported) = &scraped;
        let _ = write!(
            out,
            "# HELP pressure_trace_spans_exported_total Spans the OTLP receiver accepted.\n\
             # TYPE pressure_trace_spans_exported_total counter\n\
             pressure_trace_spans_exported_total {}\n\
             # HELP pressure_trace_spans_dropped_total Spans dropped: the export queue was full, or an export failed.\n\
             # TYPE pressure_trace_spans_dropped_total counter\n\
             pressure_trace_spans_dropped_total {}\n",
            exported.load(Ordering::Relaxed),
            tracer.dropped()
        );
    }));
    tracing::info!(endpoint = %config.endpoint, protocol = ?config.protocol, service = %config.service_name, "exporting traces over OTLP");
    let exporter = Exporter::new(config, tracer.clone(), exported);
    tokio::spawn(exporter.run(rx));
    tracer
}

struct Exporter {
    config: ResolvedTracing,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    tracer: Tracer,
    exported: Arc<AtomicU64>,
    resource: proto::Resource,
}

fn client_tls(h2: bool) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config =
        match rustls::ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions() {
            Ok(b) => b.with_root_certificates(roots).with_no_client_auth(),
            Err(_) => rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        };
    if h2 {
        config.alpn_protocols = vec![b"h2".to_vec()];
    }
    Arc::new(config)
}

impl Exporter {
    fn new(config: ResolvedTracing, tracer: Tracer, exported: Arc<AtomicU64>) -> Self {
        let grpc = config.protocol == OtlpProtocol::Grpc;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(EXPORT_TIMEOUT));
        http.set_nodelay(true);
        let connector = HttpsConnector::from((http, client_tls(grpc)));
        let client = Client::builder(TokioExecutor::new())
            .http2_only(grpc)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let resource = proto::Resource {
            attributes: vec![
                kv("service.name", &Value::from(config.service_name.clone())),
                kv("telemetry.sdk.name", &Value::from("pressure")),
                kv("telemetry.sdk.language", &Value::from("rust")),
            ],
        };
        Self {
            config,
            client,
            tracer,
            exported,
            resource,
        }
    }

    async fn run(self, mut rx: tokio::sync::mpsc::Receiver<SpanData>) {
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            let until = tokio::time::Instant::now() + BATCH_DELAY;
            while batch.len() < MAX_BATCH {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(span)) => batch.push(span),
                    Ok(None) | Err(_) => break,
                }
            }
            let n = u64::try_from(batch.len()).unwrap_or(u64::MAX);
            let body = self.encode(batch);
            match tokio::time::timeout(EXPORT_TIMEOUT, self.send(body)).await {
                Ok(Ok(())) => {
                    self.exported.fetch_add(n, Ordering::Relaxed);
                }
                Ok(Err(e)) => {
                    self.tracer.count_dropped(n);
                    tracing::debug!(error = %e, spans = n, "trace export failed");
                }
                Err(_) => {
                    self.tracer.count_dropped(n);
                    tracing::debug!(spans = n, "trace export timed out");
                }
            }
        }
    }

    fn encode(&self, batch: Vec<SpanData>) -> Vec<u8> {
        let req = proto::ExportTraceServiceRequest {
            resource_spans: vec![proto::ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![proto::ScopeSpans {
                    scope: Some(proto::InstrumentationScope {
                        name: "pressure".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                    }),
                    spans: batch.into_iter().map(span_of).collect(),
                }],
            }],
        };
        req.encode_to_vec()
    }

    async fn send(&self, message: Vec<u8>) -> Result<(), String> {
        let grpc = self.config.protocol == OtlpProtocol::Grpc;
        let (uri, body, content_type) = if grpc {
            let base = self.config.endpoint.to_string();
            let uri: Uri = format!(
                "{}/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                base.trim_end_matches('/')
            )
            .parse()
            .map_err(|e| format!("{e}"))?;
            let len = u32::try_from(message.len()).map_err(|_| "export too large".to_owned())?;
            let mut framed = Vec::with_capacity(message.len() + 5);
            framed.push(0);
            framed.extend_from_slice(&len.to_be_bytes());
            framed.extend_from_slice(&message);
            (uri, framed, "application/grpc")
        } else {
            (self.config.endpoint.clone(), message, "application/x-protobuf")
        };
        let mut req = Request::post(uri)
            .header(header::CONTENT_TYPE, content_type)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        if grpc {
            req.headers_mut()
                .insert(header::TE, HeaderValue::from_static("trailers"));
        }
        for (k, v) in &self.config.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("the receiver answered {status}"));
        }
        if grpc {
            // The gRPC status is in the trailers (or the head, when the
            // answer has no body).
            let head_status = resp.headers().get("grpc-status").cloned();
            let collected = resp.into_body().collect().await.map_err(|e| e.to_string())?;
            let trailer_status = collected.trailers().and_then(|t| t.get("grpc-status").cloned());
            match trailer_status.or(head_status) {
                Some(s) if s == "0" => {}
                other => return Err(format!("grpc-status {other:?}")),
            }
        } else {
            resp.into_body().collect().await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

fn any_of(v: &Value) -> proto::AnyValue {
    use proto::any_value::Value as V;
    let value = match v {
        Value::Str(s) => V::StringValue(s.to_string()),
        Value::Int(i) => V::IntValue(*i),
        Value::Float(f) => V::DoubleValue(*f),
        Value::Bool(b) => V::BoolValue(*b),
    };
    proto::AnyValue { value: Some(value) }
}

fn kv(key: &str, v: &Value) -> proto::KeyValue {
    proto::KeyValue {
        key: key.to_owned(),
        value: Some(any_of(v)),
    }
}

fn span_of(s: SpanData) -> proto::Span {
    let kind = match s.kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
    };
    proto::Span {
        trace_id: s.context.trace_id.to_vec(),
        span_id: s.context.span_id.to_vec(),
        trace_state: s.context.state.as_deref().unwrap_or("").to_owned(),
        parent_span_id: s.parent.map(|p| p.to_vec()).unwrap_or_default(),
        name: s.name.into_owned(),
        kind,
        start_time_unix_nano: s.start_unix_nanos,
        end_time_unix_nano: s.end_unix_nanos,
        attributes: s.attributes.iter().map(|(k, v)| kv(k, v)).collect(),
        events: s
            .events
            .into_iter()
            .map(|e| proto::Event {
                time_unix_nano: e.time_unix_nanos,
                name: e.name.into_owned(),
                attributes: e.attributes.iter().map(|(k, v)| kv(k, v)).collect(),
            })
            .collect(),
        status: s.error.map(|m| proto::Status {
            message: m.into_owned(),
            code: 2,
        }),
        // W3C trace flags: sampled.
        flags: 1,
    }
}
