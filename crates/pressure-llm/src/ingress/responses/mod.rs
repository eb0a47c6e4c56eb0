//! OpenAI's Responses API (`POST /v1/responses`, spoken by Codex CLI and
//! the openai SDKs) at the gateway's door: [`parse`] checks a request as
//! OpenAI does and translates it to chat completions; [`render`] and
//! [`StreamEncoder`] turn the engine's chat answer back into a `Response`
//! object or its server-sent events.
//!
//! # In: a Responses request as a chat request
//!
//! | Responses | chat completions |
//! |---|---|
//! | `model` (a non-empty string) | `model` |
//! | `instructions` | the first `system` message |
//! | `input`: a string | one `user` message |
//! | `input` message (`type: "message"` or none; `role` user / assistant / system / developer) | a message of that role, `developer` → `system`, in order |
//! | content parts `input_text`, `output_text`, `refusal` | `{"type":"text"}` parts (a single one as a plain string) |
//! | `input_image` with `image_url` (`detail`) | `{"type":"image_url","image_url":{"url","detail"}}` |
//! | `input_image` with a `file_id`, `input_file` | left out; **native-only** (`native_only` names the part) |
//! | `function_call` (`call_id`, `name`, `arguments`) | `tool_calls` of an assistant message: consecutive calls share one, joined to an assistant text message right before them |
//! | `function_call_output` (`call_id`, `output` text or parts) | a `tool` message (`tool_call_id`, the output's text; an image in it is native-only) |
//! | `reasoning` items | **dropped** (`input.N`) |
//! | server-side tool items (`web_search_call`, `file_search_call`, `computer_call`, `local_shell_call`, `custom_tool_call`, `mcp_call`, ..., their outputs, `compaction`) | left out; **native-only** (`input.N`) |
//! | `item_reference` | **refused** (stateless) |
//! | `tools`: `{"type":"function", name, description, parameters, strict}` | `{"type":"function","function":{name, description, parameters, strict}}` (only what was given) |
//! | other tools (`web_search`, `file_search`, `namespace`, `local_shell`, `custom`, `mcp`, ...) | **dropped** (`tools.N`): the model just won't call them |
//! | `tool_choice` `auto` / `none` / `required` / `{"type":"function","name"}` | the same / `{"type":"function","function":{"name"}}`; forcing a hosted tool is **dropped** (`tool_choice`) |
//! | `max_output_tokens` (an integer ≥ 1) | `max_tokens` |
//! | `temperature` (0–2), `top_p` (0–1), `parallel_tool_calls` | the same |
//! | `reasoning.effort` | `reasoning_effort`; the rest of `reasoning` (`summary`) is **dropped** (`reasoning.summary`) |
//! | `text.format` `json_schema` (`name`, `schema`, `strict`) / `json_object` / `text` | `response_format` `{"type":"json_schema","json_schema":{name, schema, strict}}` / `{"type":"json_object"}` / nothing; `text.verbosity` is **dropped** |
//! | `stream` | `stream`, with `stream_options.include_usage: true` |
//! | `include`, `store`, `prompt_cache_key`, `client_metadata`, `metadata`, `user`, `safety_identifier`, `service_tier`, `truncation`, `background`, `top_logprobs`, any unknown field | **dropped** (by name; a stored `prompt` is also native-only) |
//! | `previous_response_id`, `conversation` | **refused**: the gateway is stateless, the client sends the whole conversation (`store: false`) |
//!
//! The body as received is the chat request's
//! [`NativeRequest`](crate::provider::NativeRequest)
//! ([`NativeWire::Responses`](crate::provider::NativeWire::Responses)), so a
//! provider of the Responses wire gets it unchanged. Refusals and malformed
//! fields are an [`IngressError`](super::IngressError) naming the field as
//! a path (`input.2.content`, `tools.0.name`, `max_output_tokens`).
//!
//! # Out: a chat answer as a Response
//!
//! | chat completions | Responses |
//! |---|---|
//! | `id` | `resp_<id>`; items `rs_<id>`, `msg_<id>`, `fc_<id>_<k>` |
//! | `created` | `created_at` |
//! | `message.reasoning_content` | a `reasoning` item with one `summary_text` |
//! | `message.content` | a `message` item with one `output_text` part (also when empty, if there are no tool calls) |
//! | `message.tool_calls` | one `function_call` item each (`call_id`, `name`, `arguments`) |
//! | `finish_reason` `length` / `content_filter` | `status: "incomplete"`, `incomplete_details.reason` `max_output_tokens` / `content_filter`; else `completed` |
//! | `usage` | `input_tokens` (with `input_tokens_details.cached_tokens`), `output_tokens` (with `output_tokens_details.reasoning_tokens`), `total_tokens` |
//! | the request | echoed: `instructions`, `tools`, `tool_choice`, `parallel_tool_calls`, `max_output_tokens`, `temperature`, `top_p`, `text`, `metadata`; `store: false` |
//!
//! A refusal (`message.refusal`) and choices other than the first are not
//! rendered. The stream's events are [`StreamEncoder`]'s.

mod parse;
mod render;
mod stream;
#[cfg(test)]
mod tests;

pub use parse::parse;
pub use render::render;
pub use stream::StreamEncoder;
