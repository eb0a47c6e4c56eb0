//! `POST /v1/acquire`: check+reject over the wire, or with `waitMs > 0`
//! "wait up to `waitMs`, then reject" (the core's `acquire_within`, which
//! retries at each denial's wait time; a resource registered with
//! `register_limit` has no priority queue to wait in). A client that goes
//! away while waiting drops the handler's future: nothing was reserved yet,
//! or the grant is dropped with it and its lease released.

use super::{resolve, DecisionState};
use crate::metrics::Layer;
use crate::rejection::{Dialect, RateLimited, Rejection};
use crate::resources;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pressure_core::{AcquireOptions, Acquisition, Denial, Error, Priority};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Longest `waitMs` accepted (five minutes): a longer wait belongs in a
/// queue, not in an open HTTP request.
pub(crate) const MAX_WAIT_MS: u64 = 300_000;

/// The body of `POST /v1/acquire`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AcquireBody {
    resource: String,
    #[serde(default = "one")]
    requests: u64,
    /// Tokens whose split is unknown: counted as input tokens.
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    lease: bool,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    priority: Priority,
}

fn one() -> u64 {
    1
}

/// `200` of `POST /v1/acquire`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Granted {
    allowed: bool,
    permit: Option<String>,
    lease_ttl_ms: Option<u64>,
}

/// Parses a JSON body of type `T`; a problem names its JSON path.
pub(super) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Rejection> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." || path == "?" {
            "body".to_owned()
        } else {
            path
        };
        Rejection::BadRequest(format!("{at}: {}", e.inner()).into())
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) async fn acquire(State(state): State<DecisionState>, body: Bytes) -> Response {
    match decide(&state, &body).await {
        Ok(granted) => Json(granted).into_response(),
        Err(r) => state.refuse(r, Dialect::Decision),
    }
}

async fn decide(state: &DecisionState, body: &[u8]) -> Result<Granted, Rejection> {
    let req: AcquireBody = parse(body)?;
    let input = match (req.tokens, req.input_tokens) {
        (Some(_), Some(_)) => {
            return Err(Rejection::BadRequest(
                "tokens: give either tokens or inputTokens, not both".into(),
            ))
        }
        (t, i) => t.or(i).unwrap_or(0),
    };
    if req.wait_ms > MAX_WAIT_MS {
        return Err(Rejection::BadRequest(
            format!("waitMs: must be at most {MAX_WAIT_MS}").into(),
        ));
    }
    let plan = state.plan.load_full();
    let handle = resolve(&plan, &state.broker, &req.resource)?;
    let opts = AcquireOptions::default()
        .requests(req.requests)
        .tokens(input, req.output_tokens)
        .priority(req.priority);
    let outcome = if req.wait_ms == 0 {
        handle.try_acquire(opts).await.map(|a| match a {
            Acquisition::Granted(p) => Ok(p),
            Acquisition::Denied(d) => Err(d),
        })
    } else {
        match state
            .broker
            .acquire_within(&req.resource, opts, Duration::from_millis(req.wait_ms))
            .await
        {
            Ok(p) => Ok(Ok(p)),
            Err(Error::WaitExceeded { last, .. }) => Ok(Err(last)),
            Err(e) => Err(e),
        }
    };
    let namespace =
        resources::is_tenant(&req.resource).then(|| &req.resource[resources::TENANT_PREFIX.len()..]);
    let permit = match outcome {
        Ok(Ok(p)) => p,
        Ok(Err(d)) => return Err(denied(&handle, &d, namespace)),
        Err(e) => return Err(core_error(&req.resource, e)),
    };
    state.metrics.allowed(Layer::Decision);
    if !(req.lease || handle.spec().concurrency.is_some()) {
        // Nothing to give back or correct later: the permit is inert
        // (rate limits only) or the caller did not ask for it.
        return Ok(Granted {
            allowed: true,
            permit: None,
            lease_ttl_ms: None,
        });
    }
    let ttl = match permit.lease_ttl() {
        Duration::ZERO => Duration::from_nanos(handle.spec().lease_ttl_ns),
        ttl => ttl,
    };
    match state.permits.insert(permit, ttl) {
        Ok(id) => Ok(Granted {
            allowed: true,
            permit: Some(id),
            lease_ttl_ms: Some(millis(ttl)),
        }),
        // The permit comes back and is dropped here: its slot is free again.
        Err((_, permit)) => {
            drop(permit);
            Err(Rejection::TooManyPermits {
                max: state.permits.max(),
            })
        }
    }
}

/// A denial as the decision dialect's 429 (or a 503 for an outage).
fn denied(
    handle: &pressure_core::ResourceHandle<crate::backend::AnyBackend>,
    d: &Denial,
    namespace: Option<&str>,
) -> Rejection {
    if d.is_unavailable() {
        return Rejection::LimiterUnavailable {
            resource: handle.id().to_owned(),
            layer: Layer::Decision,
            retry_after: d.wait.max(Duration::from_secs(1)),
            reason: "the limiter store is unavailable".into(),
        };
    }
    Rejection::RateLimited(Box::new(RateLimited::new(
        handle.id(),
        handle.limits(),
        d,
        Layer::Decision,
        namespace,
    )))
}

/// A broker error as a refusal: a demand that can never fit is the
/// client's fault (400), anything else the limiter's (503).
pub(super) fn core_error(resource: &str, e: Error) -> Rejection {
    match e {
        Error::DemandTooLarge { .. } => Rejection::BadRequest(e.to_string().into()),
        Error::UnknownResource(id) => Rejection::UnknownResource(id),
        e => Rejection::LimiterUnavailable {
            resource: resource.to_owned(),
            layer: Layer::Decision,
            retry_after: Duration::from_secs(1),
            reason: e.to_string(),
        },
    }
}
