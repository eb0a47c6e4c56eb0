//! The non-LLM levels of a chain: pluggable rule handlers and the manual queue.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::provider::{ChatRequest, ChatResponse, Choice, CompletionHeader, Message, Usage};

/// A degraded, non-LLM answerer (a `{"rules": "name"}` level).
///
/// `None` means "no answer": the chain moves on to its next level.
pub trait FallbackHandler: Send + Sync {
    /// An answer for `req`, or `None`.
    fn handle(&self, req: &ChatRequest) -> Option<ChatResponse>;
}

/// One keyword rule: any keyword found (case-insensitively) in the last user
/// message selects the canned answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeywordRule {
    /// Keywords, matched as case-insensitive substrings.
    pub keywords: Vec<String>,
    /// The assistant's canned answer.
    pub answer: String,
    /// An optional label (e.g. a routing category), returned in the
    /// response's `pressure_label` field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The shipped [`FallbackHandler`]: the first matching [`KeywordRule`] answers.
#[derive(Debug, Clone, Default)]
pub struct KeywordRules {
    name: String,
    rules: Vec<(Vec<String>, KeywordRule)>,
}

impl KeywordRules {
    /// A handler named `name` (reported as the response's `model`, `rules:<name>`).
    pub fn new(name: impl Into<String>, rules: Vec<KeywordRule>) -> Self {
        let rules = rules
            .into_iter()
            .map(|r| {
                let lowered = r
                    .keywords
                    .iter()
                    .map(|k| k.trim().to_lowercase())
                    .filter(|k| !k.is_empty())
                    .collect();
                (lowered, r)
            })
            .collect();
        Self {
            name: name.into(),
            rules,
        }
    }

    /// Adds a rule; builder style.
    pub fn rule(self, keywords: &[&str], answer: impl Into<String>, label: Option<&str>) -> Self {
        let mut rules: Vec<KeywordRule> = self.rules.into_iter().map(|(_, r)| r).collect();
        rules.push(KeywordRule {
            keywords: keywords.iter().map(|k| (*k).to_owned()).collect(),
            answer: answer.into(),
            label: label.map(str::to_owned),
        });
        Self::new(self.name, rules)
    }

    /// The rule matching `text`, if any.
    pub fn matching(&self, text: &str) -> Option<&KeywordRule> {
        let text = text.to_lowercase();
        self.rules
            .iter()
            .find(|(keys, _)| keys.iter().any(|k| text.contains(k.as_str())))
            .map(|(_, r)| r)
    }
}

impl FallbackHandler for KeywordRules {
    fn handle(&self, req: &ChatRequest) -> Option<ChatResponse> {
        let text = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(Message::text)?;
        let rule = self.matching(&text)?;
        let mut extra = Map::new();
        if let Some(label) = &rule.label {
            extra.insert("pressure_label".into(), Value::String(label.clone()));
        }
        Some(offline_answer(
            format!("rules-{}", self.name),
            format!("rules:{}", self.name),
            rule.answer.clone(),
            extra,
        ))
    }
}

/// The manual queue could not take the request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("manual queue: {0}")]
pub struct ManualQueueError(pub String);

/// The `model` of a manual-queue answer ([`queued_response`]).
pub const QUEUED_MODEL: &str = "manual_queue";

/// The assistant text that answers a request parked in the manual queue.
pub fn queued_text(ticket: &str) -> String {
    format!("Your request was queued for manual handling; ticket {ticket}. A person will answer it.")
}

/// A queued request's answer as a chat completion, so every OpenAI SDK
/// parses it (`choices[0].message.content` says it was queued, with the
/// ticket; `id` is the ticket and `usage` is zero: no model ran). Its
/// `pressure_ticket` extra field carries the ticket for programs.
pub fn queued_response(model: &str, ticket: &str) -> ChatResponse {
    let mut extra = Map::new();
    extra.insert("pressure_ticket".to_owned(), Value::String(ticket.to_owned()));
    ChatResponse {
        header: CompletionHeader {
            id: ticket.to_owned(),
            object: "chat.completion".to_owned(),
            // Like the rules handlers: no model ran, and the pipeline's time
            // is monotonic (wall-clock time is for logs).
            created: 0,
            model: model.to_owned(),
        },
        choices: vec![Choice {
            index: 0,
            message: Message::new("assistant", queued_text(ticket)),
            finish_reason: Some("stop".to_owned()),
            extra: Map::new(),
        }],
        usage: Some(Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            extra: Map::new(),
        }),
        extra,
        native: None,
    }
}

/// The last level of a chain: parks a request for a person and returns a
/// ticket id. The answer is then "accepted" (HTTP 202-like), not a completion.
pub trait ManualQueue: Send + Sync {
    /// Stores the request of `use_case`; returns its ticket id.
    fn push<'a>(
        &'a self,
        use_case: &'a str,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<String, ManualQueueError>>;

    /// Up to `count` parked requests, oldest first, left in the queue: for
    /// the person on call (`GET /admin/pressure/queue`). Each is a JSON
    /// object with at least `ticket`, `use_case` and `request`.
    fn peek(&self, count: usize) -> BoxFuture<'_, Result<Vec<Value>, ManualQueueError>> {
        let _ = count;
        Box::pin(async { Err(ManualQueueError("this queue cannot be listed".into())) })
    }

    /// Removes and returns up to `count` parked requests, oldest first: a
    /// person took them (`POST /admin/pressure/queue/drain`).
    fn take(&self, count: usize) -> BoxFuture<'_, Result<Vec<Value>, ManualQueueError>> {
        let _ = count;
        Box::pin(async { Err(ManualQueueError("this queue cannot be drained".into())) })
    }
}

/// One parked request.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedRequest {
    /// Ticket id.
    pub ticket: String,
    /// The use case it came from.
    pub use_case: String,
    /// The request as received.
    pub request: ChatRequest,
}

/// An in-process [`ManualQueue`]: not durable, lost on restart (the gateway
/// on the Redis backend uses a Redis Stream instead). Listed and drained
/// through the admin API like the durable one.
#[derive(Debug)]
pub struct InMemoryQueue {
    items: Mutex<VecDeque<QueuedRequest>>,
    next: AtomicU64,
    capacity: usize,
}

impl Default for InMemoryQueue {
    fn default() -> Self {
        Self::new(10_000)
    }
}

impl InMemoryQueue {
    /// A queue holding at most `capacity` requests (a full queue refuses).
    pub fn new(capacity: usize) -> Self {
        Self {
            items: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(1),
            capacity,
        }
    }

    /// Requests parked now.
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether nothing is parked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the parked requests, oldest first.
    pub fn list(&self) -> Vec<QueuedRequest> {
        self.items.lock().iter().cloned().collect()
    }

    /// Removes and returns every parked request, oldest first.
    pub fn drain(&self) -> Vec<QueuedRequest> {
        self.items.lock().drain(..).collect()
    }
}

impl QueuedRequest {
    /// `{"ticket","use_case","request"}`, as the admin API shows it.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "ticket": self.ticket,
            "use_case": self.use_case,
            "request": serde_json::to_value(&self.request).unwrap_or(Value::Null),
        })
    }
}

impl ManualQueue for InMemoryQueue {
    fn peek(&self, count: usize) -> BoxFuture<'_, Result<Vec<Value>, ManualQueueError>> {
        let items = self
            .items
            .lock()
            .iter()
            .take(count)
            .map(QueuedRequest::to_json)
            .collect();
        Box::pin(async move { Ok(items) })
    }

    fn take(&self, count: usize) -> BoxFuture<'_, Result<Vec<Value>, ManualQueueError>> {
        let items: Vec<Value> = {
            let mut q = self.items.lock();
            let n = count.min(q.len());
            q.drain(..n).map(|r| r.to_json()).collect()
        };
        Box::pin(async move { Ok(items) })
    }

    fn push<'a>(
        &'a self,
        use_case: &'a str,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<String, ManualQueueError>> {
        Box::pin(async move {
            let mut items = self.items.lock();
            if items.len() >= self.capacity {
                return Err(ManualQueueError(format!("full ({} requests)", self.capacity)));
            }
            let ticket = format!("mq-{}", self.next.fetch_add(1, Ordering::Relaxed));
            items.push_back(QueuedRequest {
                ticket: ticket.clone(),
                use_case: use_case.to_owned(),
                request: req.clone(),
            });
            Ok(ticket)
        })
    }
}

/// A completion no chat model produced (a `rules` or `knn` level): one
/// assistant choice with `text`, finish reason `stop`, `created` 0 and no
/// usage; `extra` carries the level's own fields (`pressure_label`, ...).
pub(crate) fn offline_answer(
    id: String,
    model: String,
    text: String,
    extra: Map<String, Value>,
) -> ChatResponse {
    ChatResponse {
        header: CompletionHeader {
            id,
            object: "chat.completion".into(),
            created: 0,
            model,
        },
        choices: vec![Choice {
            index: 0,
            message: Message::new("assistant", text),
            finish_reason: Some("stop".into()),
            extra: Map::new(),
        }],
        usage: None,
        extra,
        native: None,
    }
}
