//! Token counting and the request → reservation mapping.
//!
//! Expected counts were cross-checked with OpenAI's Python `tiktoken` 0.14.0
//! (`encode_ordinary`), whose hash check also confirmed that the rank tables
//! embedded by `tiktoken-rs` are OpenAI's published files.
#![allow(clippy::unwrap_used)]

use pressure_core::{Priority, Reserved};
use pressure_llm::reservation::{parse_resource_id, resource_id, ContextError, ModelLimits, Reservation};
use pressure_llm::tokens::{
    ChatMessage, Encoding, ModelEncoding, TokenCounter, REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
};
use std::sync::{Arc, Barrier};

/// (text, cl100k_base, o200k_base), from Python `tiktoken`.
const KNOWN: &[(&str, u64, u64)] = &[
    ("hello world", 2, 2),
    ("tiktoken is great!", 6, 6),
    ("", 0, 0),
    ("Привет, мир! Как дела?", 12, 8),
    ("日本語のテキストも数えます。", 13, 11),
    ("emoji 🚀🔥 and accents: café naïve", 13, 10),
    (
        "fn main() {\n    let x: Vec<u64> = (0..10).map(|i| i * i).collect();\n    println!(\"{:?}\", x);\n}\n",
        36,
        36,
    ),
    ("def f(a, b):\n\treturn a ** b  # power\n", 14, 14),
    ("   leading and trailing   \n\n", 5, 5),
    ("<|endoftext|> is plain text here", 11, 11),
];

fn counter() -> TokenCounter {
    TokenCounter::preloaded(&Encoding::ALL).unwrap()
}

#[test]
fn known_counts_in_both_encodings() {
    let c = counter();
    for &(text, cl100k, o200k) in KNOWN {
        assert_eq!(
            c.count_with(Encoding::Cl100kBase, text).unwrap(),
            cl100k,
            "cl100k {text:?}"
        );
        assert_eq!(
            c.count_with(Encoding::O200kBase, text).unwrap(),
            o200k,
            "o200k {text:?}"
        );
        assert_eq!(c.count_text("gpt-4", text).unwrap(), cl100k, "gpt-4 {text:?}");
        assert_eq!(c.count_text("gpt-4o", text).unwrap(), o200k, "gpt-4o {text:?}");
    }
}

#[test]
fn long_texts_are_cut_without_changing_the_count() {
    let c = counter();
    let para = "The quick brown fox jumps over the lazy dog. Pressure is a rate limiter for LLM calls; \
                it counts tokens before the call, 1234567 times! fn main() { println!(\"hi\"); }\n";
    let big = para.repeat(2000);
    assert_eq!(big.len(), 332_000);
    // Python tiktoken on the whole text.
    assert_eq!(c.count_with(Encoding::Cl100kBase, &big).unwrap(), 86_000);
    assert_eq!(c.count_with(Encoding::O200kBase, &big).unwrap(), 84_000);
    assert_eq!(
        c.count_with(Encoding::O200kBase, &"x ".repeat(50_000)).unwrap(),
        50_001
    );
    let paras = format!("{}\n\n", "word ".repeat(9000)).repeat(10);
    assert_eq!(c.count_with(Encoding::Cl100kBase, &paras).unwrap(), 90_010);
    assert_eq!(c.count_with(Encoding::O200kBase, &paras).unwrap(), 90_010);
}

#[test]
fn a_huge_whitespace_run_does_not_panic() {
    // Whole, 1 MB of spaces makes the o200k regex give up (a panic inside
    // tiktoken-rs); cut into pieces it counts.
    let c = counter();
    let spaces = " ".repeat(1_000_000);
    let n = c.count_with(Encoding::O200kBase, &spaces).unwrap();
    assert!(n > 0 && n < 20_000, "{n}");
    let n = c.count_with(Encoding::Cl100kBase, &spaces).unwrap();
    assert!(n > 0 && n < 20_000, "{n}");
}

#[test]
fn chat_overhead_follows_the_openai_recipe() {
    let c = counter();
    let system =
        "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.";
    let example = "New synergies will help drive top-line growth.";
    let user = "This late pivot means we don't have time to boil the ocean for the client deliverable.";
    let messages = [
        ChatMessage::new("system", system),
        ChatMessage::new("system", example).with_name("example_user"),
        ChatMessage::new("user", user),
    ];
    // Python: the cookbook's num_tokens_from_messages on the same messages.
    assert_eq!(c.count_chat("gpt-4", &messages).unwrap(), 65);
    assert_eq!(c.count_chat("gpt-4o", &messages).unwrap(), 63);
    // The formula, spelled out.
    for model in ["gpt-4", "gpt-4o"] {
        let t = |s: &str| c.count_text(model, s).unwrap();
        let expected = 3 * TOKENS_PER_MESSAGE
            + t("system") * 2
            + t("user")
            + t(system)
            + t(example)
            + t(user)
            + t("example_user")
            + TOKENS_PER_NAME
            + REPLY_PRIMING_TOKENS;
        assert_eq!(c.count_chat(model, &messages).unwrap(), expected, "{model}");
    }
    assert_eq!(
        (TOKENS_PER_MESSAGE, TOKENS_PER_NAME, REPLY_PRIMING_TOKENS),
        (3, 1, 3)
    );
    // (role, content) pairs, borrowed or owned.
    let pairs = [("system", system), ("user", user)];
    assert_eq!(c.count_chat("gpt-4", &pairs).unwrap(), 48);
    assert_eq!(c.count_chat("gpt-4o", &pairs).unwrap(), 46);
    let owned: Vec<(String, String)> = pairs
        .iter()
        .map(|(r, m)| (r.to_string(), m.to_string()))
        .collect();
    assert_eq!(c.count_chat("gpt-4o", &owned).unwrap(), 46);
    // No messages: only the reply priming.
    assert_eq!(
        c.count_chat::<ChatMessage>("gpt-4o", &[]).unwrap(),
        REPLY_PRIMING_TOKENS
    );
}

#[test]
fn model_to_encoding_table() {
    use Encoding::{Cl100kBase as Cl, O200kBase as O2};
    let exact = [
        ("gpt-4o", O2),
        ("gpt-4o-mini", O2),
        ("gpt-4o-2024-08-06", O2),
        ("chatgpt-4o-latest", O2),
        ("gpt-4.1", O2),
        ("gpt-4.1-nano", O2),
        ("gpt-4.5-preview", O2),
        ("gpt-5", O2),
        ("gpt-5-mini", O2),
        ("o1", O2),
        ("o1-mini", O2),
        ("o3", O2),
        ("o3-mini", O2),
        ("o4-mini", O2),
        ("gpt-oss-120b", O2),
        ("openai/gpt-4o", O2),
        ("ft:gpt-4o-mini:acme::abc123", O2),
        ("GPT-4O", O2),
        ("gpt-4", Cl),
        ("gpt-4-turbo", Cl),
        ("gpt-4-0613", Cl),
        ("gpt-4-32k", Cl),
        ("gpt-3.5-turbo", Cl),
        ("gpt-3.5-turbo-0125", Cl),
        ("gpt-35-turbo", Cl),
        ("text-embedding-3-small", Cl),
        ("text-embedding-3-large", Cl),
        ("text-embedding-ada-002", Cl),
        ("ft:gpt-3.5-turbo:acme::x", Cl),
    ];
    for (model, enc) in exact {
        assert_eq!(Encoding::for_model(model), ModelEncoding::exact(enc), "{model}");
    }
    let approximate = [
        ("claude-sonnet-4-5", Cl),
        ("claude-3-5-haiku-latest", Cl),
        ("anthropic/claude-opus-4", Cl),
        ("llama-3.1-70b", O2),
        ("mistral-large", O2),
        ("o10-experimental", O2),
        ("", O2),
    ];
    for (model, enc) in approximate {
        assert_eq!(
            Encoding::for_model(model),
            ModelEncoding::approximate(enc),
            "{model}"
        );
    }
    assert_eq!(Encoding::O200kBase.name(), "o200k_base");
    assert_eq!(Encoding::from_name("cl100k_base"), Some(Cl));
    assert_eq!(Encoding::from_name("p50k_base"), None);
    // An exact-name override, e.g. an Azure deployment.
    let c = TokenCounter::new().with_override("my-deployment", Cl);
    assert_eq!(c.encoding_for("my-deployment"), ModelEncoding::exact(Cl));
    assert_eq!(c.encoding_for("my-deployment-2"), ModelEncoding::approximate(O2));
    assert_eq!(
        c.count_text("my-deployment", "Привет, мир! Как дела?").unwrap(),
        12
    );
}

#[test]
fn cache_gives_the_same_counts() {
    let text = "A system prompt that repeats across requests. ".repeat(40);
    let cached = TokenCounter::new();
    let uncached = TokenCounter::new().with_cache_capacity(0);
    let first = cached.count_text("gpt-4o", &text).unwrap();
    assert_eq!(cached.count_text("gpt-4o", &text).unwrap(), first);
    assert_eq!(uncached.count_text("gpt-4o", &text).unwrap(), first);
    // Same text, other encoding: not confused by the cache.
    assert_eq!(
        cached.count_text("gpt-4", &text).unwrap(),
        uncached.count_text("gpt-4", &text).unwrap()
    );
    // A tiny cache keeps working past its capacity.
    let small = TokenCounter::new().with_cache_capacity(1);
    for i in 0..50 {
        let t = format!("{i} {text}");
        assert_eq!(
            small.count_text("gpt-4o", &t).unwrap(),
            uncached.count_text("gpt-4o", &t).unwrap()
        );
    }
}

#[test]
fn eight_threads_share_one_encoder() {
    let c = TokenCounter::new();
    let barrier = Arc::new(Barrier::new(8));
    let text = "fn main() { println!(\"héllo wörld 🚀\"); } ".repeat(200);
    let expected = TokenCounter::new()
        .with_cache_capacity(0)
        .count_text("gpt-4o", &text)
        .unwrap();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (c, barrier, text) = (c.clone(), barrier.clone(), text.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let model = if i % 2 == 0 { "gpt-4o" } else { "gpt-4" };
                let mut last = 0;
                for j in 0..20 {
                    last = c.count_text(model, &text).unwrap();
                    let small = format!("message {j} from thread {i}");
                    assert!(c.count_chat(model, &[("user", small.as_str())]).unwrap() > 7);
                }
                (i, last)
            })
        })
        .collect();
    for h in handles {
        let (i, n) = h.join().unwrap();
        if i % 2 == 0 {
            assert_eq!(n, expected);
        }
    }
}

fn gpt4o() -> ModelLimits {
    ModelLimits::new(128_000, 16_384).with_default_max_tokens(1_024)
}

#[test]
fn reservation_with_and_without_max_tokens() {
    let c = counter();
    let input = c.count_chat("gpt-4o", &[("user", "hello world")]).unwrap();
    assert_eq!(input, 3 + 1 + 2 + 3);

    let r = Reservation::for_request(input, Some(500), &gpt4o()).unwrap();
    assert_eq!(r, Reservation::new(input, 500));
    assert_eq!(r.priority, Priority::Interactive);

    // Absent: the configured default.
    let r = Reservation::for_request(input, None, &gpt4o()).unwrap();
    assert_eq!((r.input_tokens, r.output_tokens), (input, 1_024));
    // Absent and no default: maxOutputTokens.
    let r = Reservation::for_request(input, None, &ModelLimits::new(128_000, 16_384)).unwrap();
    assert_eq!(r.output_tokens, 16_384);
    // Absent and little room left: only what still fits the window.
    let r = Reservation::for_request(127_900, None, &gpt4o()).unwrap();
    assert_eq!(r.output_tokens, 100);
    // Absent and no room at all.
    let e = Reservation::for_request(128_000, None, &gpt4o()).unwrap_err();
    assert_eq!(e.code(), "context_length_exceeded");
    // Explicit and too large for the window.
    let e = Reservation::for_request(127_900, Some(101), &gpt4o()).unwrap_err();
    assert_eq!(
        e,
        ContextError::ContextLengthExceeded {
            input: 127_900,
            output: 101,
            context: 128_000
        }
    );
    assert_eq!(
        Reservation::for_request(127_900, Some(100), &gpt4o())
            .unwrap()
            .output_tokens,
        100
    );

    let o = r.with_priority(Priority::Batch).acquire_options();
    assert_eq!((o.requests, o.input_tokens, o.output_tokens), (1, 127_900, 100));
    assert_eq!(o.priority, Priority::Batch);
    assert_eq!(
        Reservation::new(10, 20).reserved(),
        Reserved {
            requests: 1,
            input_tokens: 10,
            output_tokens: 20,
            cost_micro_usd: 0,
        }
    );
}

#[test]
fn context_check_rejects_exactly_above_the_window() {
    let l = ModelLimits::new(8_192, 4_096);
    assert_eq!(l.check(4_096, 4_096), Ok(()));
    assert_eq!(l.check(8_192, 0), Ok(()));
    assert_eq!(l.check(0, 0), Ok(()));
    let e = l.check(4_097, 4_096).unwrap_err();
    assert_eq!(e.code(), "context_length_exceeded");
    assert_eq!(e.param(), "messages");
    assert_eq!(e.error_type(), "invalid_request_error");
    assert_eq!(
        e.to_string(),
        "This model's maximum context length is 8192 tokens. However, you requested 8193 tokens \
         (4097 in the messages, 4096 in the completion). Please reduce the length of the messages or \
         completion."
    );
    assert_eq!(l.check(8_193, 0).unwrap_err().code(), "context_length_exceeded");
    assert_eq!(
        l.check(u64::MAX, 1).unwrap_err().code(),
        "context_length_exceeded"
    );
    for input in 0..=8_192u64 {
        let output = 8_192 - input;
        if output <= 4_096 {
            assert!(l.check(input, output).is_ok(), "{input}+{output}");
            assert!(input == 8_192 || l.check(input + 1, output).is_err());
        }
    }
    // max_tokens above the model's output limit is its own error.
    let e = l.check(10, 4_097).unwrap_err();
    assert_eq!(
        e,
        ContextError::OutputTooLarge {
            requested: 4_097,
            max_output: 4_096
        }
    );
    assert_eq!((e.code(), e.param()), ("invalid_value", "max_tokens"));
}

#[test]
fn reconcile_values_come_from_usage() {
    let actual = Reservation::actual((1_234, 56));
    assert_eq!(
        actual,
        Reserved {
            requests: 1,
            input_tokens: 1_234,
            output_tokens: 56,
            cost_micro_usd: 0,
        }
    );
    // A reservation corrected down to what was used.
    let r = Reservation::new(1_240, 1_024);
    assert!(actual.output_tokens < r.reserved().output_tokens);
    assert_eq!(Reservation::actual((0, 0)).requests, 1);
}

#[test]
fn model_limits_are_camel_case() {
    let l: ModelLimits =
        serde_json::from_str(r#"{"contextTokens":128000,"maxOutputTokens":16384,"defaultMaxTokens":1024}"#)
            .unwrap();
    assert_eq!(l, gpt4o());
    let l: ModelLimits = serde_json::from_str(r#"{"contextTokens":8192,"maxOutputTokens":4096}"#).unwrap();
    assert_eq!(l.default_output(), 4_096);
    assert!(serde_json::from_str::<ModelLimits>(r#"{"context_tokens":1,"maxOutputTokens":1}"#).is_err());
    assert_eq!(
        serde_json::to_string(&ModelLimits::new(1, 2)).unwrap(),
        r#"{"contextTokens":1,"maxOutputTokens":2}"#
    );
}

#[test]
fn resource_ids() {
    assert_eq!(resource_id("openai", "gpt-4o"), "llm:openai:gpt-4o");
    assert_eq!(parse_resource_id("llm:openai:gpt-4o"), Some(("openai", "gpt-4o")));
    let ft = resource_id("azure", "ft:gpt-4o-mini:acme::x");
    assert_eq!(parse_resource_id(&ft), Some(("azure", "ft:gpt-4o-mini:acme::x")));
    assert_eq!(parse_resource_id("http:openai:gpt-4o"), None);
    assert_eq!(parse_resource_id("llm:openai"), None);
}
