//! `POST /v1/chat/completions`: read and check the body, run the pipeline,
//! answer with the completion, the stream or a refusal in OpenAI's shape;
//! one JSON log line per event (target `pressure::llm`) with its id, use
//! case, the level that answered, the attempts and the time taken.

use super::body::{invalid, read_object, require};
use super::sse::sse_response;
use super::{json_answer, TICKET_HEADER};
use crate::auth::runtime_keys::KeyScope;
use crate::backend::AnyBackend;
use crate::layers::Outcome;
use crate::rejection::Rejection;
use axum::body::Body;
use http::{HeaderValue, Request, StatusCode};
use pressure_core::clock::duration_to_millis;
use pressure_llm::pipeline::{queued_response, Answer, Caller, LlmClient, LlmError, LlmReply, QUEUED_MODEL};
use pressure_llm::provider::ChatRequest;
use serde_json::{json, Value};

/// The request header whose value (when it is 1–128 characters of
/// `[A-Za-z0-9._:-]`) becomes the event's id; otherwise one is generated.
/// Echoed on the response and sent to the provider as `x-pressure-request-id`.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The caller's `x-request-id`, when it is a safe id.
fn caller_request_id<B>(req: &Request<B>) -> Option<String> {
    let v = req.headers().get(REQUEST_ID_HEADER)?.to_str().ok()?;
    let ok = (1..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    ok.then(|| v.to_owned())
}

/// The event of `req` under `request_id`, paid for by its tenant when the
/// tenant layer named one (its budget is charged every attempt).
fn caller_of<B>(req: &Request<B>, request_id: &str) -> Caller<AnyBackend> {
    let mut caller = Caller::new(request_id);
    let routed = crate::layers::context(req);
    if let Some(t) = routed.and_then(|c| c.trace.as_ref()) {
        caller = caller.traced(t.tracer.clone(), t.span.clone());
    }
    match routed.and_then(|c| c.payer.clone()) {
        Some(payer) => caller.paid_by_all(payer),
        None => caller,
    }
}

/// One event of an endpoint: its id, when it started, and who pays.
pub(crate) struct Event {
    /// The caller's `x-request-id` when it is a safe id, else a new one.
    pub(crate) request_id: String,
    /// When the gateway took the call.
    pub(crate) started: tokio::time::Instant,
    /// The event under `request_id`, paid for by its tenant if any.
    pub(crate) caller: Caller<AnyBackend>,
    /// The use cases the request's API key may call, when it has a list.
    pub(crate) scope: Option<KeyScope>,
}

impl Event {
    /// `Ok` when the request's key may call `use_case` (a model id or an
    /// alias, resolved by `llm`): a runtime key limited to other use cases
    /// is `403 use_case_not_allowed`.
    pub(crate) fn allow(&self, llm: &LlmClient<AnyBackend>, use_case: &str) -> Result<(), Rejection> {
        allow(self.scope.as_ref(), llm, use_case)
    }
}

/// [`Event::allow`] for `scope`.
pub(crate) fn allow(
    scope: Option<&KeyScope>,
    llm: &LlmClient<AnyBackend>,
    use_case: &str,
) -> Result<(), Rejection> {
    match scope {
        Some(scope) if !scope.allows(llm.config().resolve_use_case(use_case).unwrap_or(use_case)) => {
            Err(Rejection::UseCaseNotAllowed(use_case.to_owned()))
        }
        _ => Ok(()),
    }
}

/// Answers one call of an endpoint: `handle` runs its [`Event`]; the
/// answer, or its refusal, carries `x-request-id`. A refusal is returned
/// ([`Rejection::Event`]), never rendered here: the route layer counts,
/// logs and renders it in the route's dialect, as it does every refusal.
pub(crate) async fn respond<Fut>(
    llm: &LlmClient<AnyBackend>,
    req: Request<Body>,
    handle: impl FnOnce(Request<Body>, Event) -> Fut,
) -> Outcome
where
    Fut: std::future::Future<Output = Outcome>,
{
    let request_id = caller_request_id(&req).unwrap_or_else(|| llm.new_request_id());
    let started = tokio::time::Instant::now();
    let id = HeaderValue::from_str(&request_id).ok();
    let event = Event {
        caller: caller_of(&req, &request_id),
        scope: req.extensions().get::<KeyScope>().cloned(),
        request_id,
        started,
    };
    let paid = crate::layers::context(&req).and_then(|c| Some((c.payer.clone()?, c.payer_grants.clone())));
    let mut resp = match handle(req, event).await {
        Ok(resp) => resp,
        Err(refused) => {
            if let Some((payer, grants)) = paid {
                unspend_if_payer_refused(&refused, &payer, &grants).await;
            }
            return Err(refused.of_event(id));
        }
    };
    if let Some(v) = id {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    Ok(resp)
}

/// When one of the payer's levels refused the call (its budget, its token
/// rate), the request its levels counted when it came in is given back:
/// a refusal consumes nothing, so a call the tenant could not pay for does
/// not also spend one of the tenant's requests (nor its parents').
async fn unspend_if_payer_refused(
    refused: &Rejection,
    payer: &pressure_core::Nest<AnyBackend>,
    grants: &[pressure_core::Grant],
) {
    let resource = match refused {
        Rejection::Llm(LlmError::BudgetExceeded { resource, .. } | LlmError::NoCapacity { resource, .. }) => {
            resource
        }
        _ => return,
    };
    if !payer.levels().iter().any(|h| h.id() == resource) {
        return;
    }
    for (h, grant) in payer.levels().iter().zip(grants) {
        if let Err(e) = h.refund(grant).await {
            tracing::warn!(resource = h.id(), error = %e, "the refused call's request not given back");
        }
    }
}

/// Handles one call of the endpoint ([`respond`]).
pub(crate) async fn chat_completions(llm: &LlmClient<AnyBackend>, req: Request<Body>) -> Outcome {
    respond(llm, req, |req, event| handle(llm, req, event)).await
}

/// Logs the outcome of one event.
fn log_event(
    request_id: &str,
    use_case: &str,
    started: tokio::time::Instant,
    outcome: Result<&Answer, &LlmError>,
) {
    let elapsed_ms = duration_to_millis(started.elapsed());
    match outcome {
        Ok(a) => tracing::info!(
            target: "pressure::llm",
            request_id,
            use_case,
            degradation = a.degradation.as_str(),
            level = a.level,
            model = a.model.as_deref().unwrap_or("-"),
            attempts = a.attempts,
            status = a.http_status(),
            elapsed_ms,
            "llm answer"
        ),
        Err(e) => tracing::warn!(
            target: "pressure::llm",
            request_id,
            use_case,
            degradation = "none",
            error = e.label(),
            status = e.describe().status,
            elapsed_ms,
            "llm request failed: {e}"
        ),
    }
}

/// The chat request in `req`'s body, or the 400/413 to answer.
async fn read_request(req: Request<Body>) -> Result<ChatRequest, Rejection> {
    let object = read_object(req).await?;
    require(&object, ["model", "messages"])?;
    if let Err(e) = super::validate::chat_request(&object) {
        return Err(Rejection::InvalidRequest {
            message: e.message,
            param: Some(e.param),
            code: e.code,
        });
    }
    serde_json::from_value(Value::Object(object))
        .map_err(|e| invalid(format!("invalid request: {e}"), None, "invalid_value"))
}

async fn handle(llm: &LlmClient<AnyBackend>, req: Request<Body>, event: Event) -> Outcome {
    let request_id = event.request_id.as_str();
    let chat = read_request(req).await?;
    let use_case = chat.model.clone();
    event.allow(llm, &use_case)?;
    if chat.stream == Some(true) {
        return match llm.stream_as(&use_case, chat, event.caller).await {
            Ok(stream) => {
                tracing::info!(
                    target: "pressure::llm",
                    request_id,
                    use_case,
                    degradation = stream.degradation().as_str(),
                    status = stream.http_status(),
                    elapsed_ms = duration_to_millis(event.started.elapsed()),
                    "llm stream started"
                );
                Ok(sse_response(stream))
            }
            Err(e) => {
                log_event(request_id, &use_case, event.started, Err(&e));
                Err(Rejection::Llm(e))
            }
        };
    }
    let result = llm.complete_as(&use_case, chat, event.caller).await;
    log_event(request_id, &use_case, event.started, result.as_ref());
    match result {
        Ok(answer) => answer_response(&answer),
        Err(e) => Err(Rejection::Llm(e)),
    }
}

/// The `pressure` field of an answer: which level answered, how degraded,
/// after how many attempts, and the ticket of a queued request.
#[derive(serde::Serialize)]
struct PressureField<'a> {
    degradation: &'a str,
    level: usize,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    ticket: Option<&'a str>,
}

/// A completion with the `pressure` field beside its own.
#[derive(serde::Serialize)]
struct WithPressure<'a> {
    #[serde(flatten)]
    resp: &'a pressure_llm::provider::ChatResponse,
    pressure: PressureField<'a>,
}

/// The response of an answer: the completion (200), or for a queued
/// request (202) a chat completion that says so ([`queued_response`]), with
/// the `pressure` field (plus `pressure.ticket` when queued) and the
/// degradation header (plus `x-pressure-ticket`).
pub(super) fn answer_response(answer: &Answer) -> Outcome {
    let queued;
    let (resp, ticket) = match &answer.reply {
        LlmReply::Completion(resp) => (resp, None),
        LlmReply::Queued { ticket } => {
            queued = queued_response(QUEUED_MODEL, ticket);
            (&queued, Some(ticket.as_str()))
        }
    };
    let pressure = PressureField {
        degradation: answer.degradation.as_str(),
        level: answer.level,
        attempts: answer.attempts,
        ticket,
    };
    // Written in one pass, without a JSON tree of the completion in
    // between; a provider that sent its own `pressure` field has it
    // replaced, as before.
    let body = if resp.extra.contains_key("pressure") {
        match serde_json::to_value(resp) {
            Ok(Value::Object(mut map)) => {
                map.insert("pressure".into(), json!(pressure));
                serde_json::to_vec(&map)
            }
            _ => return Err(Rejection::Internal("the completion could not be encoded".into())),
        }
    } else {
        serde_json::to_vec(&WithPressure { resp, pressure })
    }
    .map_err(|_| Rejection::Internal("the completion could not be encoded".into()))?;
    let mut resp = json_answer(body, answer.degradation.as_str(), answer.model.as_deref());
    *resp.status_mut() = StatusCode::from_u16(answer.http_status()).unwrap_or(StatusCode::OK);
    if let Some(v) = answer.ticket().and_then(|t| HeaderValue::from_str(t).ok()) {
        resp.headers_mut().insert(TICKET_HEADER, v);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use pressure_llm::pipeline::Degradation;

    async fn body_of(answer: &Answer) -> Value {
        let resp = answer_response(answer).expect("encoded");
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice(&bytes).expect("json")
    }

    fn answer(reply: LlmReply, degradation: Degradation) -> Answer {
        Answer {
            reply,
            level: 1,
            degradation,
            model: None,
            attempts: 3,
            spent: Default::default(),
            failed_spent: Default::default(),
        }
    }

    #[tokio::test]
    async fn the_completion_keeps_its_fields_and_gains_pressure() {
        let mut completion = queued_response("m", "t-1");
        completion.extra.insert("system_fingerprint".into(), json!("fp"));
        let b = body_of(&answer(LlmReply::Completion(completion), Degradation::Backup(1))).await;
        assert_eq!(b["id"], "t-1");
        assert_eq!(b["system_fingerprint"], "fp");
        assert_eq!(
            b["pressure"],
            json!({"degradation": "backup", "level": 1, "attempts": 3})
        );
    }

    #[tokio::test]
    async fn a_providers_own_pressure_field_is_replaced_and_a_ticket_shown() {
        let mut completion = queued_response("m", "t-2");
        completion
            .extra
            .insert("pressure".into(), json!("the provider's"));
        let b = body_of(&answer(LlmReply::Completion(completion), Degradation::Primary)).await;
        assert_eq!(b["pressure"]["degradation"], "primary");
        let queued = body_of(&answer(
            LlmReply::Queued { ticket: "t-3".into() },
            Degradation::ManualQueue,
        ))
        .await;
        assert_eq!(queued["pressure"]["ticket"], "t-3");
        assert_eq!(queued["pressure"]["degradation"], "manual_queue");
    }
}
