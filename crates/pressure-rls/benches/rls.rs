//! Decisions per second and latency percentiles of `ShouldRateLimit` over
//! gRPC (a tonic client on loopback), on the memory and the Redis backend,
//! next to the same decision called in-process (no gRPC: what the network
//! layer costs) measured in the same run, phases interleaved.
//!
//! `cargo bench -p pressure-rls --bench rls` (Redis: the testkit's own
//! `redis-server`, or `PRESSURE_REDIS_URL`). Environment: `RLS_BENCH_SECS`
//! per phase (default 3), `RLS_BENCH_ROUNDS` (default 2),
//! `RLS_BENCH_CONCURRENCY` in-flight calls (default 16). Wall-clock numbers
//! move with the machine; compare the ratios within one run.

use hdrhistogram::Histogram;
use pressure_core::ResourceBroker;
use pressure_redis::{AnyBackend, RedisBackend, RedisConfig};
use pressure_rls::proto::{Code, RateLimitDescriptor, RateLimitRequest};
use pressure_rls::{Plan, RateLimitClient, RateLimitServiceServer, RateLimiter};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const YAML: &str = "domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
  - key: blocked
    rate_limit:
      unit: minute
      requests_per_unit: 1
";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn request(key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor::of([(key, value)])],
        hits_addend: 0,
    }
}

struct Run {
    decisions: u64,
    /// Calls answered with an error (the store timed out: failure mode).
    errors: u64,
    secs: f64,
    hist: Histogram<u64>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.decisions as f64 / self.secs
    }
    fn p(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1_000.0
    }
}

async fn limiter(backend: AnyBackend) -> Arc<RateLimiter<AnyBackend>> {
    let plan = Plan::from_texts(&[("bench.yaml".into(), YAML.into())]).expect("plan");
    Arc::new(RateLimiter::new(ResourceBroker::builder(backend).build(), plan))
}

async fn serve(l: Arc<RateLimiter<AnyBackend>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(l))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

/// `conc` callers for `secs`, each calling `call` in a loop.
async fn drive<F, Fut>(conc: u64, secs: u64, call: F) -> Run
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Option<bool>> + Send,
{
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for w in 0..conc {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            let (mut n, mut errors) = (0u64, 0u64);
            while Instant::now() < end {
                let t = Instant::now();
                match call(w).await {
                    Some(expected) => assert!(expected, "unexpected answer"),
                    None => errors += 1,
                }
                let _ = hist.record(t.elapsed().as_nanos() as u64);
                n += 1;
            }
            (n, errors, hist)
        }));
    }
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let (mut decisions, mut errors) = (0, 0);
    for t in tasks {
        let (n, e, h) = t.await.expect("worker");
        decisions += n;
        errors += e;
        hist.add(h).expect("merge");
    }
    Run {
        decisions,
        errors,
        secs: start.elapsed().as_secs_f64(),
        hist,
    }
}

async fn grpc_phase(url: &str, conc: u64, secs: u64, key: &'static str) -> Run {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let over = key == "blocked";
    // The one request a minute of each `blocked` value is taken here.
    let mut warm = RateLimitClient::new(channel.clone());
    for w in 0..conc {
        warm.should_rate_limit(request(key, &format!("c{w}")))
            .await
            .expect("answer");
    }
    drive(conc, secs, move |w| {
        let mut c = RateLimitClient::new(channel.clone());
        async move {
            let r = c.should_rate_limit(request(key, &format!("c{w}"))).await.ok()?;
            Some((r.overall_code == Code::OverLimit as i32) == over)
        }
    })
    .await
}

async fn direct_phase(l: &Arc<RateLimiter<AnyBackend>>, conc: u64, secs: u64, key: &'static str) -> Run {
    let l = Arc::clone(l);
    let over = key == "blocked";
    for w in 0..conc {
        let _ = l.should_rate_limit(&request(key, &format!("c{w}"))).await;
    }
    drive(conc, secs, move |w| {
        let l = Arc::clone(&l);
        async move {
            let r = l.should_rate_limit(&request(key, &format!("c{w}"))).await.ok()?;
            Some((r.overall_code == Code::OverLimit as i32) == over)
        }
    })
    .await
}

fn row(name: &str, r: &Run, peer: Option<&Run>) {
    let ratio = peer.map_or(String::new(), |p| format!("{:.2}×", r.rate() / p.rate()));
    println!(
        "| {name} | {:>10.0} | {:>8.1} | {:>8.1} | {:>8.1} | {} | {ratio} |",
        r.rate(),
        r.p(0.5),
        r.p(0.99),
        r.p(0.999),
        r.errors
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    eprintln!("{}", pressure_testkit::machine("before"));
    rt.block_on(async {
        let secs = env("RLS_BENCH_SECS", 3);
        let rounds = env("RLS_BENCH_ROUNDS", 2);
        let conc = env("RLS_BENCH_CONCURRENCY", 16);
        let mem = limiter(AnyBackend::Memory(pressure_core::MemoryBackend::new())).await;
        let mem_url = serve(Arc::clone(&mem)).await;
        let redis_url = std::env::var("PRESSURE_REDIS_URL").unwrap_or_else(|_| pressure_testkit::redis_url());
        let mut rc = RedisConfig::new(redis_url);
        rc.key_prefix = format!("rls-bench-{}", std::process::id());
        let redis = limiter(AnyBackend::Redis(RedisBackend::connect(rc).await.expect("redis"))).await;
        let redis_url = serve(Arc::clone(&redis)).await;
        println!("{conc} calls in flight, {secs} s per phase, {rounds} rounds interleaved");
        println!("| case | decisions/s | p50 µs | p99 µs | p99.9 µs | errors | gRPC / in-process |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for round in 1..=rounds {
            for (backend, l, url) in [("memory", &mem, &mem_url), ("redis", &redis, &redis_url)] {
                for (path, key) in [("OK", "client"), ("OVER_LIMIT", "blocked")] {
                    let direct = direct_phase(l, conc, secs, key).await;
                    let grpc = grpc_phase(url, conc, secs, key).await;
                    row(&format!("r{round} {backend} {path} in-process"), &direct, None);
                    row(&format!("r{round} {backend} {path} gRPC"), &grpc, Some(&direct));
                }
            }
        }
    });
    eprintln!("{}", pressure_testkit::machine("after"));
}
