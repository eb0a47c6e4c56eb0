//! `POST /v1/chat/completions` in OpenAI's wire format: the request is read
//! as OpenAI reads it (malformed JSON, no `model`, no `messages` → 400;
//! content as a string or parts; `max_tokens` or `max_completion_tokens`),
//! its prompt counted with OpenAI's chat framing, and the answer is a
//! `chat.completion` or a stream of `chat.completion.chunk` events (the
//! role chunk at once, the content, the finishing chunk, the usage chunk
//! when `stream_options.include_usage` was asked, then `[DONE]`).

use bytes::Bytes;

use super::{content_events, Call, Due, Endpoint, Event, Output, Reply, Route};
use crate::cache::automatic_probe;
use crate::dialect::Dialect;
use crate::record::BAD_REQUEST_MARKER;
use crate::responder::Turn;
use crate::tokens::{count_prompt, Counted};
use crate::wire::json_bytes;
use crate::wire::openai::{
    read_request, sse, sse_error, AssistantMessage, ChatCompletion, ChatCompletionChunk,
    ChatCompletionRequest, Choice, ChunkChoice, CompletionHead, Delta, Usage, DONE, STREAM_ERROR_MESSAGE,
};

/// The chat-completions endpoint.
#[derive(Debug)]
pub(crate) struct Chat;

/// The request, or the message of a 400 (worded like OpenAI's).
fn parse(body: &[u8]) -> Result<ChatCompletionRequest, String> {
    let req = read_request(body, |r: &ChatCompletionRequest| &r.model)?;
    if req.messages.is_empty() {
        return Err("'messages' must contain at least one message".into());
    }
    Ok(req)
}

impl Endpoint for Chat {
    const ROUTE: Route = Route::new("/v1/chat/completions", Dialect::OpenAi);
    type Request = ChatCompletionRequest;

    fn read(body: &[u8]) -> Result<Call<ChatCompletionRequest>, String> {
        let req = parse(body)?;
        let turns: Vec<Turn> = req
            .messages
            .iter()
            .map(|m| Turn::new(&m.role, m.text()))
            .collect();
        let counted: Vec<Counted<'_>> = req
            .messages
            .iter()
            .zip(&turns)
            .map(|(m, t)| Counted {
                role: &t.role,
                text: &t.text,
                name: m.name.as_deref(),
            })
            .collect();
        let input = count_prompt(&req.model, &counted);
        let cache = automatic_probe(&req.model, &counted, input, req.prompt_cache_key.as_deref());
        Ok(Call {
            model: req.model.clone(),
            stream: req.stream == Some(true),
            marked: turns.iter().any(|t| t.text.contains(BAD_REQUEST_MARKER)),
            input,
            max_output: req.max_output().map(u64::from),
            turns: Some(turns),
            fixed_output: None,
            cache,
            request: req,
        })
    }

    fn answer(call: &Call<ChatCompletionRequest>, out: &Output) -> Reply {
        let id = format!("chatcmpl-mock-{}", out.seq);
        let finish = if out.capped { "length" } else { "stop" };
        let usage = Usage::of(out.input, out.tokens, out.cache.read);
        let head = |object| CompletionHead {
            id: &id,
            object,
            created: out.created,
            model: &call.model,
        };
        let json = json_bytes(&ChatCompletion {
            head: head("chat.completion"),
            choices: [Choice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content: &out.text,
                },
                finish_reason: finish,
            }],
            usage,
        });
        if !call.stream {
            return Reply {
                json,
                events: Vec::new(),
            };
        }
        let chunk = |delta: Delta<'_>, finish: Option<&str>| {
            sse(&ChatCompletionChunk {
                head: head("chat.completion.chunk"),
                choices: vec![ChunkChoice {
                    index: 0,
                    delta,
                    finish_reason: finish,
                }],
                usage: None,
            })
        };
        let role = Delta {
            role: Some("assistant"),
            content: Some(""),
        };
        let mut events = vec![Event::new(Due::Start, chunk(role, None))];
        events.extend(content_events(&out.text, |part| {
            chunk(
                Delta {
                    role: None,
                    content: Some(part),
                },
                None,
            )
        }));
        events.push(Event {
            at: Due::End,
            bytes: chunk(Delta::default(), Some(finish)),
            bill: true,
        });
        if call.request.include_usage() {
            let last = sse(&ChatCompletionChunk {
                head: head("chat.completion.chunk"),
                choices: Vec::new(),
                usage: Some(usage),
            });
            events.push(Event::new(Due::End, last));
        }
        events.push(Event::new(Due::End, Bytes::from_static(DONE)));
        Reply { json, events }
    }

    fn stream_error(_call: &Call<ChatCompletionRequest>, _out: &Output, _sent: usize) -> Bytes {
        sse_error(STREAM_ERROR_MESSAGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_refuses_what_a_provider_refuses() {
        assert!(parse(b"{").is_err());
        assert!(parse(br#"{"messages":[{"role":"user","content":"hi"}]}"#).is_err());
        assert!(parse(br#"{"model":"m"}"#).is_err());
        assert!(parse(br#"{"model":"m","messages":[]}"#).is_err());
        let req =
            parse(br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":7}"#)
                .unwrap();
        assert_eq!(req.max_output(), Some(7));
    }
}
