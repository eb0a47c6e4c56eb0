//! `POST /v1/acquire`: check+reject over the wire, or with `waitMs > 0`
//! "wait up to `waitMs`, then reject" (the core's `acquire_within`, which
//! retries at each denial's wait time; a resource registered with
//! `register_limit` has no priority queue to wait in). A client that goes
//! away while waiting drops the handler's future: nothing was reserved yet,
//! or the grant is dropped with it and its lease released.
//!
//! An acquisition that would hold a permit reserves its place in the permit
//! store first: a full store is a `503 too_many_permits` that consumed
//! nothing, and the place goes back with a denial or a dropped future.

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
    #[serde(default = "one", deserialize_with = "count")]
    requests: u64,
    /// Tokens whose split is unknown: counted as input tokens.
    #[serde(default, deserialize_with = "optional_count")]
    tokens: Option<u64>,
    #[serde(default, deserialize_with = "optional_count")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    output_tokens: u64,
    #[serde(default)]
    lease: bool,
    #[serde(default, deserialize_with = "count")]
    wait_ms: u64,
    #[serde(default)]
    priority: Priority,
}

/// The largest count a body may carry: 2^53 − 1, the largest integer a
/// JSON number carries exactly in every client (and in a Redis script's
/// arithmetic); anything larger is no real count.
pub(super) const MAX_COUNT: u64 = (1 << 53) - 1;

/// What a count must be, in the message of a `400`.
const COUNT: &str = "a whole number from 0 to 9007199254740991";

/// A count of a body: a JSON integer from 0 to [`MAX_COUNT`]; a negative,
/// fractional, huge or non-numeric value is an error naming what a count
/// is (never a wrapped or truncated number).
pub(super) fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct Count;
    impl serde::de::Visitor<'_> for Count {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(COUNT)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            if v > MAX_COUNT {
                return Err(E::invalid_value(serde::de::Unexpected::Unsigned(v), &self));
            }
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
            }
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<u64, E> {
            Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
        }
    }
    d.deserialize_u64(Count)
}

/// An optional [`count`]: absent or `null` is `None`.
pub(super) fn optional_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    struct Wrapped(#[serde(deserialize_with = "count")] u64);
    Ok(Option::<Wrapped>::deserialize(d)?.map(|Wrapped(n)| n))
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

/// Parses a JSON body of type `T`, which must be one JSON object (serde
/// would take a struct from an array too: `["jobs"]`, `[7, 3]`) and
/// nothing after it; a problem names its JSON path.
pub(super) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Rejection> {
    let first = body.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err(Rejection::BadRequest("body: must be a JSON object".into()));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let at = |path: String| {
        if path == "." || path == "?" {
            "body".to_owned()
        } else {
            path
        }
    };
    let value = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| Rejection::BadRequest(format!("{}: {}", at(e.path().to_string()), e.inner()).into()))?;
    de.end()
        .map_err(|e| Rejection::BadRequest(format!("body: {e}").into()))?;
    Ok(value)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) async fn acquire(State(state): State<DecisionState>, body: Bytes) -> Response {
    let outcome = decide(&state, &body)
        .await
        .map(|granted| Json(granted).into_response());
    state.answer(Dialect::Decision, outcome)
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
    // A permit is held for the caller when it asked for one or the
    // resource limits concurrency (a slot must be given back); a
    // rate-only grant has nothing to give back. Its place in the store is
    // reserved before anything is acquired: a full store refuses with
    // nothing consumed, and a denial or a caller gone mid-request drops
    // the reservation.
    let slot = if req.lease || handle.spec().concurrency.is_some() {
        Some(state.permits.reserve().map_err(|_| Rejection::TooManyPermits {
            max: state.permits.max(),
        })?)
    } else {
        None
    };
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
        // A shadow limit's refusal is admitted (with a permit that holds
        // nothing), counted as what enforcing would have refused.
        Ok(Err(d)) if handle.limits().shadow && !d.is_unavailable() => {
            let shadow = crate::metrics::shadow::ShadowDenial {
                resource: handle.id(),
                layer: Layer::Decision,
                dimension: d.dimension.as_str(),
                wait: d.wait,
                namespace_id: namespace,
            };
            state.metrics.shadow_denied(&shadow, plan.denial_lines());
            handle.admit_shadow_denial()
        }
        Ok(Err(d)) => return Err(denied(&handle, &d, namespace)),
        Err(e) => return Err(core_error(&req.resource, e)),
    };
    state.metrics.allowed(Layer::Decision);
    let Some(slot) = slot else {
        // Nothing to give back or correct later: the permit is inert
        // (rate limits only) or the caller did not ask for it.
        return Ok(Granted {
            allowed: true,
            permit: None,
            lease_ttl_ms: None,
        });
    };
    let ttl = match permit.lease_ttl() {
        Duration::ZERO => Duration::from_nanos(handle.spec().lease_ttl_ns),
        ttl => ttl,
    };
    Ok(Granted {
        allowed: true,
        permit: Some(slot.fill(permit, ttl)),
        lease_ttl_ms: Some(millis(ttl)),
    })
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
