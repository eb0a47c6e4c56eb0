//! [`LexicalClassifier`]: the mock provider's stand-in for a triage model.
//!
//! **This is not a model.** It scores the ticket against a hand-written
//! lexicon of weighted words per class and answers the best class, so that
//! the eval and the tests run in CI with no network and no API key, and so
//! that the two mock models differ in quality the way a large and a small
//! model would. Its accuracy on the golden set says nothing about any real
//! model; point the eval at a real provider for that.
//!
//! It never sees the golden labels: it reads only the messages of the
//! request (the label list from the system prompt, the ticket from the last
//! user message).

use pressure_mock::{Responder, Turn};

use super::dataset::LABELS;

/// The mock model that uses the full lexicon; every other model name gets
/// the reduced one.
pub(super) const LARGE_MODEL: &str = "triage-large";

/// The answer when no word of the lexicon occurs (no label in it, so the
/// eval counts it as unanswered).
pub(super) const NO_IDEA: &str = "I cannot tell.";

/// Entries of at least this weight form the reduced lexicon of the small
/// model: it knows the strongest cue words only.
const SMALL_MIN_WEIGHT: u32 = 3;

/// `(cue, weight)` per class. A cue without a space matches any word that
/// starts with it (`refund` matches `refunded`); a cue with spaces matches
/// that sequence of words (the last one as a prefix). Each cue counts once.
const LEXICON: &[(&str, &[(&str, u32)])] = &[
    (
        "billing",
        &[
            ("refund", 4),
            ("invoice", 4),
            ("charged", 4),
            ("overcharg", 4),
            ("billing", 4),
            ("billed", 4),
            ("payment", 4),
            ("receipt", 4),
            ("vat", 4),
            ("discount", 4),
            ("coupon", 4),
            ("promo", 4),
            ("price", 3),
            ("pricing", 3),
            ("paid", 3),
            ("paying", 3),
            ("pay", 2),
            ("charges", 3),
            ("tax", 3),
            ("fee", 2),
            ("money", 3),
            ("statement", 3),
            ("debit", 3),
            ("prorat", 3),
            ("instalment", 3),
            ("installment", 3),
            ("reimburs", 3),
            ("paypal", 3),
            ("credit", 2),
            ("card", 2),
            ("bill", 3),
            ("amount", 2),
            ("balance", 2),
            ("quote", 2),
            ("cost", 2),
            ("renewal", 2),
            ("renewed", 1),
            ("purchase order", 3),
            ("bank", 2),
            ("declined", 2),
            ("reversed", 2),
            ("reverse", 2),
            ("took", 1),
            ("taken", 1),
        ],
    ),
    (
        "account_access",
        &[
            ("password", 5),
            ("login", 5),
            ("log in", 5),
            ("logged", 4),
            ("sign in", 5),
            ("signing in", 5),
            ("sign into", 5),
            ("locked", 5),
            ("unlock", 5),
            ("2fa", 5),
            ("two factor", 5),
            ("authenticat", 4),
            ("credentials", 5),
            ("hacked", 4),
            ("compromised", 4),
            ("sso", 4),
            ("passkey", 4),
            ("username", 4),
            ("get in", 4),
            ("get into", 4),
            ("captcha", 3),
            ("verification", 3),
            ("verify", 2),
            ("code", 2),
            ("codes", 2),
            ("access", 2),
            ("recovery", 3),
            ("invite", 2),
            ("invitation", 2),
            ("suspended", 2),
            ("disabled", 2),
            ("deactivated", 3),
            ("reactivated", 3),
            ("sms", 2),
            ("security", 2),
            ("magic link", 3),
            ("permission", 2),
            ("admin", 1),
            ("owner", 1),
            ("reset", 2),
            ("kicked out", 3),
            ("logins", 3),
            ("account", 1),
        ],
    ),
    (
        "shipping",
        &[
            ("tracking", 5),
            ("parcel", 5),
            ("package", 5),
            ("courier", 5),
            ("delivery", 4),
            ("delivered", 4),
            ("shipping", 4),
            ("shipped", 4),
            ("shipment", 4),
            ("customs", 4),
            ("in transit", 4),
            ("arrive", 3),
            ("arrived", 3),
            ("arrival", 3),
            ("box", 2),
            ("depot", 3),
            ("locker", 3),
            ("dispatch", 3),
            ("express", 2),
            ("driver", 3),
            ("next day", 3),
            ("warehouse", 3),
            ("returned to sender", 3),
            ("crushed", 3),
            ("damaged", 3),
            ("missing", 2),
            ("po box", 3),
            ("backorder", 3),
            ("packaging", 3),
            ("duties", 3),
            ("ship", 3),
            ("send", 1),
            ("sent", 1),
            ("order", 1),
            ("ordered", 1),
            ("address", 1),
            ("label", 1),
            ("received", 1),
            ("wrong item", 3),
            ("still nothing", 2),
            ("where is my order", 4),
        ],
    ),
    (
        "bug_report",
        &[
            ("crash", 5),
            ("error", 4),
            ("bug", 5),
            ("freez", 4),
            ("404", 4),
            ("glitch", 4),
            ("stopped working", 4),
            ("nothing happens", 3),
            ("blank", 3),
            ("loop", 3),
            ("invisible", 3),
            ("broken", 2),
            ("duplicat", 2),
            ("sync", 3),
            ("reload", 3),
            ("firefox", 3),
            ("chrome", 3),
            ("safari", 3),
            ("android", 3),
            ("ios", 3),
            ("api", 3),
            ("console", 3),
            ("widget", 3),
            ("null", 3),
            ("battery", 3),
            ("rotated", 3),
            ("cut off", 3),
            ("cuts out", 3),
            ("empty file", 3),
            ("forever", 2),
            ("stale", 2),
            ("twice", 1),
            ("update", 1),
            ("app", 1),
            ("page", 1),
            ("won't let me", 1),
            ("annoying", 1),
        ],
    ),
    (
        "feature_request",
        &[
            ("would be great", 5),
            ("would love", 5),
            ("please add", 5),
            ("feature", 4),
            ("suggestion", 5),
            ("idea", 4),
            ("any plans", 5),
            ("roadmap", 5),
            ("would you consider", 5),
            ("be nice", 4),
            ("nice to have", 5),
            ("request", 3),
            ("integrate", 3),
            ("integration", 3),
            ("add", 2),
            ("option", 2),
            ("support", 1),
            ("allow", 2),
            ("let me", 2),
            ("let us", 2),
            ("wish", 3),
            ("adjustable", 3),
            ("bulk", 3),
            ("recurring", 3),
            ("webhook", 3),
            ("schedule", 2),
            ("offline", 2),
            ("any chance", 2),
            ("could you", 1),
            ("mode", 1),
        ],
    ),
    (
        "cancellation",
        &[
            ("cancel", 4),
            ("unsubscrib", 5),
            ("terminate", 5),
            ("close my account", 5),
            ("close his account", 5),
            ("delete my account", 5),
            ("don't renew", 5),
            ("close", 3),
            ("closing", 3),
            ("end our contract", 5),
            ("end this", 3),
            ("end the", 2),
            ("stop", 2),
            ("leave", 2),
            ("quit", 3),
            ("pause", 3),
            ("membership", 2),
            ("contract", 2),
            ("no longer", 2),
            ("anymore", 2),
            ("notice", 2),
            ("i'm done", 3),
            ("delete", 2),
        ],
    ),
];

/// The stand-in triage "model" behind the mock provider (see the module
/// docs): weighted word scoring, full lexicon for the large model (`triage-large`), reduced
/// lexicon (cues of weight ≥ 3 only) for any other model.
#[derive(Debug, Clone, Copy, Default)]
pub struct LexicalClassifier;

impl LexicalClassifier {
    /// The label `model` gives `text` among `labels`, or `None` when no cue
    /// of the model's lexicon occurs. Ties go to the label earlier in
    /// `labels`.
    pub fn classify<'a>(&self, model: &str, text: &str, labels: &[&'a str]) -> Option<&'a str> {
        let min_weight = if model == LARGE_MODEL { 0 } else { SMALL_MIN_WEIGHT };
        let words = words(text);
        let mut best: Option<(u32, &'a str)> = None;
        for label in labels {
            let Some((_, cues)) = LEXICON.iter().find(|(l, _)| l == label) else {
                continue;
            };
            let score: u32 = cues
                .iter()
                .filter(|(_, w)| *w >= min_weight)
                .filter(|(cue, _)| matches(&words, cue))
                .map(|(_, w)| w)
                .sum();
            if score > 0 && best.is_none_or(|(b, _)| score > b) {
                best = Some((score, label));
            }
        }
        best.map(|(_, l)| l)
    }
}

impl Responder for LexicalClassifier {
    fn respond(&self, model: &str, turns: &[Turn]) -> String {
        let text = turns
            .iter()
            .rev()
            .find(|t| t.role == "user")
            .map(|t| t.text.clone())
            .unwrap_or_default();
        let system = turns
            .iter()
            .filter(|t| t.role == "system")
            .map(|t| t.text.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let offered = offered_labels(&system);
        let labels: &[&str] = if offered.is_empty() { LABELS } else { &offered };
        self.classify(model, &text, labels)
            .map_or_else(|| NO_IDEA.to_owned(), str::to_owned)
    }
}

/// The labels of [`LABELS`] that the system prompt lists (`- label` lines),
/// in [`LABELS`] order; empty when it lists none.
fn offered_labels(system: &str) -> Vec<&'static str> {
    LABELS
        .iter()
        .copied()
        .filter(|l| {
            system.lines().any(|line| {
                let rest = line.trim_start().strip_prefix('-').map(str::trim_start);
                rest.is_some_and(|r| r == *l || r.starts_with(&format!("{l}:")))
            })
        })
        .collect()
}

/// The lower-cased words of `text`: runs of ASCII letters, digits and
/// apostrophes (`'` or `’`, kept as `'`); everything else separates words,
/// so `two-factor` is `two factor`.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            cur.push(c.to_ascii_lowercase());
        } else if (c == '\'' || c == '’') && !cur.is_empty() {
            cur.push('\'');
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Whether the cue occurs in `words`: its words in sequence, the last one
/// as a prefix of a word.
fn matches(words: &[String], cue: &str) -> bool {
    let cue: Vec<&str> = cue.split(' ').collect();
    let n = cue.len();
    words.len() >= n
        && words.windows(n).any(|w| {
            w.iter().zip(&cue).enumerate().all(|(i, (word, c))| {
                if i + 1 == n {
                    word.starts_with(c)
                } else {
                    word == c
                }
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt;

    fn answer(model: &str, text: &str) -> String {
        let req = prompt::request(model, text);
        let turns: Vec<Turn> = req
            .messages
            .iter()
            .map(|m| Turn::new(&m.role, m.text()))
            .collect();
        LexicalClassifier.respond(model, &turns)
    }

    #[test]
    fn classifies_clear_tickets() {
        assert_eq!(answer(LARGE_MODEL, "Please refund my last invoice"), "billing");
        assert_eq!(
            answer(LARGE_MODEL, "I forgot my password and can't log in"),
            "account_access"
        );
        assert_eq!(
            answer(LARGE_MODEL, "The tracking says the parcel is in transit"),
            "shipping"
        );
        assert_eq!(answer(LARGE_MODEL, "The app crashes on start"), "bug_report");
        assert_eq!(
            answer(LARGE_MODEL, "It would be great to have a dark mode"),
            "feature_request"
        );
        assert_eq!(
            answer(LARGE_MODEL, "Please cancel my subscription"),
            "cancellation"
        );
    }

    #[test]
    fn the_small_model_knows_fewer_cues() {
        let text = "My card was declined at the bank";
        assert_eq!(answer(LARGE_MODEL, text), "billing");
        assert_eq!(answer("triage-small", text), NO_IDEA);
    }

    #[test]
    fn only_offered_labels_are_answered() {
        let messages = vec![
            Turn::new("system", "Labels:\n- shipping\n- cancellation: ending things"),
            Turn::new("user", "refund my parcel please"),
        ];
        assert_eq!(LexicalClassifier.respond(LARGE_MODEL, &messages), "shipping");
    }

    #[test]
    fn words_and_cues() {
        assert_eq!(
            words("Two-factor, can't LOG-in!"),
            vec!["two", "factor", "can't", "log", "in"]
        );
        let w = words("I was double billed");
        assert!(matches(&w, "bill"));
        assert!(matches(&w, "double bill"));
        assert!(!matches(&w, "rebill"));
        assert!(!matches(&words("billing"), "double billing"));
    }
}
