//! OpenAI's Responses API behind the chat-completions interface (a
//! provider of kind `openai-responses`, `POST {baseUrl}/responses`).
//!
//! Like [`anthropic`](super::anthropic), the translation is three pure
//! pieces the provider client calls: [`request::encode`] (a chat request
//! to a Responses body, or the agent's own Responses body when the request
//! came natively), [`response::to_chat_response`] (a `Response` object to
//! a `chat.completion`) and [`stream::translate_body`] (Responses events to
//! `chat.completion.chunk` events in front of the ordinary
//! [`ChatStream`](super::ChatStream), optionally passing each event on
//! verbatim for a Responses ingress), called through [`Responses`], the
//! [`Wire`](super::wire::Wire) of this API.
//!
//! | chat completions | Responses API |
//! |---|---|
//! | `model` | `model` |
//! | `system` / `developer` messages, anywhere | `instructions`, joined by blank lines |
//! | `user` content: a string / parts `text`, `image_url` (`url`, `detail`), `file` | `{"type":"message","role":"user","content"}`: the string / `input_text`, `input_image` (`image_url`, `detail`, default `auto`), `input_file` (`file_data`, `file_id`, `filename`) |
//! | `assistant` text (or `refusal`) | `{"type":"message","role":"assistant","content":<text>}` |
//! | assistant `tool_calls` | `function_call` items (`call_id`, `name`, `arguments` as text) after the text |
//! | `role: tool` (`tool_call_id`) | `function_call_output` (`call_id`, `output`: the text) |
//! | `max_tokens`, else `max_completion_tokens` | `max_output_tokens` |
//! | `tools: [{"type":"function","function":{name, description, parameters, strict}}]` | `tools: [{"type":"function", name, description, parameters, strict}]` (`strict` `false` unless given: chat's default, not the Responses API's) |
//! | `tool_choice` `auto` / `none` / `required` / `{"type":"function","function":{"name"}}` | the same / `{"type":"function","name"}` |
//! | `temperature`, `top_p`, `parallel_tool_calls`, `metadata`, `user`, `service_tier`, `prompt_cache_key`, `safety_identifier` | the same |
//! | `response_format` `text` / `json_object` / `json_schema` (`name`, `schema`, `strict`, `description`) | `text.format` of the same type, flattened |
//! | `verbosity` | `text.verbosity` |
//! | `reasoning_effort` | `reasoning.effort` |
//! | `stream` | `stream: true` for [`ProviderClient::stream`](super::ProviderClient::stream) |
//! | (always) | `store: false`: the gateway keeps no state at the provider |
//!
//! `n` above 1, the `function` role, `input_audio` parts, non-function
//! tools and malformed tool choices or formats are refused (a
//! [`request::TranslateError`], no call made); `stop`, penalties,
//! `logit_bias`, `logprobs`, `seed`, `stream_options`, audio and the other
//! chat-only fields are dropped (listed in [`request`]).
//!
//! Back, a `Response` becomes a completion: `output_text` parts of message
//! items → `content`, `refusal` parts → `refusal`, `function_call` items →
//! `tool_calls` (`id` = `call_id`), reasoning summaries (else reasoning
//! text) → `reasoning_content`; `status: "incomplete"` → `finish_reason`
//! `length` (`content_filter` for that reason), function calls →
//! `tool_calls`, else `stop`; `usage` `input_tokens` / `output_tokens` /
//! `total_tokens` → `prompt_tokens` / `completion_tokens` / `total_tokens`,
//! with `cached_tokens` and `reasoning_tokens` in the details. A failed
//! response or an error body is an `Err`. Hosted tools' items are left out.
//! The stream's table is in [`stream`].

pub(super) mod request;
pub(super) mod response;
pub(super) mod stream;
mod wire;

pub(crate) use wire::Responses;
