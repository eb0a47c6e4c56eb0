//! [`NativeBroker`]: one `ResourceBroker` over memory or Redis, with the
//! core's calls as napi methods (`index.js` gives them the original
//! design's names and shapes).

use crate::acquisition::{Denied, NativeAcquisition};
use crate::error;
use crate::options::{self, ConnectOptions, RegisterOptions};
use crate::task::{self, RunAttempt};
use futures::FutureExt;
use napi::bindgen_prelude::Either3;
use napi_derive::napi;
use pressure_core::{
    Acquisition, BrokerStats, LimitTemplate, Limits, MemoryBackend, ResourceBroker, ResourceConfig,
};
use pressure_redis::{AnyBackend, RedisBackend};

/// The broker: its resources, queues and counters, on one backend.
#[napi]
pub struct NativeBroker {
    broker: ResourceBroker<AnyBackend>,
    memory: bool,
}

#[napi]
impl NativeBroker {
    /// A broker whose state lives in this process.
    #[napi(constructor)]
    pub fn new() -> Self {
        crate::runtime::init();
        Self {
            broker: ResourceBroker::builder(AnyBackend::Memory(MemoryBackend::new())).build(),
            memory: true,
        }
    }

    /// A broker whose state lives in Redis (or a Redis Cluster when
    /// `redis.clusterNodes` is set), shared by every process that uses the
    /// same Redis. `options` is JSON: `{"redis": RedisConfig, "strict"}`.
    #[napi(factory)]
    pub async fn connect(options: String) -> napi::Result<NativeBroker> {
        crate::runtime::init();
        let o: ConnectOptions = options::parse("options", &options)?;
        if let Err(e) = o.redis.validate() {
            return Err(error::config(format!("redis.{e}")));
        }
        let backend = if o.strict {
            RedisBackend::connect(o.redis).await
        } else {
            RedisBackend::start(o.redis).await
        }
        .map_err(|e| error::broker(e.into()))?;
        Ok(Self {
            broker: ResourceBroker::builder(AnyBackend::Redis(backend)).build(),
            memory: false,
        })
    }

    /// Whether the state is in this process (`true`) or in Redis.
    #[napi(getter)]
    pub fn memory(&self) -> bool {
        self.memory
    }

    /// Registers a queue resource: `options` is JSON `{"limits", "queue"}`.
    #[napi]
    pub fn register(&self, resource: String, options: String) -> napi::Result<()> {
        let o: RegisterOptions = options::parse("options", &options)?;
        self.broker
            .register(resource, ResourceConfig::new(o.limits).queue(o.queue))
            .map_err(error::broker)
    }

    /// Registers a limit-only resource: `limits` is JSON.
    #[napi]
    pub fn register_limit(&self, resource: String, limits: String) -> napi::Result<()> {
        let l: Limits = options::parse("limits", &limits)?;
        self.broker.register_limit(resource, l).map_err(error::broker)
    }

    /// Registers `resource` with `template`'s limits on first use (a
    /// per-tenant resource), bounded in number: idle lazy resources are
    /// evicted past the broker's bound (the core's `lazy_limit`).
    #[napi]
    pub fn lazy_limit(&self, resource: String, template: &NativeLimitTemplate) -> napi::Result<()> {
        self.broker
            .lazy_limit(&resource, &template.template)
            .map(drop)
            .map_err(error::broker)
    }

    /// Removes a resource; its outstanding permits still release. Returns
    /// whether it was registered.
    #[napi]
    pub fn unregister(&self, resource: String) -> bool {
        self.broker.unregister(&resource)
    }

    /// Check+reject answered without a thread hop when the backend is in
    /// memory. The cheapest answer that says it all: `1` for a grant that
    /// holds nothing (a resource with only request-rate limits: nothing to
    /// release or reconcile), a plain [`Denied`] object for a denial, a
    /// [`NativeAcquisition`] for a grant that holds capacity, and `0` on
    /// Redis (call [`NativeBroker::try_acquire`]).
    #[napi]
    pub fn try_acquire_now(
        &self,
        resource: String,
        requests: f64,
        input_tokens: f64,
        output_tokens: f64,
        cost_micro_usd: f64,
        batch: bool,
    ) -> napi::Result<Either3<f64, Denied, NativeAcquisition>> {
        if !self.memory {
            return Ok(Either3::A(0.0));
        }
        let opts = options::demand(requests, input_tokens, output_tokens, cost_micro_usd, batch)?;
        // The memory backend answers at once; the runtime's context lets a
        // concurrency permit register with the broker's renewal task.
        let polled = crate::runtime::within(|| self.broker.try_acquire(&resource, opts).now_or_never());
        Ok(match polled.transpose().map_err(error::broker)? {
            None => Either3::A(0.0),
            Some(a) => answer(a, true),
        })
    }

    /// Check+reject: reserve now or get a denial with its wait time (in the
    /// forms of [`NativeBroker::try_acquire_now`]). A denial consumes nothing.
    #[napi]
    pub async fn try_acquire(
        &self,
        resource: String,
        requests: f64,
        input_tokens: f64,
        output_tokens: f64,
        cost_micro_usd: f64,
        batch: bool,
    ) -> napi::Result<Either3<f64, Denied, NativeAcquisition>> {
        let opts = options::demand(requests, input_tokens, output_tokens, cost_micro_usd, batch)?;
        let acq = self
            .broker
            .try_acquire(&resource, opts)
            .await
            .map_err(error::broker)?;
        Ok(answer(acq, self.memory))
    }

    /// Queue+execute: waits in the resource's priority queue, calls `run`
    /// (the JavaScript task, once per attempt) and retries it when it reports
    /// a rate limit. Resolves to JSON `{"waitTimeMs", "attempts"}`.
    #[napi]
    // Positional numbers from index.js, which checks and names them.
    #[allow(clippy::too_many_arguments)]
    pub async fn enqueue(
        &self,
        resource: String,
        input_tokens: f64,
        output_tokens: f64,
        cost_micro_usd: f64,
        batch: bool,
        max_wait_ms: Option<f64>,
        run: RunAttempt,
    ) -> napi::Result<String> {
        // One request per enqueue, as in the core's `Request`.
        let opts = options::demand(1.0, input_tokens, output_tokens, cost_micro_usd, batch)?;
        let max_wait = max_wait_ms.map(|m| options::units("maxWaitMs", m)).transpose()?;
        task::enqueue(&self.broker, resource, opts, max_wait, run).await
    }

    /// Every resource's snapshot as JSON `{"resources": [...]}` (usage read
    /// from the backend).
    #[napi]
    pub async fn stats(&self) -> napi::Result<String> {
        let resources = self.broker.stats().await;
        serde_json::to_string(&BrokerStats { resources }).map_err(|e| error::config(e.to_string()))
    }
}

/// The cheapest JavaScript form of an answer: `1` for a grant that holds
/// nothing, a plain [`Denied`] object, or a [`NativeAcquisition`] that owns
/// the permit.
fn answer(acq: Acquisition<AnyBackend>, memory: bool) -> Either3<f64, Denied, NativeAcquisition> {
    match acq {
        Acquisition::Denied(d) => Either3::B(Denied::from(&d)),
        Acquisition::Granted(p) if p.resource().is_none() => Either3::A(1.0),
        a => Either3::C(NativeAcquisition::new(a, memory)),
    }
}

/// Limits checked once, for resources registered lazily (per tenant).
#[napi]
pub struct NativeLimitTemplate {
    template: LimitTemplate,
}

#[napi]
impl NativeLimitTemplate {
    /// Parses and checks `limits` (JSON); the error names the key.
    #[napi(constructor)]
    pub fn new(limits: String) -> napi::Result<Self> {
        let l: Limits = options::parse("limits", &limits)?;
        let template = LimitTemplate::new(&l).map_err(|source| {
            error::broker(pressure_core::Error::InvalidLimits {
                resource: "(template)".into(),
                source,
            })
        })?;
        Ok(Self { template })
    }
}

impl Default for NativeBroker {
    fn default() -> Self {
        Self::new()
    }
}
