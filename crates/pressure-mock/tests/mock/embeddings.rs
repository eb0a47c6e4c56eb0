//! `POST /v1/embeddings` on the mock: deterministic unit vectors of the
//! right length (floats and base64), billed on input tokens and recorded,
//! and the scenarios (500 storm, quota 429, hang) applied like to chat.

use super::{bounded, client, deadline, fast, start, MODEL};
use base64::Engine as _;
use pressure_llm::provider::{CallTag, EmbeddingInput, EmbeddingRequest, TimeoutsConfig};
use pressure_llm::taxonomy::{ErrorKind, TimeoutPhase};
use pressure_llm::tokens::TokenCounter;
use pressure_mock::{default_dimensions, Behaviour, Outcome, Phase, RateLimit, BAD_REQUEST_MARKER};
use serde_json::{json, Value};

const EMBED: &str = "text-embedding-3-small";

fn texts(items: &[&str]) -> EmbeddingRequest {
    EmbeddingRequest::new(
        EMBED,
        EmbeddingInput::Texts(items.iter().map(|s| (*s).to_owned()).collect()),
    )
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array of floats")
        .iter()
        .map(|x| x.as_f64().expect("a float"))
        .collect()
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_are_deterministic_unit_length_and_billed_on_input() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let c = client(&mock, TimeoutsConfig::default());
        let req = texts(&["hello world", "something else", "hello world"]);
        let tag = CallTag {
            request_id: Some("evt-1".into()),
            attempt: 1,
            probe: false,
            traceparent: None,
        };
        let a = c.embed_tagged(&req, deadline(), &tag).await.unwrap().response;
        let b = c.embed(&req, deadline()).await.unwrap().response;
        assert_eq!(a.object, "list");
        assert_eq!(a.model, EMBED);
        assert_eq!(a.data.len(), 3);
        let vectors: Vec<Vec<f64>> = a.data.iter().map(|d| floats(&d.embedding)).collect();
        for (i, (d, v)) in a.data.iter().zip(&vectors).enumerate() {
            assert_eq!(d.index as usize, i);
            assert_eq!(d.object, "embedding");
            assert_eq!(v.len(), default_dimensions(EMBED) as usize);
            assert!((norm(v) - 1.0).abs() < 1e-4, "unit length, got {}", norm(v));
        }
        assert_eq!(vectors[0], vectors[2], "the same text, the same vector");
        assert_ne!(vectors[0], vectors[1], "another text, another vector");
        assert_eq!(a.data, b.data, "the same request answers the same vectors");

        let counter = TokenCounter::new();
        let input: u64 = ["hello world", "something else", "hello world"]
            .iter()
            .map(|t| counter.count_text(EMBED, t).unwrap())
            .sum();
        let usage = a.usage.expect("usage");
        assert_eq!((usage.prompt_tokens, usage.total_tokens), (input, input));
        let s = mock.stats();
        assert_eq!(s.by_model[EMBED].requests, 2);
        assert_eq!(s.by_model[EMBED].input_tokens, 2 * input);
        assert_eq!(s.billed_output_tokens, 0);
        assert!(s.billed_micro_usd > 0);
        let first = &mock.arrivals()[0];
        assert_eq!(
            (
                first.model.as_str(),
                first.request_id.as_deref(),
                first.attempt,
                first.outcome
            ),
            (EMBED, Some("evt-1"), Some(1), Outcome::Ok)
        );
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dimensions_token_ids_and_base64_agree() {
    bounded(async {
        let mock = start(Behaviour::single(fast("normal"))).await;
        let c = client(&mock, TimeoutsConfig::default());
        let mut req = EmbeddingRequest::new(EMBED, EmbeddingInput::TokenArrays(vec![vec![1, 2, 3], vec![4]]));
        req.dimensions = Some(8);
        let plain = c.embed(&req, deadline()).await.unwrap().response;
        assert_eq!(plain.usage.as_ref().map(|u| u.prompt_tokens), Some(4));
        req.encoding_format = Some("base64".into());
        let packed = c.embed(&req, deadline()).await.unwrap().response;
        for (p, b) in plain.data.iter().zip(&packed.data) {
            let want = floats(&p.embedding);
            assert_eq!(want.len(), 8);
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b.embedding.as_str().expect("a base64 string"))
                .unwrap();
            let got: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            // JSON carries the shortest text of each f32: the same f32 back.
            #[allow(clippy::cast_possible_truncation)]
            let want: Vec<f32> = want.iter().map(|x| *x as f32).collect();
            assert_eq!(got, want);
        }
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_apply_to_embeddings() {
    bounded(async {
        // A 500 storm: unbilled 500s.
        let mock = start(Behaviour::preset("500-storm").unwrap()).await;
        let c = client(&mock, TimeoutsConfig::default());
        let err = c.embed(&texts(&["hi"]), deadline()).await.unwrap_err();
        assert!(
            matches!(err.kind, ErrorKind::Server { status: 500, .. }),
            "{err:?}"
        );
        assert_eq!(mock.stats().by_outcome.get(&Outcome::ServerError), Some(&1));
        assert_eq!(mock.stats().billed_input_tokens, 0);
        mock.shutdown().await;

        // The quota counts input tokens: the second request is over it.
        let phase = Phase {
            rate_limit: Some(RateLimit {
                requests: 0,
                tokens: 5,
                window_ms: 60_000,
            }),
            ..fast("quota")
        };
        let mock = start(Behaviour::single(phase)).await;
        let c = client(&mock, TimeoutsConfig::default());
        c.embed(&texts(&["one two three"]), deadline()).await.unwrap();
        let err = c.embed(&texts(&["one two three"]), deadline()).await.unwrap_err();
        assert!(
            matches!(err.kind, ErrorKind::RateLimited { retry_after: Some(_) }),
            "{err:?}"
        );
        assert_eq!(mock.stats().by_outcome.get(&Outcome::RateLimited), Some(&1));

        // A bad request is refused, unbilled.
        let before = mock.stats().billed_input_tokens;
        let err = c
            .embed(&texts(&[&format!("x {BAD_REQUEST_MARKER}")]), deadline())
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::BadRequest);
        let raw = reqwest::Client::new()
            .post(format!("{}/embeddings", mock.base_url()))
            .json(&json!({"model": MODEL, "input": []}))
            .send()
            .await
            .unwrap();
        assert_eq!(raw.status(), 400);
        assert_eq!(mock.stats().billed_input_tokens, before);
        mock.shutdown().await;

        // A hang is cut by the client's first-byte timeout; input billed.
        let hang = Phase {
            hang_share: 1.0,
            ..fast("hang")
        };
        let mock = start(Behaviour::single(hang)).await;
        let c = client(
            &mock,
            TimeoutsConfig {
                first_byte_ms: 200,
                ..TimeoutsConfig::default()
            },
        );
        let err = c.embed(&texts(&["hi"]), deadline()).await.unwrap_err();
        assert_eq!(err.timeout_phase(), Some(TimeoutPhase::FirstByte), "{err:?}");
        assert_eq!(mock.stats().by_outcome.get(&Outcome::Hung), Some(&1));
        assert!(mock.stats().billed_input_tokens > 0);
        mock.shutdown().await;
    })
    .await;
}
