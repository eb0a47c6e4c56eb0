//! Added latency of the gateway's LLM path (`POST /v1/chat/completions`
//! through the pipeline) compared with calling the provider directly.
//!
//! Everything runs in this one process, on 127.0.0.1, on three separate tokio
//! runtimes:
//!
//! * **mock** (1 worker thread): an axum OpenAI-compatible provider that
//!   answers a fixed small `chat.completion` with `usage`, after a think
//!   time (0 ms or 20 ms per case; set through an atomic, so one mock serves
//!   every case);
//! * **gateway** (`--gateway-threads`, default 2 worker threads): the real
//!   gateway, `Gateway::build` + `Gateway::serve`, memory backend (the default),
//!   `pressure.enabled`, one use case `bench` → model `mock/m` whose limits
//!   are never reached (`window` algorithm, 10^12 requests and tokens per
//!   minute) and a provider pool of 4096 connections (the default 64 would
//!   queue 500 concurrent calls and measure the pool, not the overhead);
//! * **client** (2 worker threads): `C` concurrent workers sharing one
//!   hyper-util pooled keep-alive client, each sending the same request
//!   back to back until `--requests` are done; each request's latency (send
//!   → whole body read) goes into a per-worker hdrhistogram (µs).
//!
//! First a serial baseline (`--baseline` requests at concurrency 1, think
//! 0; `--baseline 0` skips it), then for every think time and every
//! concurrency, it runs the mock directly (`direct`) and the gateway
//! (`gateway`), each after an unmeasured warm-up that opens the connections, and prints p50 / p99 / p99.9 and the
//! throughput of each, then the added latency (gateway − direct) at p50 and
//! p99 against the goal (p99 overhead < 1 ms).
//!
//! ```text
//! cargo run --release -p pressure-gateway --example llm_overhead -- \
//!     [--requests 20000] [--warmup 2000] [--concurrency 100,500] [--think-ms 0,20] [--gateway-threads 2] [--baseline 5000]
//! ```
//!
//! `benches/llm-overhead.sh` builds and runs it. Note that client, gateway
//! and mock share the machine's cores: on a small box the gateway's numbers
//! include CPU contention with the load generator.

use axum::body::Bytes as AxumBytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pressure_gateway::{Gateway, Serving};
use serde_json::json;
use std::error::Error;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;

type BoxError = Box<dyn Error + Send + Sync>;
type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The provider's answer: a small non-streamed completion with usage.
const COMPLETION: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#;

/// The client's request, the same for both targets (the gateway reads
/// `model` as the use case; the mock ignores the body).
const REQUEST: &str = r#"{"model":"bench","messages":[{"role":"user","content":"hello"}],"max_tokens":16}"#;

/// Histogram bounds, in µs: 1 µs .. 60 s, 3 significant digits.
const HIST_MAX_US: u64 = 60_000_000;

struct Options {
    requests: usize,
    warmup: usize,
    concurrency: Vec<usize>,
    think_ms: Vec<u64>,
    gateway_threads: usize,
    baseline: usize,
}

fn parse_list<T: std::str::FromStr>(s: &str) -> Result<Vec<T>, BoxError>
where
    T::Err: Error + Send + Sync + 'static,
{
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| p.trim().parse::<T>().map_err(Into::into))
        .collect()
}

fn options() -> Result<Options, BoxError> {
    let mut o = Options {
        requests: 20_000,
        warmup: 2_000,
        concurrency: vec![100, 500],
        think_ms: vec![0, 20],
        gateway_threads: 2,
        baseline: 5_000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--requests" => o.requests = value.parse()?,
            "--warmup" => o.warmup = value.parse()?,
            "--concurrency" => o.concurrency = parse_list(&value)?,
            "--think-ms" => o.think_ms = parse_list(&value)?,
            "--gateway-threads" => o.gateway_threads = value.parse()?,
            "--baseline" => o.baseline = value.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if o.requests == 0 || o.concurrency.is_empty() || o.think_ms.is_empty() || o.gateway_threads == 0 {
        return Err("requests, concurrency, think-ms and gateway-threads must be non-empty / > 0".into());
    }
    Ok(o)
}

fn runtime(name: &str, threads: usize) -> Result<tokio::runtime::Runtime, BoxError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()?)
}

// ---------------------------------------------------------------- mock provider

async fn chat(State(think_ms): State<Arc<AtomicU64>>, _body: AxumBytes) -> Response {
    let think = think_ms.load(Ordering::Relaxed);
    if think > 0 {
        tokio::time::sleep(Duration::from_millis(think)).await;
    }
    ([(http::header::CONTENT_TYPE, "application/json")], COMPLETION).into_response()
}

async fn start_mock(think_ms: Arc<AtomicU64>) -> Result<SocketAddr, BoxError> {
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .with_state(think_ms);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

// ---------------------------------------------------------------- gateway

async fn start_gateway(mock: SocketAddr) -> Result<(SocketAddr, Serving), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let admin = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let huge: u64 = 1_000_000_000_000;
    let section = json!({
        "listen": addr.to_string(),
        "admin": { "listen": admin.local_addr()?.to_string() },
        "upstreams": { "mock": { "url": format!("http://{mock}"), "pathPrefix": "/api" } },
        "pressure": { "enabled": true },
        "llm": {
            "providers": { "mock": {
                "baseUrl": format!("http://{mock}/v1"),
                "timeouts": { "maxConnections": 4096, "poolWaitMs": 10_000 }
            } },
            "models": [ {
                "provider": "mock", "model": "m",
                "limits": { "requestsPerMinute": huge, "inputTokensPerMinute": huge,
                            "outputTokensPerMinute": huge, "algorithm": "window" },
                "context": { "contextTokens": 8192, "maxOutputTokens": 512 },
                "price": { "inputMicroUsdPer1M": 1_000_000, "outputMicroUsdPer1M": 2_000_000 }
            } ],
            "useCases": { "bench": { "chain": [ { "model": "mock/m" } ] } }
        }
    });
    let text = json!({ "gateway": section }).to_string();
    let config = pressure_gateway::config::parse_in(&text, Path::new("."))
        .map_err(|e| format!("invalid gateway config: {e}\n{text}"))?;
    let gateway = Gateway::build(config, Path::new(".")).await?;
    if gateway.llm().is_none() {
        return Err("gateway.llm built no client".into());
    }
    Ok((addr, gateway.spawn(listener, admin)))
}

// ---------------------------------------------------------------- load

struct RunResult {
    hist: Histogram<u64>,
    errors: u64,
    elapsed: Duration,
}

fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .build(connector)
}

/// One request: status, and the latency in µs (send → whole body read).
async fn one(client: &HttpClient, url: &str) -> Result<(StatusCode, u64), BoxError> {
    let req = Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(REQUEST.as_bytes())))?;
    let started = Instant::now();
    let resp = client.request(req).await?;
    let status = resp.status();
    let _ = resp.into_body().collect().await?.to_bytes();
    let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    Ok((status, us))
}

/// `total` requests against `url` from `concurrency` workers.
async fn run(
    client: &HttpClient,
    url: &str,
    concurrency: usize,
    total: usize,
) -> Result<RunResult, BoxError> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let client = client.clone();
        let url = url.to_owned();
        let next = Arc::clone(&next);
        workers.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, HIST_MAX_US, 3)?;
            let mut errors = 0u64;
            while next.fetch_add(1, Ordering::Relaxed) < total {
                match one(&client, &url).await {
                    Ok((StatusCode::OK, us)) => hist.saturating_record(us.max(1)),
                    Ok(_) | Err(_) => errors += 1,
                }
            }
            Ok::<_, BoxError>((hist, errors))
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, HIST_MAX_US, 3)?;
    let mut errors = 0;
    for w in workers {
        let (h, e) = w.await??;
        hist.add(&h)?;
        errors += e;
    }
    Ok(RunResult {
        hist,
        errors,
        elapsed: started.elapsed(),
    })
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn main() -> Result<(), BoxError> {
    let o = options()?;
    let mock_rt = runtime("mock", 1)?;
    let gateway_rt = runtime("gateway", o.gateway_threads)?;
    let client_rt = runtime("client", 2)?;

    let think_ms = Arc::new(AtomicU64::new(0));
    let mock = mock_rt.block_on(start_mock(Arc::clone(&think_ms)))?;
    let (gateway, serving) = gateway_rt.block_on(start_gateway(mock))?;

    let direct_url = format!("http://{mock}/v1/chat/completions");
    let gateway_url = format!("http://{gateway}/v1/chat/completions");

    // One sanity call through the gateway: it must be the pipeline's answer.
    client_rt.block_on(async {
        let req = Request::post(&gateway_url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from_static(REQUEST.as_bytes())))?;
        let resp = client().request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&body);
        if status != StatusCode::OK || !text.contains("\"pressure\"") || !text.contains("hello there") {
            return Err(format!("gateway sanity call failed: {status} {text}").into());
        }
        Ok::<_, BoxError>(())
    })?;

    println!(
        "llm-overhead: {} requests per run (+{} warm-up), {} cores, gateway runtime {} threads, client 2, mock 1",
        o.requests,
        o.warmup,
        std::thread::available_parallelism().map_or(0, usize::from),
        o.gateway_threads
    );
    println!();
    println!(
        "{:>8} {:>5} {:<8} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9}",
        "think_ms", "conc", "target", "requests", "errors", "req/s", "p50_ms", "p99_ms", "p99.9_ms"
    );
    // (think time, concurrency, requests): the serial baseline first.
    let mut cases = Vec::new();
    if o.baseline > 0 {
        cases.push((0, 1, o.baseline));
    }
    for &think in &o.think_ms {
        for &conc in &o.concurrency {
            cases.push((think, conc, o.requests));
        }
    }
    let mut overheads = Vec::new();
    for (think, conc, requests) in cases {
        think_ms.store(think, Ordering::Relaxed);
        let mut p = [(0u64, 0u64); 2];
        for (i, (target, url)) in [("direct", &direct_url), ("gateway", &gateway_url)]
            .into_iter()
            .enumerate()
        {
            let r = client_rt.block_on(async {
                // A fresh pooled client per run; the warm-up opens its
                // `conc` connections (and the gateway's to the mock).
                let c = client();
                run(&c, url, conc, o.warmup.max(conc)).await?;
                run(&c, url, conc, requests).await
            })?;
            let h = &r.hist;
            let (p50, p99, p999) = (
                h.value_at_quantile(0.50),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
            );
            p[i] = (p50, p99);
            println!(
                "{:>8} {:>5} {:<8} {:>8} {:>6} {:>9.0} {:>9.3} {:>9.3} {:>9.3}",
                think,
                conc,
                target,
                h.len(),
                r.errors,
                h.len() as f64 / r.elapsed.as_secs_f64(),
                ms(p50),
                ms(p99),
                ms(p999)
            );
        }
        overheads.push((think, conc, p[0], p[1]));
    }
    println!();
    println!("added latency (gateway - direct), goal: p99 overhead < 1 ms");
    println!(
        "{:>8} {:>5} {:>13} {:>13} {:>6}",
        "think_ms", "conc", "p50_added_ms", "p99_added_ms", "goal"
    );
    for (think, conc, direct, gateway) in overheads {
        let d50 = ms(gateway.0) - ms(direct.0);
        let d99 = ms(gateway.1) - ms(direct.1);
        println!(
            "{:>8} {:>5} {:>13.3} {:>13.3} {:>6}",
            think,
            conc,
            d50,
            d99,
            if d99 < 1.0 { "met" } else { "missed" }
        );
    }

    gateway_rt.block_on(serving.stop(Duration::from_secs(5)));
    client_rt.shutdown_timeout(Duration::from_secs(1));
    gateway_rt.shutdown_timeout(Duration::from_secs(1));
    mock_rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
