//! [`LlmLayer`]: the step that hands each of the gateway's own LLM
//! endpoints to its handler — the OpenAI ones (`crate::openai`: chat
//! completions, embeddings, models) and the agents' (`crate::agents`:
//! Messages, `count_tokens`, Responses) — and every other request to the
//! proxy. It sits above both handler modules, so neither imports the other
//! for dispatch. The router decides which endpoint a request is, once
//! ([`crate::plan::Endpoint`]).

use crate::agents;
use crate::layers::{context, step_layer, RejectingService, Step, StepFuture};
use crate::openai;
use crate::plan::Endpoint;
use axum::body::Body;
use http::Request;

/// Serves the LLM endpoints of the request's plan; every other request
/// goes to the inner service.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LlmLayer;

step_layer!(LlmLayer);

impl Step for LlmLayer {
    fn step<S: RejectingService>(&self, next: &mut S, req: Request<Body>) -> StepFuture<S::Future> {
        let served = context(&req).and_then(|r| Some((r.route.endpoint, r.plan.llm().cloned()?)));
        match served {
            Some((Endpoint::ChatCompletions, llm)) => {
                StepFuture::boxed(async move { openai::chat_completions(&llm, req).await })
            }
            Some((Endpoint::Embeddings, llm)) => {
                StepFuture::boxed(async move { openai::embeddings(&llm, req).await })
            }
            Some((Endpoint::Messages, llm)) => {
                StepFuture::boxed(async move { agents::serve::<agents::Messages>(&llm, req).await })
            }
            Some((Endpoint::CountTokens, llm)) => {
                StepFuture::boxed(async move { agents::count_tokens(&llm, req).await })
            }
            Some((Endpoint::Responses, llm)) => {
                StepFuture::boxed(async move { agents::serve::<agents::Responses>(&llm, req).await })
            }
            Some((Endpoint::Models, llm)) => StepFuture::ready(openai::list_models(&llm)),
            Some((Endpoint::Model, llm)) => StepFuture::ready(openai::retrieve_model(&llm, req.uri().path())),
            _ => StepFuture::next(next.call(req)),
        }
    }
}
