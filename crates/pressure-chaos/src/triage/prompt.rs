//! The prompt the model levels get and the parser of their answers.
//!
//! The system prompt lists the labels with one line of meaning each and asks
//! for the label only; [`parse_label`] still reads answers that do not obey
//! (`"Label: Billing."`, `"account access"`, a sentence naming one label),
//! because a real model sometimes adds words, and an answer that names a
//! class should count as that class rather than as a failure of the level.

use pressure_llm::provider::{ChatRequest, Message};

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
pub fn parse_label<'a>(answer: &str, labels: &[&'a str]) -> Option<&'a str> {
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
