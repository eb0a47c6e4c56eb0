//! The mock reads requests in shapes the real APIs accept but pressure's
//! own client never sends (its wire types are its own, written from the
//! providers' references): content as an array of parts, a `developer`
//! turn, a `name`, `max_completion_tokens`, fields it does not know;
//! Anthropic's `system` as text blocks, image / tool blocks; embeddings
//! input as a string, an array of strings or token ids. Each is parsed and
//! billed as the provider would bill it (prompt tokens counted here with
//! pressure-llm's counter, an independent implementation).

use pressure_llm::tokens::{ChatMessage, TokenCounter};
use pressure_mock::{Behaviour, Outcome};
use serde_json::{json, Value};

use super::{bounded, fast, start};

const CLAUDE: &str = "claude-sonnet-4-5";

async fn post(url: String, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new().post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_chat_in_shapes_the_client_never_sends_is_parsed_and_billed() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let body = json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "developer", "content": [{"type": "text", "text": "Answer briefly."}]},
                {"role": "user", "name": "ann", "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
                    {"type": "text", "text": "And why?"}
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a cat"}
            ],
            "max_completion_tokens": 5,
            "temperature": 0.3,
            "seed": 7,
            "response_format": {"type": "text"},
            "tools": [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}],
            "stream": null
        });
        let (status, answer) = post(format!("{}/chat/completions", mock.base_url()), &body).await;
        assert_eq!(status, 200, "{answer}");
        let expected = TokenCounter::new()
            .count_chat(
                "gpt-4o",
                &[
                    ChatMessage::new("developer", "Answer briefly."),
                    ChatMessage::new("user", "What is in this picture?\nAnd why?").with_name("ann"),
                    ChatMessage::new("assistant", ""),
                    ChatMessage::new("tool", "a cat"),
                ],
            )
            .unwrap();
        assert_eq!(answer["usage"]["prompt_tokens"], expected);
        assert_eq!(answer["usage"]["completion_tokens"], 5, "max_completion_tokens caps the answer");
        assert_eq!(answer["choices"][0]["finish_reason"], "length");
        let a = &mock.arrivals()[0];
        assert_eq!((a.outcome, a.stream, a.input_tokens, a.output_tokens), (Outcome::Ok, false, expected, 5));
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_messages_with_system_blocks_and_tool_blocks_are_parsed_and_billed() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let body = json!({
            "model": CLAUDE,
            "max_tokens": 4,
            "system": [
                {"type": "text", "text": "You are terse."},
                {"type": "text", "text": "Cite nothing.", "cache_control": {"type": "ephemeral"}}
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "text", "text": "Weather in Paris?"}
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "use the tool", "signature": "sig"},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C, dry"}]}
                ]}
            ],
            "metadata": {"user_id": "u-1"},
            "top_k": 5,
            "tool_choice": {"type": "auto"}
        });
        let (status, answer) = post(format!("{}/messages", mock.base_url()), &body).await;
        assert_eq!(status, 200, "{answer}");
        let expected = TokenCounter::new()
            .count_chat(
                CLAUDE,
                &[
                    ("system", "You are terse.\nCite nothing."),
                    ("user", "Weather in Paris?"),
                    ("assistant", r#"{"city":"Paris"}"#),
                    ("user", "18 C, dry"),
                ],
            )
            .unwrap();
        // The system blocks carry cache_control: Anthropic's `input_tokens`
        // are what the cache did not write (first sight) nor read.
        let usage = &answer["usage"];
        let created = usage["cache_creation_input_tokens"].as_u64().unwrap();
        assert!(created > 0, "{usage}");
        assert_eq!(usage["cache_read_input_tokens"], 0);
        assert_eq!(usage["input_tokens"].as_u64().unwrap() + created, expected);
        assert_eq!(answer["usage"]["output_tokens"], 4);
        assert_eq!(answer["stop_reason"], "max_tokens");
        let s = mock.stats();
        assert_eq!((s.billed_input_tokens, s.billed_output_tokens), (expected, 4));
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_input_as_a_string_strings_or_token_ids_is_billed_per_form() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let url = format!("{}/embeddings", mock.base_url());
        let model = "text-embedding-3-small";
        let counter = TokenCounter::new();
        let count = |t: &str| counter.count_text(model, t).unwrap();
        for (input, vectors, tokens) in [
            (json!("one text"), 1, count("one text")),
            (
                json!(["first", "second text"]),
                2,
                count("first") + count("second text"),
            ),
            (json!([101, 102, 103]), 1, 3),
            (json!([[1, 2], [3]]), 2, 3),
        ] {
            let body = json!({"model": model, "input": input, "dimensions": 8, "user": "u-1"});
            let (status, answer) = post(url.clone(), &body).await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(answer["data"].as_array().map(Vec::len), Some(vectors), "{input}");
            assert_eq!(answer["data"][0]["embedding"].as_array().map(Vec::len), Some(8));
            assert_eq!(answer["usage"]["prompt_tokens"], tokens, "{input}");
        }
        let billed: u64 = mock.arrivals().iter().map(|a| a.input_tokens).sum();
        assert_eq!(
            billed,
            count("one text") + count("first") + count("second text") + 6
        );
        mock.shutdown().await;
    })
    .await;
}
