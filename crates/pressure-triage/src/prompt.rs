//! The prompt the model levels get and the parser of their answers.
//!
//! The system prompt lists the labels with one line of meaning each and asks
//! for the label only; [`parse_label`] still reads answers that do not obey
//! (`"Label: Billing."`, `"account access"`, a sentence naming one label),
//! because a real model sometimes adds words, and an answer that names a
//! class should count as that class rather than as a failure of the level.

use pressure_llm::provider::{ChatRequest, Message};
use serde_json::{json, Value};

use super::dataset::LABELS;

/// The output cap of a classification request: a label is a few tokens.
pub const MAX_TOKENS: u32 = 16;

/// One line of meaning per label, shown to the model.
fn describe(label: &str) -> &'static str {
    match label {
        "billing" => "charges, refunds, invoices, receipts, prices, payment methods",
        "account_access" => {
            "signing in, passwords, two-factor codes, locked or suspended accounts, who can access"
        }
        "shipping" => "orders in transit, delivery, tracking, damaged or missing parcels, customs",
        "bug_report" => "the product misbehaves: crashes, errors, wrong display, broken features",
        "feature_request" => "asking for something the product does not do yet",
        "cancellation" => "ending a subscription, contract, trial or account",
        _ => "",
    }
}

/// The system prompt: the task, the labels of `labels` with their meaning,
/// and the instruction to answer with the label only.
pub fn system_prompt(labels: &[&str]) -> String {
    let mut s = String::from(
        "You triage customer support tickets. Classify the ticket in the user message into exactly one \
         of these labels:\n",
    );
    for label in labels {
        let meaning = describe(label);
        if meaning.is_empty() {
            s.push_str(&format!("- {label}\n"));
        } else {
            s.push_str(&format!("- {label}: {meaning}\n"));
        }
    }
    s.push_str("Answer with the label only, exactly as written above, and nothing else.");
    s
}

/// The chat request classifying `text` with the labels of [`LABELS`];
/// `model` is the provider's model name or a use case, as the caller needs.
pub fn request(model: &str, text: &str) -> ChatRequest {
    let mut req = ChatRequest::new(
        model,
        vec![
            Message::new("system", system_prompt(LABELS)),
            Message::new("user", text),
        ],
    );
    req.max_tokens = Some(MAX_TOKENS);
    req
}

/// The output cap of a schema-constrained request: `{"label": "feature_request"}`
/// and the whitespace a grammar allows is about a dozen tokens.
pub const STRUCTURED_MAX_TOKENS: u32 = 32;

/// How [`structured_request`] asks for a schema-constrained answer: the
/// `response_format` dialects of OpenAI-compatible servers differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaFormat {
    /// OpenAI's structured outputs, `{"type": "json_schema", "json_schema":
    /// {"name", "strict", "schema"}}`: OpenAI, vLLM, llama.cpp's
    /// `llama-server`.
    #[default]
    JsonSchema,
    /// JSON mode with a schema, `{"type": "json_object", "schema": …}`:
    /// llama-cpp-python's server (which refuses `json_schema`).
    JsonObject,
}

/// The JSON schema of a label answer: `{"label": <one of labels>}` (an
/// object, because OpenAI's structured outputs want one at the top), no
/// other property.
pub fn label_schema(labels: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": { "label": { "type": "string", "enum": labels } },
        "required": ["label"],
        "additionalProperties": false
    })
}

/// The `response_format` that constrains the answer to [`label_schema`] of
/// `labels`, in `format`'s dialect. Servers that compile schemas to
/// grammars (llama.cpp, vLLM) then cannot answer anything else.
pub fn response_format(labels: &[&str], format: SchemaFormat) -> Value {
    match format {
        SchemaFormat::JsonSchema => json!({
            "type": "json_schema",
            "json_schema": { "name": "triage_label", "strict": true, "schema": label_schema(labels) }
        }),
        SchemaFormat::JsonObject => json!({ "type": "json_object", "schema": label_schema(labels) }),
    }
}

/// [`request`] with the answer constrained to one label of [`LABELS`]
/// ([`response_format`], which the client passes through unchanged) and
/// [`STRUCTURED_MAX_TOKENS`] as its output cap.
pub fn structured_request(model: &str, text: &str, format: SchemaFormat) -> ChatRequest {
    let mut req = request(model, text);
    req.max_tokens = Some(STRUCTURED_MAX_TOKENS);
    req.extra
        .insert("response_format".to_owned(), response_format(LABELS, format));
    req
}

/// Lower case, with every run of characters other than ASCII letters and
/// digits turned into one `_`, trimmed of `_`: `"Account Access."` →
/// `"account_access"`.
fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_owned()
}

/// The label of `labels` that `answer` names, or `None`.
///
/// The answer is lower-cased and every run of spaces, punctuation, quotes
/// or hyphens becomes `_` (so `Account access`, `account-access` and
/// `` `account_access` `` all read as `account_access`). An answer that is
/// exactly a label is that label; otherwise the label occurring earliest as
/// a whole word sequence wins (`"Label: billing (not shipping)"` →
/// `billing`); no label at all gives `None`.
///
/// An answer that is a JSON object with a string `label` (what
/// [`label_schema`] asks for: `{"label": "billing"}`) is read as that string
/// only, so the other fields of the object cannot name a class; a JSON
/// object without one gives `None`.
pub fn parse_label<'a>(answer: &str, labels: &[&'a str]) -> Option<&'a str> {
    let trimmed = answer.trim();
    if trimmed.starts_with('{') {
        if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(trimmed) {
            return match object.get("label") {
                Some(Value::String(label)) => parse_plain(label, labels),
                _ => None,
            };
        }
    }
    parse_plain(answer, labels)
}

/// [`parse_label`] of an answer that is not a JSON object.
fn parse_plain<'a>(answer: &str, labels: &[&'a str]) -> Option<&'a str> {
    let norm = normalize(answer);
    if let Some(l) = labels.iter().find(|l| normalize(l) == norm) {
        return Some(l);
    }
    // Whole-word search: pad with separators so `billing` does not match
    // inside `rebilling`.
    let padded = format!("_{norm}_");
    labels
        .iter()
        .filter_map(|l| padded.find(&format!("_{}_", normalize(l))).map(|at| (at, *l)))
        .min_by_key(|(at, _)| *at)
        .map(|(_, l)| l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Option<&'static str> {
        parse_label(s, LABELS)
    }

    #[test]
    fn exact_and_decorated_labels() {
        assert_eq!(parse("billing"), Some("billing"));
        assert_eq!(parse("  Billing.\n"), Some("billing"));
        assert_eq!(parse("`account_access`"), Some("account_access"));
        assert_eq!(parse("\"Account Access\""), Some("account_access"));
        assert_eq!(parse("feature-request"), Some("feature_request"));
        assert_eq!(parse("Label: SHIPPING"), Some("shipping"));
    }

    #[test]
    fn sentences_take_the_first_label_named() {
        assert_eq!(
            parse("This looks like a bug_report, not a feature_request."),
            Some("bug_report")
        );
        assert_eq!(parse("cancellation (maybe billing)"), Some("cancellation"));
    }

    #[test]
    fn json_answers_are_read_by_their_label_field() {
        assert_eq!(parse("{\"label\":\"billing\"}"), Some("billing"));
        assert_eq!(
            parse(" { \"label\" : \"account_access\" }\n"),
            Some("account_access")
        );
        assert_eq!(parse("{\"label\":\"Feature Request\"}"), Some("feature_request"));
        // Only the label field counts, not a class named elsewhere.
        assert_eq!(parse("{\"label\":\"other\",\"note\":\"not billing\"}"), None);
        assert_eq!(parse("{\"class\":\"billing\"}"), None);
        assert_eq!(parse("{\"label\":3}"), None);
        // Not valid JSON: read as text.
        assert_eq!(parse("{label: shipping"), Some("shipping"));
    }

    #[test]
    fn the_structured_request_asks_for_one_label_of_the_enum() {
        let enum_of = |schema: &Value| -> Vec<String> {
            schema["properties"]["label"]["enum"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        let req = structured_request("m", "where is my parcel", SchemaFormat::JsonSchema);
        assert_eq!(req.max_tokens, Some(STRUCTURED_MAX_TOKENS));
        let format = &req.extra["response_format"];
        assert_eq!(format["type"], "json_schema");
        let schema = &format["json_schema"]["schema"];
        assert_eq!(enum_of(schema), LABELS);
        assert_eq!(schema["required"], json!(["label"]));
        // The wire body carries it at the top level, next to the messages.
        let body = serde_json::to_value(&req).unwrap();
        assert_eq!(body["response_format"], *format);
        assert!(request("m", "x").extra.get("response_format").is_none());

        let req = structured_request("m", "x", SchemaFormat::JsonObject);
        let format = &req.extra["response_format"];
        assert_eq!(format["type"], "json_object");
        assert_eq!(enum_of(&format["schema"]), LABELS);
    }

    #[test]
    fn no_label_or_partial_words_give_none() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("I am not sure."), None);
        assert_eq!(parse("rebilling"), None);
        assert_eq!(parse("account"), None);
        assert_eq!(parse("bug"), None);
    }

    #[test]
    fn the_prompt_lists_every_label() {
        let p = system_prompt(LABELS);
        for l in LABELS {
            assert!(p.contains(&format!("- {l}:")), "{p}");
        }
        let req = request("triage-large", "where is my parcel");
        assert_eq!(req.messages.len(), 2);
        assert_eq!(req.messages[1].text(), "where is my parcel");
        assert_eq!(req.max_tokens, Some(MAX_TOKENS));
    }
}
