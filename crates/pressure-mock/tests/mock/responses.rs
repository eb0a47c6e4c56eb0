//! `POST /v1/responses`, `POST /v1/messages/count_tokens` and prompt-cache
//! usage, against the mock on 127.0.0.1:0 with reqwest: answers and
//! function-call round trips, the exact event order of a stream, faults
//! before and during a stream, the quota shared with chat, cache reads and
//! their bill, malformed bodies.

use pressure_mock::{Behaviour, Outcome, Phase, Price, RateLimit};
use serde_json::{json, Value};

use super::{bounded, fast, start, MODEL};

const CLAUDE: &str = "claude-sonnet-4-5";

async fn post(url: String, body: &Value) -> (u16, reqwest::header::HeaderMap, String) {
    let r = reqwest::Client::new().post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

async fn post_json(url: String, body: &Value) -> (u16, Value) {
    let (status, _, text) = post(url, body).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The (event name, data) pairs of an SSE body.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or_default()
                .to_owned();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
            (name, serde_json::from_str(data).unwrap())
        })
        .collect()
}

/// The event types of a Responses stream, checking each `event:` line
/// names its data's `type` and the sequence numbers count from 0 by 1.
fn types(events: &[(String, Value)]) -> Vec<String> {
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "{data}");
        assert_eq!(data["sequence_number"], i, "{data}");
    }
    events.iter().map(|(n, _)| n.clone()).collect()
}

fn weather_tools() -> Value {
    json!([{"type": "function", "name": "weather", "description": "The weather of a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_text_and_a_function_call_round_trip() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let url = format!("{}/responses", mock.base_url());
        let (status, r) = post_json(url.clone(), &json!({"model": MODEL, "input": "Say hello.", "max_output_tokens": 5})).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!((r["object"].as_str(), r["status"].as_str()), (Some("response"), Some("incomplete")));
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
        assert!(r["id"].as_str().unwrap().starts_with("resp_"));
        assert!(r["created_at"].as_u64().unwrap() > 1_600_000_000);
        let msg = &r["output"][0];
        assert_eq!((msg["type"].as_str(), msg["role"].as_str()), (Some("message"), Some("assistant")));
        assert!(msg["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(msg["content"][0]["type"], "output_text");
        assert!(msg["content"][0]["text"].as_str().unwrap().starts_with("This is"));
        let u = &r["usage"];
        assert_eq!(u["output_tokens"], 5);
        assert_eq!(u["input_tokens_details"]["cached_tokens"], 0);
        assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 0);
        assert_eq!(u["total_tokens"], u["input_tokens"].as_u64().unwrap() + 5);
        assert_eq!((r["parallel_tool_calls"].as_bool(), r["error"].is_null()), (Some(true), true));

        // Tools offered and a user turn last: a function call.
        let first = json!({"model": MODEL, "input": [{"role": "user", "content": "Weather in Paris?"}], "tools": weather_tools()});
        let (status, r) = post_json(url.clone(), &first).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["status"], "completed");
        let call = &r["output"][0];
        assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("function_call"), Some("weather")));
        assert!(call["id"].as_str().unwrap().starts_with("fc_"));
        assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "mock"}));
        assert_eq!(r["tools"], weather_tools());
        assert!(r["usage"]["output_tokens"].as_u64().unwrap() > 0);

        // The call's output back: text.
        let second = json!({"model": MODEL, "tools": weather_tools(), "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": call["call_id"], "name": "weather", "arguments": call["arguments"]},
            {"type": "function_call_output", "call_id": call["call_id"], "output": "18 C, dry"}]});
        let (status, r) = post_json(url, &second).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!((r["output"][0]["type"].as_str(), r["status"].as_str()), (Some("message"), Some("completed")));

        let s = mock.stats();
        assert_eq!(s.by_endpoint.get("/v1/responses"), Some(&3));
        let billed_in: u64 = mock.arrivals().iter().map(|a| a.input_tokens).sum();
        assert_eq!(s.billed_input_tokens, billed_in);
        assert!(s.billed_output_tokens > 5);
        mock.shutdown().await;
    })
    .await;
}

const TEXT_ORDER: [&str; 4] = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_stream_follows_openais_event_order() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let url = format!("{}/responses", mock.base_url());
        let (status, headers, text) = post(
            url.clone(),
            &json!({"model": MODEL, "input": "Stream.", "stream": true}),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "text/event-stream");
        let evs = events(&text);
        let got = types(&evs);
        let deltas = got.iter().filter(|t| *t == "response.output_text.delta").count();
        assert!(deltas >= 2, "{got:?}");
        let mut want: Vec<&str> = TEXT_ORDER.to_vec();
        want.extend(std::iter::repeat_n("response.output_text.delta", deltas));
        want.extend([
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]);
        assert_eq!(got, want);
        assert_eq!(evs[0].1["response"]["status"], "in_progress");
        assert_eq!(evs[0].1["response"]["output"], json!([]));
        let joined: String = evs
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .map(|(_, d)| {
                assert_eq!(
                    (d["output_index"].as_u64(), d["content_index"].as_u64()),
                    (Some(0), Some(0))
                );
                d["delta"].as_str().unwrap().to_owned()
            })
            .collect();
        let done = &evs[got.iter().position(|t| t == "response.output_text.done").unwrap()].1;
        assert_eq!(done["text"], joined.as_str());
        let last = &evs.last().unwrap().1["response"];
        assert_eq!(last["status"], "completed");
        assert_eq!(last["usage"]["output_tokens"], 48);
        assert_eq!(last["output"][0]["content"][0]["text"], joined.as_str());

        // A function call.
        let body =
            json!({"model": MODEL, "input": "Weather in Paris?", "tools": weather_tools(), "stream": true});
        let (_, _, text) = post(url, &body).await;
        let evs = events(&text);
        let got = types(&evs);
        let deltas = got
            .iter()
            .filter(|t| *t == "response.function_call_arguments.delta")
            .count();
        assert!(deltas >= 1, "{got:?}");
        let mut want = vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
        ];
        want.extend(std::iter::repeat_n(
            "response.function_call_arguments.delta",
            deltas,
        ));
        want.extend([
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]);
        assert_eq!(got, want);
        assert_eq!(evs[2].1["item"]["arguments"], "");
        let args: String = evs
            .iter()
            .filter(|(n, _)| n == "response.function_call_arguments.delta")
            .map(|(_, d)| d["delta"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(args, r#"{"city":"mock"}"#);
        let last = &evs.last().unwrap().1["response"];
        assert_eq!(last["output"][0]["arguments"], args.as_str());
        assert_eq!(mock.stats().by_outcome.get(&Outcome::Ok), Some(&2));
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_faults_before_and_during_the_answer() {
    bounded(async {
        let mock = start(Behaviour::preset("overloaded").unwrap()).await;
        let url = format!("{}/responses", mock.base_url());
        let (status, r) = post_json(url.clone(), &json!({"model": MODEL, "input": "hi"})).await;
        assert_eq!(status, 503);
        assert_eq!(r["error"]["type"], "server_error");
        assert!(r["error"]["message"].is_string() && r["error"].get("param").is_some() && r["error"].get("code").is_some());

        mock.set_behaviour(Behaviour::single(Phase {
            stream_error_share: 1.0,
            ..fast("failing")
        }))
        .unwrap();
        let (status, _, text) = post(url.clone(), &json!({"model": MODEL, "input": "hi", "stream": true})).await;
        assert_eq!(status, 200);
        let evs = events(&text);
        let got = types(&evs);
        let mut want = TEXT_ORDER.to_vec();
        want.extend(["response.output_text.delta", "response.failed"]);
        assert_eq!(got, want);
        let failed = &evs.last().unwrap().1["response"];
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["error"]["code"], "server_error");
        // The same fault on chat and messages ends with their error events.
        let chat = format!("{}/chat/completions", mock.base_url());
        let (_, _, text) = post(chat, &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": true})).await;
        assert!(text.trim_end().ends_with(r#""code":"server_error"}}"#), "{text}");
        let messages = format!("{}/messages", mock.base_url());
        let body = json!({"model": CLAUDE, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}], "stream": true});
        let (_, _, text) = post(messages, &body).await;
        assert_eq!(events(&text).last().unwrap().0, "error");
        // A JSON request drawing it is a 500 at once.
        let (status, r) = post_json(url, &json!({"model": MODEL, "input": "hi"})).await;
        assert_eq!((status, r["error"]["type"].as_str()), (500, Some("server_error")));

        let failed: Vec<_> = mock.arrivals().into_iter().filter(|a| a.stream).collect();
        assert_eq!(failed.len(), 3);
        for a in failed {
            assert_eq!((a.outcome, a.status, a.output_tokens), (Outcome::ServerError, 200, 0));
            assert!(a.input_tokens > 0);
        }
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_share_the_quota_with_chat() {
    bounded(async {
        let phase = Phase {
            rate_limit: Some(RateLimit {
                requests: 2,
                tokens: 0,
                window_ms: 60_000,
            }),
            ..fast("limited")
        };
        let mock = start(Behaviour::single(phase)).await;
        let chat = format!("{}/chat/completions", mock.base_url());
        let responses = format!("{}/responses", mock.base_url());
        let (status, _) = post_json(
            chat.clone(),
            &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        assert_eq!(status, 200);
        let (status, headers, _) = post(responses.clone(), &json!({"model": MODEL, "input": "hi"})).await;
        assert_eq!(
            (status, &headers["x-ratelimit-remaining-requests"]),
            (200, &"0".parse().unwrap())
        );
        let (status, headers, text) = post(responses, &json!({"model": MODEL, "input": "hi"})).await;
        assert_eq!(status, 429, "{text}");
        assert!(headers.contains_key("retry-after"));
        let r: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(r["error"]["code"], "rate_limit_exceeded");
        let (status, _) = post_json(
            chat,
            &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        assert_eq!(status, 429);
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_responses_bodies_get_openais_400() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let url = format!("{}/responses", mock.base_url());
        for body in ["{not json", r#"{"model":"m","input":5}"#, r#"{"input":"hi"}"#] {
            let r = reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{body}");
            let e: Value = r.json().await.unwrap();
            assert_eq!(e["error"]["type"], "invalid_request_error", "{body}");
            assert!(e["error"]["message"].is_string() && e["error"].get("param").is_some());
        }
        let s = mock.stats();
        assert_eq!(
            (s.by_outcome.get(&Outcome::BadRequest), s.billed_input_tokens),
            (Some(&3), 0)
        );
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_cache_control_writes_then_reads_and_bills_by_class() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let url = format!("{}/messages", mock.base_url());
        let long = "The policy manual says many careful things. ".repeat(60);
        let body = json!({"model": CLAUDE, "max_tokens": 8,
            "system": [{"type": "text", "text": long, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "Summarise."}]});
        let (status, first) = post_json(url.clone(), &body).await;
        assert_eq!(status, 200, "{first}");
        let created = first["usage"]["cache_creation_input_tokens"].as_u64().unwrap();
        assert!(created > 300, "{first}");
        assert_eq!(first["usage"]["cache_read_input_tokens"], 0);
        let (_, second) = post_json(url.clone(), &body).await;
        assert_eq!(second["usage"]["cache_read_input_tokens"], created);
        assert_eq!(second["usage"]["cache_creation_input_tokens"], 0);
        let rest = second["usage"]["input_tokens"].as_u64().unwrap();
        assert_eq!(rest, first["usage"]["input_tokens"].as_u64().unwrap());
        assert!(rest > 0);
        // The stream carries the fields in message_start and message_delta.
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let (_, _, text) = post(url.clone(), &streamed).await;
        let evs = events(&text);
        assert_eq!(evs[0].1["message"]["usage"]["cache_read_input_tokens"], created);
        let delta = &evs.iter().find(|(n, _)| n == "message_delta").unwrap().1;
        assert_eq!(delta["usage"]["cache_read_input_tokens"], created);
        assert_eq!(delta["usage"]["input_tokens"], rest);
        // Without cache_control both fields are 0.
        let plain =
            json!({"model": CLAUDE, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
        let (_, r) = post_json(url, &plain).await;
        assert_eq!(
            (
                r["usage"]["cache_creation_input_tokens"].as_u64(),
                r["usage"]["cache_read_input_tokens"].as_u64()
            ),
            (Some(0), Some(0))
        );

        let s = mock.stats();
        let bill = &s.by_model[CLAUDE];
        assert_eq!(
            (bill.cache_write_input_tokens, bill.cache_read_input_tokens),
            (created, 2 * created)
        );
        let total_in = 3 * (created + rest) + r["usage"]["input_tokens"].as_u64().unwrap();
        assert_eq!(bill.input_tokens, total_in);
        let price = pressure_mock::MockConfig::default().default_price;
        let uncached = total_in - 3 * created;
        let money = (u128::from(uncached) * u128::from(price.input_micro_usd_per_1m)
            + u128::from(created) * u128::from(price.cache_write_micro_usd_per_1m)
            + u128::from(2 * created) * u128::from(price.cache_read_micro_usd_per_1m)
            + u128::from(bill.output_tokens) * u128::from(price.output_micro_usd_per_1m))
        .div_ceil(1_000_000);
        assert_eq!(u128::from(bill.micro_usd), money);
        assert_eq!(
            price.cache_write_micro_usd_per_1m,
            price.input_micro_usd_per_1m * 5 / 4
        );
        assert_eq!(s.billed_cache_read_input_tokens, 2 * created);
        let arrivals: u64 = mock.arrivals().iter().map(|a| a.micro_usd).sum();
        assert!(arrivals >= bill.micro_usd, "each arrival rounds up on its own");

        // A reset forgets the cache.
        mock.reset();
        let (_, again) = post_json(format!("{}/messages", mock.base_url()), &body).await;
        assert_eq!(again["usage"]["cache_creation_input_tokens"], created);
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_caches_long_prompts_automatically() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let chat = format!("{}/chat/completions", mock.base_url());
        let long = "Every request repeats this long preamble of policy. ".repeat(150);
        let body = json!({"model": MODEL, "max_tokens": 4, "messages": [
            {"role": "system", "content": long}, {"role": "user", "content": "Go."}]});
        let (status, first) = post_json(chat.clone(), &body).await;
        assert_eq!(status, 200, "{first}");
        let prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!(prompt >= 1_024, "{prompt}");
        assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        let (_, second) = post_json(chat.clone(), &body).await;
        assert_eq!(
            second["usage"]["prompt_tokens_details"]["cached_tokens"],
            prompt / 128 * 128
        );
        // Short prompts are never cached, but always carry the field.
        let short = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]});
        post_json(chat.clone(), &short).await;
        let (_, r) = post_json(chat, &short).await;
        assert_eq!(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        // The Responses API reports the same.
        let responses = format!("{}/responses", mock.base_url());
        let body =
            json!({"model": MODEL, "instructions": long, "input": "Go.", "prompt_cache_key": "tenant-1"});
        let (_, first) = post_json(responses.clone(), &body).await;
        let input = first["usage"]["input_tokens"].as_u64().unwrap();
        let (_, second) = post_json(responses, &body).await;
        assert_eq!(
            second["usage"]["input_tokens_details"]["cached_tokens"],
            input / 128 * 128
        );
        let s = mock.stats();
        assert_eq!(
            s.by_model[MODEL].cache_write_input_tokens, 0,
            "OpenAI bills no write"
        );
        assert_eq!(
            s.by_model[MODEL].cache_read_input_tokens,
            prompt / 128 * 128 + input / 128 * 128
        );
        let p = Price::new(150_000, 600_000);
        let b = &s.by_model[MODEL];
        assert_eq!(
            b.micro_usd,
            p.micro_usd_cached(b.input_tokens, 0, b.cache_read_input_tokens, b.output_tokens)
        );
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_counts_like_messages_and_bills_nothing() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let messages = json!([{"role": "user", "content": [{"type": "text", "text": "How many tokens is this?"}]}]);
        let tools = json!([{"name": "weather", "input_schema": {"type": "object"}}]);
        let count = format!("{}/messages/count_tokens", mock.base_url());
        let (status, n) = post_json(count.clone(), &json!({"model": CLAUDE, "system": "Be terse.", "messages": messages, "tools": tools})).await;
        assert_eq!(status, 200, "{n}");
        assert_eq!(n.as_object().unwrap().len(), 1, "{n}");
        let body = json!({"model": CLAUDE, "max_tokens": 4, "system": "Be terse.", "messages": messages, "tools": tools});
        let (_, answer) = post_json(format!("{}/messages", mock.base_url()), &body).await;
        assert_eq!(n["input_tokens"], answer["usage"]["input_tokens"]);
        let (status, e) = post_json(count, &json!({"model": CLAUDE})).await;
        assert_eq!((status, e["type"].as_str()), (400, Some("error")));

        let s = mock.stats();
        assert_eq!(s.by_endpoint.get("/v1/messages/count_tokens"), Some(&2));
        let counted: Vec<_> = mock
            .arrivals()
            .into_iter()
            .filter(|a| a.endpoint == "/v1/messages/count_tokens")
            .collect();
        assert!(counted.iter().all(|a| a.input_tokens == 0 && a.micro_usd == 0));
        assert_eq!(s.billed_input_tokens, answer["usage"]["input_tokens"].as_u64().unwrap());
        mock.shutdown().await;
    })
    .await;
}
