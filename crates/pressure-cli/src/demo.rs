//! `pressure demo`: both strategies of one in-memory broker, end to end, in a
//! few seconds, with the stats surface printed at the end.

use anyhow::Context;
use pressure_core::{
    AcquireOptions, Acquisition, Attempt, Backend, BrokerStats, Limits, Priority, QueueConfig, Request,
    Reserved, ResourceBroker, ResourceConfig, TaskError,
};
use pressure_redis::{RedisBackend, RedisConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Options of `pressure demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Webhook deliveries in the flood.
    #[arg(long, default_value_t = 40)]
    flood: u32,
    /// LLM jobs queued (half interactive, half batch).
    #[arg(long, default_value_t = 24)]
    jobs: u32,
    /// Print the stats as compact JSON only (for scripts).
    #[arg(long)]
    json: bool,
    /// Count in this Redis instead of in memory (e.g. redis://127.0.0.1:6379),
    /// as a fleet of instances would.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    match args.redis.clone() {
        None => tour(ResourceBroker::new(), args).await,
        Some(url) => {
            // A 1 s call timeout, not the 50 ms default: the demo shows the
            // limits' exact counts, and on a busy machine a slow call would
            // be a fail-closed refusal that is not the limit's.
            let config = RedisConfig {
                timeout_ms: 1_000,
                ..RedisConfig::new(url)
            };
            let backend = RedisBackend::connect(config)
                .await
                .context("connecting to redis")?;
            tour(ResourceBroker::builder(backend).build(), args).await
        }
    }
}

async fn tour<B: Backend>(broker: ResourceBroker<B>, args: DemoArgs) -> anyhow::Result<()> {
    // Distinct ids per run, so runs against a shared Redis never meet.
    let run = if args.redis.is_some() {
        format!("demo-{}:", std::process::id())
    } else {
        String::new()
    };
    let tour = Tour {
        webhooks: format!("{run}gateway:route:webhooks-github"),
        llm: format!("{run}llm:mock:gpt-4o-mini"),
        broker,
        args,
    };
    tour.register()?;
    tour.flood().await?;
    tour.serve_jobs().await?;
    tour.print_stats().await
}

/// The demo's broker, its options and its two resources: a webhook route
/// (check+reject) and an LLM model (queue+execute).
struct Tour<B: Backend> {
    broker: ResourceBroker<B>,
    args: DemoArgs,
    webhooks: String,
    llm: String,
}

impl<B: Backend> Tour<B> {
    /// Registers the two resources (the model's batch kept below 75 %).
    fn register(&self) -> anyhow::Result<()> {
        self.broker.register_limit(
            &self.webhooks,
            Limits::default()
                .requests_per_second(10)
                .max_concurrent_requests(20),
        )?;
        self.broker.register(
            self.llm.as_str(),
            ResourceConfig::new(
                Limits::default()
                    .requests_per_second(8)
                    .tokens_per_minute(60_000)
                    .max_concurrent_requests(4)
                    .gcra(Some(4)),
            )
            .queue(QueueConfig {
                batch_headroom: 0.25,
                ..QueueConfig::default()
            }),
        )?;
        Ok(())
    }

    /// check+reject: a flood of webhook deliveries, answered at once.
    async fn flood(&self) -> anyhow::Result<()> {
        let mut allowed = 0;
        let mut retry_after = Duration::ZERO;
        for _ in 0..self.args.flood {
            match self
                .broker
                .try_acquire(&self.webhooks, AcquireOptions::default())
                .await?
            {
                Acquisition::Granted(_permit) => allowed += 1,
                Acquisition::Denied(d) => retry_after = retry_after.max(d.wait),
            }
        }
        if !self.args.json {
            crate::outln!(
                "check+reject  webhooks: {} deliveries in one burst",
                self.args.flood
            )?;
            crate::outln!(
                "              {allowed} allowed, {} refused with 429 (Retry-After: {}s)",
                self.args.flood - allowed,
                retry_after.as_secs_f64().ceil()
            )?;
        }
        Ok(())
    }

    /// queue+execute: LLM jobs wait their turn; the provider answers one 429.
    async fn serve_jobs(&self) -> anyhow::Result<()> {
        let throttled_once = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let mut jobs = Vec::new();
        for i in 0..self.args.jobs {
            let broker = self.broker.clone();
            let throttled_once = throttled_once.clone();
            let llm = self.llm.clone();
            let priority = if i % 2 == 0 {
                Priority::Interactive
            } else {
                Priority::Batch
            };
            jobs.push(tokio::spawn(async move {
                let request = Request::new(llm, move |a: Attempt| {
                    let throttled_once = throttled_once.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(120)).await;
                        if i == 5 && !throttled_once.swap(true, Ordering::SeqCst) {
                            return Err(TaskError::RateLimited {
                                retry_after: Some(Duration::from_millis(300)),
                                error: "429 from provider",
                            });
                        }
                        a.usage.set(Reserved {
                            requests: 1,
                            input_tokens: 420,
                            output_tokens: 180,
                            cost_micro_usd: 0,
                        });
                        Ok(format!("answer {i}"))
                    }
                })
                .priority(priority)
                .tokens(420, 1_000);
                let started = Instant::now();
                broker
                    .enqueue(request)
                    .await
                    .map(|r| (priority, r.attempts, started.elapsed()))
            }));
        }
        let mut done = 0;
        let mut retried = 0;
        let mut slowest = [Duration::ZERO; 2];
        for j in jobs {
            let (priority, attempts, took) = j.await.context("job task")??;
            done += 1;
            retried += u32::from(attempts > 1);
            let k = usize::from(priority == Priority::Batch);
            slowest[k] = slowest[k].max(took);
        }
        if !self.args.json {
            crate::outln!(
                "queue+execute llm: {done}/{} jobs served in {:.2}s at 8 req/s, 4 at a time; {retried} retried after a provider 429",
                self.args.jobs,
                t0.elapsed().as_secs_f64()
            )?;
            crate::outln!(
                "              slowest interactive {:.2}s, slowest batch {:.2}s",
                slowest[0].as_secs_f64(),
                slowest[1].as_secs_f64()
            )?;
        }
        Ok(())
    }

    /// The stats surface, pretty (or compact JSON only with `--json`).
    async fn print_stats(&self) -> anyhow::Result<()> {
        if !self.args.json {
            crate::outln!("\nstats:")?;
        }
        let stats = BrokerStats {
            resources: self.broker.stats().await,
        };
        if self.args.json {
            crate::outln!("{}", serde_json::to_string(&stats)?)?;
        } else {
            crate::outln!("{}", serde_json::to_string_pretty(&stats)?)?;
        }
        Ok(())
    }
}
