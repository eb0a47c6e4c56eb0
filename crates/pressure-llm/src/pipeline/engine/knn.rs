//! A `knn` level of the walk: the request's text embedded by the level's
//! local model through the model's retry loop (gate, attempt, ledger — the
//! same limiter, breaker, retries and metrics as any call of that model),
//! then the vote of the nearest examples ([`crate::pipeline::knn`]).

use pressure_core::{Backend, Priority};
use tokio::time::Instant;

use super::call::Request;
use super::embed::Embed;
use super::level::{Event, LevelEnd};
use super::Engine;
use crate::pipeline::config::KnnLevel;
use crate::pipeline::error::LlmError;
use crate::pipeline::knn::{index_key, knn_response, KNN_MIN_TIME};
use crate::provider::{EmbeddingInput, EmbeddingRequest};
use crate::taxonomy::ErrorKind;

impl<B: Backend> Engine<B> {
    /// The answer of the `knn` level `level` for `req`: `Ok(None)` when it
    /// has none to give (no text to classify, a level not built), `Err`
    /// when its model could not embed the text (the walk goes on either
    /// way). Its call gets the time left before `deadline`, and at least
    /// [`KNN_MIN_TIME`].
    pub(super) async fn knn_level<R: Request<B>>(
        &self,
        level: &KnnLevel,
        req: &R,
        priority: Priority,
        deadline: Instant,
        event: &mut Event<B>,
    ) -> Result<Option<R::Degraded>, LlmError> {
        let Some(text) = req.knn_query() else {
            return Ok(None);
        };
        let (Some(index), Some(m)) = (self.knn.get(&index_key(level)), self.models.get(&level.model)) else {
            return Ok(None);
        };
        let Some(model) = self.providers.get(&m.provider).and_then(|p| p.local_model()) else {
            return Ok(None);
        };
        let failed = |message: String| LlmError::Upstream {
            provider: m.provider.clone(),
            model: m.model.clone(),
            kind: ErrorKind::Other,
            status: None,
            message,
            param: None,
        };
        let vectors = index.vectors(model).await.map_err(failed)?;
        let query = EmbeddingRequest::new(m.model.clone(), EmbeddingInput::Text(text));
        let reservation = match <EmbeddingRequest as Request<B>>::plan(&query, self, m)? {
            Ok(r) => r.with_priority(priority),
            Err(e) => return Err(e),
        };
        let deadline = deadline.max(Instant::now() + KNN_MIN_TIME);
        event.retry.start_fallback_level();
        let answer = match self
            .run_level(&Embed { req: query }, m, reservation, deadline, deadline, event)
            .await
        {
            Ok(answer) => answer,
            Err(LevelEnd::Next(e) | LevelEnd::Fail(e)) => return Err(e),
        };
        let vector = answer
            .data
            .first()
            .and_then(|e| e.vector())
            .ok_or_else(|| failed("the embeddings answer holds no vector".to_owned()))?;
        let Some(vote) = index.classify(&vectors, &vector, usize::try_from(level.k).unwrap_or(usize::MAX))
        else {
            return Ok(None);
        };
        tracing::debug!(model = %m.key, label = %vote.label, votes = vote.votes, nearest = vote.nearest, "knn vote");
        Ok(req.knn_answer(knn_response(level, &vote)))
    }
}
