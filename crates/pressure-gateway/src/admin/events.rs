//! `GET /admin/pressure/events?top=N&everyMs=M`: the summary
//! ([`super::summary`]) as a Server-Sent Events stream, for the dashboard.
//!
//! One `summary` event at once, then one every `everyMs` milliseconds
//! (default 1000, from 250 to 60 000); each event's `data` is the whole
//! summary document, so a client that missed events loses nothing but the
//! points of its charts. `retry: 2000` asks a reconnecting client to wait
//! 2 s. The stream ends when the
//! gateway starts draining, so an open dashboard never holds a shutdown.
//!
//! The route is behind the admin token like the others. The dashboard reads
//! it with a streaming `fetch`, which (unlike `EventSource`) can send the
//! `Authorization` header; any SSE client that can set a header works.

use super::summary::{self, SummaryQuery};
use super::AdminError;
use super::AdminState;
use axum::extract::{Query, State};
use axum::http::{header, HeaderValue};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::Deserialize;
use std::convert::Infallible;
use std::time::Duration;
use tokio::time::MissedTickBehavior;

/// Default time between two events.
const DEFAULT_EVERY: Duration = Duration::from_secs(1);

/// Bounds of `everyMs`.
const EVERY_MS: std::ops::RangeInclusive<u64> = 250..=60_000;

/// The reconnection delay suggested to the browser.
const RETRY: Duration = Duration::from_secs(2);

/// The query of the event stream.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct EventsQuery {
    top: Option<String>,
    every_ms: Option<String>,
}

impl EventsQuery {
    fn every(&self) -> Result<Duration, String> {
        let Some(raw) = &self.every_ms else {
            return Ok(DEFAULT_EVERY);
        };
        match raw.parse::<u64>() {
            Ok(ms) if EVERY_MS.contains(&ms) => Ok(Duration::from_millis(ms)),
            _ => Err(format!(
                "everyMs: must be an integer from {} to {}",
                EVERY_MS.start(),
                EVERY_MS.end()
            )),
        }
    }
}

pub(super) async fn events(
    State(state): State<AdminState>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => return summary::malformed_query(e),
    };
    let top = SummaryQuery {
        top: query.top.clone(),
    }
    .top();
    let (top, every) = match (top, query.every()) {
        (Ok(top), Ok(every)) => (top, every),
        (Err(problem), _) | (_, Err(problem)) => {
            return AdminError::BadRequest(problem.into()).into_response()
        }
    };
    (
        [
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            // Tells a buffering reverse proxy (nginx) to pass events at once.
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        Sse::new(stream(state, top, every)),
    )
        .into_response()
}

/// One summary event now and then one per `every`, until the gateway drains.
fn stream(state: AdminState, top: usize, every: Duration) -> impl Stream<Item = Result<Event, Infallible>> {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    futures::stream::unfold(
        (state, ticks, true),
        move |(state, mut ticks, first)| async move {
            ticks.tick().await;
            if state.control.as_ref().is_some_and(|c| c.is_draining()) {
                return None;
            }
            let body = summary::build(&state, top).await;
            let mut event = Event::default().event("summary").data(body.to_string());
            if first {
                event = event.retry(RETRY);
            }
            Some((Ok(event), (state, ticks, false)))
        },
    )
}
