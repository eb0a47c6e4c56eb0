//! A long pause inside a stream (a model thinking): the provider's read
//! timeout bounds the pause, not the answer, and the gateway writes a
//! `ping` to the agent while nothing comes, so idle proxies keep the
//! connection.

use super::support::TestGateway;
use super::*;
use axum::body::Body;
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use std::time::Duration;
use tokio::net::TcpListener;

/// The Anthropic events of an answer, before and after a pause.
fn event(name: &str, data: Value) -> Result<Bytes, std::convert::Infallible> {
    Ok(Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
}

/// A provider that streams `message_start` and one text delta, is silent
/// for `pause`, then finishes the answer.
async fn pausing_provider(pause: Duration) -> (String, tokio::task::JoinHandle<()>) {
    let app = Router::new().route(
        "/v1/messages",
        post(move || async move {
            let head = vec![
                event(
                    "message_start",
                    json!({"type": "message_start", "message": {"id": "msg_p", "type": "message",
                      "role": "assistant", "model": "claude-m", "content": [], "stop_reason": null,
                      "stop_sequence": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
                ),
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hmm"}}),
                ),
            ];
            let tail = vec![
                event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ", done."}}),
                ),
                event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
                event(
                    "message_delta",
                    json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                           "usage": {"output_tokens": 4}}),
                ),
                event("message_stop", json!({"type": "message_stop"})),
            ];
            let paused = futures::stream::once(async move {
                tokio::time::sleep(pause).await;
                Ok::<_, std::convert::Infallible>(Bytes::new())
            });
            let body = futures::stream::iter(head)
                .chain(paused)
                .chain(futures::stream::iter(tail));
            http::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(body))
                .expect("response")
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), task)
}

#[tokio::test]
async fn a_long_pause_inside_a_stream_gets_a_ping_and_the_answer_ends_whole() {
    // The gateway's keep-alive is 10 s: a pause of 13 s crosses it once,
    // with room for a slow machine on either side.
    let test = async {
        let (base, provider_task) = pausing_provider(Duration::from_secs(13)).await;
        let mut anth = provider("anthropic", &base);
        anth["timeouts"] = json!({ "readMs": 20_000 });
        let use_cases = json!({ "claude": use_case(&["anth/claude-m"], &["claude-*"]) });
        let gw = TestGateway::start(section(
            json!({ "anth": anth }),
            vec![model("anth", "claude-m")],
            use_cases,
            roomy(),
        ))
        .await;
        let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true,
                           "messages": [ { "role": "user", "content": "Think, then answer." } ] });
        let r = post_raw(&gw, "/v1/messages", body.to_string(), ANTHROPIC_HEADERS).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let names = anthropic_names(&sse(&r.body));
        assert_anthropic_order(&names);
        let pause_at = names
            .iter()
            .position(|n| n == "ping")
            .unwrap_or_else(|| panic!("no ping during the pause: {names:?}"));
        // The ping came between the two deltas: while the provider was silent.
        let deltas: Vec<usize> = names
            .iter()
            .enumerate()
            .filter(|(_, n)| *n == "content_block_delta")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(deltas.len(), 2, "{names:?}");
        assert!(deltas[0] < pause_at && pause_at < deltas[1], "{names:?}");
        assert_eq!(names.last().map(String::as_str), Some("message_stop"));
        gw.stop().await;
        provider_task.abort();
    };
    tokio::time::timeout(Duration::from_secs(40), test)
        .await
        .expect("test exceeded its time bound");
}
