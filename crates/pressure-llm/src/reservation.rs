//! From a chat request to a broker reservation, and back from its `usage`.
//!
//! Before a call the broker reserves, in one atomic step on the resource
//! [`resource_id`]`(provider, model)`: one request, the prompt's tokens
//! (counted with [`crate::tokens::TokenCounter`]) and the output the call
//! may produce (`max_tokens`, or the model's configured default). After the
//! call, [`Reservation::actual`] turns the response's `usage` into the
//! figures `Permit::reconcile` corrects the reservation to.
//!
//! The same model's [`ModelLimits`] decide, before any provider is touched,
//! whether the request can fit the context window at all; the gateway
//! answers a [`ContextError`] with HTTP 400 and its [`ContextError::code`]
//! (`context_length_exceeded`).

use pressure_core::{AcquireOptions, Priority, Reserved};
use serde::{Deserialize, Serialize};

/// Prefix of every LLM resource id.
pub const RESOURCE_PREFIX: &str = "llm:";

/// The broker resource of a (provider, model): `llm:<provider>:<model>`.
/// The provider name (a configuration key) must not contain `:`; the model
/// may (`ft:gpt-4o-mini:org::id`), [`parse_resource_id`] splits at the first
/// `:` after the prefix.
pub fn resource_id(provider: &str, model: &str) -> String {
    let mut id = String::with_capacity(RESOURCE_PREFIX.len() + provider.len() + 1 + model.len());
    id.push_str(RESOURCE_PREFIX);
    id.push_str(provider);
    id.push(':');
    id.push_str(model);
    id
}

/// The (provider, model) of an id made by [`resource_id`].
pub fn parse_resource_id(id: &str) -> Option<(&str, &str)> {
    id.strip_prefix(RESOURCE_PREFIX)?.split_once(':')
}

/// A model's size limits (configuration, JSON names in camelCase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelLimits {
    /// Context window: prompt plus completion tokens.
    pub context_tokens: u64,
    /// Most completion tokens one call may ask for.
    pub max_output_tokens: u64,
    /// Output tokens reserved when a request gives no `max_tokens`; absent
    /// means `maxOutputTokens`. A smaller figure keeps the output-TPM
    /// reservation of such requests realistic (reconcile corrects it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_max_tokens: Option<u64>,
}

impl ModelLimits {
    /// Limits without a separate default for absent `max_tokens`.
    pub fn new(context_tokens: u64, max_output_tokens: u64) -> Self {
        Self {
            context_tokens,
            max_output_tokens,
            default_max_tokens: None,
        }
    }

    /// Sets the output reserved when a request gives no `max_tokens`.
    pub fn with_default_max_tokens(mut self, tokens: u64) -> Self {
        self.default_max_tokens = Some(tokens);
        self
    }

    /// Output reserved for a request without `max_tokens`.
    pub fn default_output(&self) -> u64 {
        self.default_max_tokens.unwrap_or(self.max_output_tokens)
    }

    /// Whether `input` prompt tokens and an explicit `output` budget fit:
    /// `output` may not exceed `maxOutputTokens`, and `input + output` may
    /// not exceed `contextTokens` (equal fits).
    pub fn check(&self, input: u64, output: u64) -> Result<(), ContextError> {
        if output > self.max_output_tokens {
            return Err(ContextError::OutputTooLarge {
                requested: output,
                max_output: self.max_output_tokens,
            });
        }
        if input.saturating_add(output) > self.context_tokens {
            return Err(ContextError::ContextLengthExceeded {
                input,
                output,
                context: self.context_tokens,
            });
        }
        Ok(())
    }
}

/// A request that cannot be served by the model whatever the provider's
/// state: the gateway answers 400 without calling anyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// Prompt plus requested output exceed the context window.
    #[error(
        "This model's maximum context length is {context} tokens. However, you requested {} tokens \
         ({input} in the messages, {output} in the completion). Please reduce the length of the \
         messages or completion.",
        input.saturating_add(*output)
    )]
    ContextLengthExceeded {
        /// Prompt tokens counted.
        input: u64,
        /// Completion tokens requested (0 when the prompt alone fills the window).
        output: u64,
        /// The model's context window.
        context: u64,
    },
    /// `max_tokens` is above what the model can produce in one call.
    #[error(
        "max_tokens is too large: {requested}. This model supports at most {max_output} completion \
         tokens, whereas you provided {requested}."
    )]
    OutputTooLarge {
        /// The request's `max_tokens`.
        requested: u64,
        /// The model's `maxOutputTokens`.
        max_output: u64,
    },
}

impl ContextError {
    /// The OpenAI error `code`: `context_length_exceeded`, or `invalid_value`
    /// for a `max_tokens` above the model's output limit.
    pub fn code(&self) -> &'static str {
        match self {
            ContextError::ContextLengthExceeded { .. } => "context_length_exceeded",
            ContextError::OutputTooLarge { .. } => "invalid_value",
        }
    }

    /// The OpenAI error `param`: `messages` or `max_tokens`.
    pub fn param(&self) -> &'static str {
        match self {
            ContextError::ContextLengthExceeded { .. } => "messages",
            ContextError::OutputTooLarge { .. } => "max_tokens",
        }
    }

    /// The OpenAI error `type` (always `invalid_request_error`); HTTP 400.
    pub fn error_type(&self) -> &'static str {
        "invalid_request_error"
    }
}

/// What one call reserves on its (provider, model) resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// Prompt tokens, counted before the call.
    pub input_tokens: u64,
    /// Completion tokens the call may produce.
    pub output_tokens: u64,
    /// The use case's priority class.
    pub priority: Priority,
}

impl Reservation {
    /// A reservation of exactly these tokens, interactive priority.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            priority: Priority::Interactive,
        }
    }

    /// The reservation for a request of `input_tokens` counted prompt
    /// tokens and an optional `max_tokens` (pass `max_completion_tokens`
    /// when the request uses that name), checked against `limits`:
    ///
    /// * with `max_tokens`: output = `max_tokens`; rejected when it exceeds
    ///   `maxOutputTokens` or `input + max_tokens > contextTokens`;
    /// * without: output = the model's default ([`ModelLimits::default_output`])
    ///   but no more than the room left in the window, since the model
    ///   cannot produce more; rejected when the prompt leaves no room at all.
    pub fn for_request(
        input_tokens: u64,
        max_tokens: Option<u64>,
        limits: &ModelLimits,
    ) -> Result<Self, ContextError> {
        let output = match max_tokens {
            Some(m) => {
                limits.check(input_tokens, m)?;
                m
            }
            None => {
                let room = limits.context_tokens.saturating_sub(input_tokens);
                if room == 0 {
                    return Err(ContextError::ContextLengthExceeded {
                        input: input_tokens,
                        output: 0,
                        context: limits.context_tokens,
                    });
                }
                limits.default_output().min(room)
            }
        };
        Ok(Self::new(input_tokens, output))
    }

    /// Sets the priority class.
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// What to ask the broker for: one request, these tokens, this priority.
    pub fn acquire_options(&self) -> AcquireOptions {
        AcquireOptions::default()
            .requests(1)
            .tokens(self.input_tokens, self.output_tokens)
            .priority(self.priority)
    }

    /// What was reserved, in the broker's terms.
    pub fn reserved(&self) -> Reserved {
        Reserved {
            requests: 1,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cost_micro_usd: 0,
        }
    }

    /// The actual usage for `Permit::reconcile`, from the response's
    /// `usage` as `(prompt_tokens, completion_tokens)`. The request still
    /// counts as one. For a call that failed after producing part of its
    /// answer, pass the input tokens and the output generated so far.
    pub fn actual((prompt_tokens, completion_tokens): (u64, u64)) -> Reserved {
        Reserved {
            requests: 1,
            input_tokens: prompt_tokens,
            output_tokens: completion_tokens,
            cost_micro_usd: 0,
        }
    }
}
