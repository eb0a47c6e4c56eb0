//! `/admin/pressure/keys`: API keys issued at runtime (`crate::plan::keys`
//! for the record, the rules, the store and the propagation bound).
//!
//! * `POST /admin/pressure/keys` with `{"tenant","name"?,"limits"?,
//!   "useCases"?,"expiresAt"?,"metadata"?}` → `201` with the key's
//!   document and `"key"`: the key itself, shown here only (the store keeps
//!   its SHA-256). `404` while `gateway.auth.runtimeKeys` is off.
//! * `GET /admin/pressure/keys[?tenant=T][&after=ID][&limit=N]` →
//!   `{"keys":[...],"next":ID|null}`: the live keys by id, at most `limit`
//!   (default 100, at most 1000) per page; `next` is the `after` of the
//!   next page.
//! * `GET /admin/pressure/keys/{id}` → the key's document with `usage`:
//!   per dimension of its own resource, `{"dimension","used","limit"}`
//!   (spend included) as the backend counts it.
//! * `PATCH /admin/pressure/keys/{id}` with any of `limits`, `useCases`,
//!   `expiresAt`, `metadata` (`null` clears one) → the new document; live
//!   on every instance, the key's resource keeping its usage.
//! * `DELETE /admin/pressure/keys/{id}` → `204`: revoked for the fleet.
//!
//! A document never holds the key nor its digest, and no error or log
//! line does. A body over 64 KiB is `413`; one that does not parse, has an
//! unknown field or a field that breaks a rule is `400` naming the field
//! (`path`); a malformed id `400`, an unknown one `404`, a name already
//! taken `409`; the store unreachable `503`, nothing changed.

use super::tenants::usage;
use super::{AdminError, AdminState};
use crate::auth::runtime_keys::wall_clock_ms as now_ms;
use crate::plan::keys::store::{KeyError, Keys};
use crate::plan::keys::{is_id, parse_body, KeyPatch, KeyRecord, NewKey};
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::BodyExt;
use serde_json::{json, Value};

/// Largest body of a `POST` or `PATCH`.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// Keys of one page of the list, by default and at most.
const PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// The query of the list.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    tenant: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

/// The gateway's keys.
fn keys(state: &AdminState) -> Result<&Keys, AdminError> {
    state
        .control
        .as_deref()
        .map(|c| c.keys())
        .ok_or(AdminError::NotFound("this admin listener has no gateway"))
}

/// The keys, when the plan serving now issues them.
fn issuing(state: &AdminState) -> Result<&Keys, AdminError> {
    let keys = keys(state)?;
    let on = state
        .control
        .as_deref()
        .is_some_and(|c| c.plan().config().auth.runtime_keys);
    if on {
        Ok(keys)
    } else {
        Err(AdminError::NotFound(
            "runtime keys are off: set gateway.auth.runtimeKeys to true",
        ))
    }
}

/// The id of the path, when it is one.
fn key_id(path: Result<Path<String>, PathRejection>) -> Result<String, AdminError> {
    match path {
        Ok(Path(id)) if is_id(&id) => Ok(id),
        _ => Err(AdminError::BadRequest(
            "not a key id (key_ and 16 lowercase hex digits)".into(),
        )),
    }
}

/// The body, at most [`MAX_BODY_BYTES`].
async fn read(body: Body) -> Result<axum::body::Bytes, AdminError> {
    match http_body_util::Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(AdminError::TooLarge { max: MAX_BODY_BYTES })
        }
        Err(_) => Err(AdminError::BadRequest("the body could not be read".into())),
    }
}

/// The answer to a failed key operation.
fn refused(e: KeyError, resource: &str) -> AdminError {
    match e {
        KeyError::NotFound => AdminError::NotFound("no such key"),
        KeyError::Invalid(e) => AdminError::InvalidConfig(e),
        KeyError::NameTaken => {
            AdminError::Conflict("a live key (or a config key) already has that name".into())
        }
        KeyError::Full => AdminError::Conflict(
            format!(
                "{} keys are live already; revoke some first",
                crate::plan::keys::MAX_KEYS
            )
            .into(),
        ),
        KeyError::Unavailable(e) => {
            tracing::warn!(resource, error = %e, "runtime API key store unavailable");
            AdminError::StoreUnavailable {
                resource: resource.to_owned(),
            }
        }
    }
}

/// `POST`: issues a key.
pub(super) async fn create(State(state): State<AdminState>, body: Body) -> Result<Response, AdminError> {
    let keys = issuing(&state)?;
    let body = read(body).await?;
    let new: NewKey = parse_body(&body).map_err(AdminError::InvalidConfig)?;
    let now = now_ms();
    let issued = keys
        .create(new, now)
        .await
        .map_err(|e| refused(e, "gateway:apikey:*"))?;
    let record = &issued.record;
    tracing::info!(
        id = record.id.as_str(),
        tenant = record.tenant.as_str(),
        name = record.name.as_deref().unwrap_or("-"),
        "runtime API key issued"
    );
    let mut doc = record.shown(now);
    doc["key"] = json!(issued.secret);
    Ok((
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(doc),
    )
        .into_response())
}

/// `GET` of the list.
pub(super) async fn list(
    State(state): State<AdminState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, AdminError> {
    let keys = keys(&state)?;
    let Query(q) = query.map_err(|e| AdminError::BadRequest(e.body_text().into()))?;
    let limit = q.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE);
    let now = now_ms();
    let mut page = Vec::new();
    let mut next = None;
    for key in keys.mirror().all() {
        if q.after.as_deref().is_some_and(|after| key.id.as_str() <= after)
            || q.tenant.as_deref().is_some_and(|t| key.tenant.0 != t)
        {
            continue;
        }
        if page.len() == limit {
            next = page
                .last()
                .and_then(|d: &Value| d["id"].as_str().map(str::to_owned));
            break;
        }
        if let Ok(record) = KeyRecord::read(&key.id, &key.stored) {
            page.push(record.shown(now));
        }
    }
    Ok(Json(json!({ "keys": page, "next": next })).into_response())
}

/// `GET` of one key, with its usage.
pub(super) async fn get(
    State(state): State<AdminState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, AdminError> {
    let keys = keys(&state)?;
    let id = key_id(path)?;
    let (_, record) = keys.get(&id).ok_or(AdminError::NotFound("no such key"))?;
    Ok(document(&state, &record).await.into_response())
}

/// `PATCH`: changes a key for the fleet.
pub(super) async fn patch(
    State(state): State<AdminState>,
    path: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Response, AdminError> {
    let keys = issuing(&state)?;
    let id = key_id(path)?;
    let body = read(body).await?;
    let patch: KeyPatch = parse_body(&body).map_err(AdminError::InvalidConfig)?;
    let record = keys
        .update(&id, patch, now_ms())
        .await
        .map_err(|e| refused(e, "gateway:apikey:*"))?;
    tracing::info!(
        id = id.as_str(),
        tenant = record.tenant.as_str(),
        "runtime API key changed"
    );
    Ok(document(&state, &record).await.into_response())
}

/// `DELETE`: revokes a key for the fleet.
pub(super) async fn delete(
    State(state): State<AdminState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, AdminError> {
    let keys = keys(&state)?;
    let id = key_id(path)?;
    keys.revoke(&id)
        .await
        .map_err(|e| refused(e, "gateway:apikey:*"))?;
    tracing::info!(id = id.as_str(), "runtime API key revoked");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The `GET` document of `record`: what it shows, and the usage of its own
/// resource (`[]` without limits).
async fn document(state: &AdminState, record: &KeyRecord) -> Json<Value> {
    let mut doc = record.shown(now_ms());
    doc["usage"] = match &record.limits {
        Some(limits) => usage(&state.broker, &record.resource(), None, limits).await,
        None => Value::Array(Vec::new()),
    };
    Json(doc)
}
