//! The golden dataset: labelled support tickets, one JSON object a line
//! (`{"id":"T0001","text":"...","label":"billing"}`), loaded and checked
//! before any level is measured, so that a typo in the data reads as a data
//! error naming its line and never as a drop in accuracy.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The classes of the triage example, most frequent first in the shipped
/// dataset. A ticket's `label` must be one of them; the system prompt lists
/// them and the answer parser only accepts them.
pub const LABELS: &[&str] = &[
    "billing",
    "account_access",
    "shipping",
    "bug_report",
    "feature_request",
    "cancellation",
];

/// One labelled ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ticket {
    /// Unique id, e.g. `T0001`.
    pub id: String,
    /// What the customer wrote.
    pub text: String,
    /// The class a person gave it, one of [`LABELS`].
    pub label: String,
}

/// Why a dataset could not be loaded. Every data problem names its 1-based
/// line number.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A line is not a JSON ticket object.
    #[error("line {line}: not a ticket object ({problem})")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What the JSON parser said.
        problem: String,
    },
    /// An id or text is empty (or only whitespace).
    #[error("line {line}: `{field}` must not be empty")]
    Empty {
        /// 1-based line number.
        line: usize,
        /// `id` or `text`.
        field: &'static str,
    },
    /// A label outside the known classes.
    #[error("line {line}: unknown label {label:?} (known: {known})")]
    UnknownLabel {
        /// 1-based line number.
        line: usize,
        /// The label found.
        label: String,
        /// The known labels, comma-separated.
        known: String,
    },
    /// An id seen before.
    #[error("line {line}: duplicate id {id:?} (first on line {first})")]
    DuplicateId {
        /// 1-based line number.
        line: usize,
        /// The id.
        id: String,
        /// Where it was first seen.
        first: usize,
    },
    /// No ticket at all.
    #[error("the dataset holds no ticket")]
    NoTickets,
}

/// A checked dataset: unique ids, non-empty texts, known labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    /// The tickets, in file order.
    pub tickets: Vec<Ticket>,
}

impl Dataset {
    /// Reads and checks the JSONL file at `path`; see [`Dataset::parse`].
    pub fn load(path: &Path) -> Result<Self, DatasetError> {
        let text = std::fs::read_to_string(path).map_err(|error| DatasetError::Io {
            path: path.display().to_string(),
            error,
        })?;
        Self::parse(&text)
    }

    /// Parses JSONL text: one ticket object a line, blank lines ignored.
    /// Fails on the first malformed line, empty id or text, label outside
    /// [`LABELS`], or repeated id, naming the line.
    pub fn parse(text: &str) -> Result<Self, DatasetError> {
        let mut tickets = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let t: Ticket = serde_json::from_str(raw).map_err(|e| DatasetError::Malformed {
                line,
                problem: e.to_string(),
            })?;
            if t.id.trim().is_empty() {
                return Err(DatasetError::Empty { line, field: "id" });
            }
            if t.text.trim().is_empty() {
                return Err(DatasetError::Empty { line, field: "text" });
            }
            if !LABELS.contains(&t.label.as_str()) {
                return Err(DatasetError::UnknownLabel {
                    line,
                    label: t.label,
                    known: LABELS.join(", "),
                });
            }
            if let Some(&first) = seen.get(&t.id) {
                return Err(DatasetError::DuplicateId {
                    line,
                    id: t.id,
                    first,
                });
            }
            seen.insert(t.id.clone(), line);
            tickets.push(t);
        }
        if tickets.is_empty() {
            return Err(DatasetError::NoTickets);
        }
        Ok(Self { tickets })
    }

    /// Tickets per label, for every label of [`LABELS`] (zero included).
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts: BTreeMap<String, usize> = LABELS.iter().map(|l| ((*l).to_owned(), 0)).collect();
        for t in &self.tickets {
            *counts.entry(t.label.clone()).or_default() += 1;
        }
        counts
    }

    /// The labels ordered by frequency in this dataset, most frequent first
    /// (ties in [`LABELS`] order); labels without tickets are left out.
    pub fn labels_by_frequency(&self) -> Vec<String> {
        let counts = self.counts();
        let mut labels: Vec<(usize, usize, String)> = LABELS
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let n = counts.get(*l).copied().unwrap_or(0);
                (n > 0).then(|| (n, i, (*l).to_owned()))
            })
            .collect();
        labels.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        labels.into_iter().map(|(_, _, l)| l).collect()
    }

    /// The first `n` tickets (all of them when `n` is larger).
    pub fn truncate(&mut self, n: usize) {
        self.tickets.truncate(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"id":"T1","text":"refund please","label":"billing"}

{"id":"T2","text":"cannot log in","label":"account_access"}
{"id":"T3","text":"another refund","label":"billing"}
"#;

    #[test]
    fn parses_and_counts() {
        let d = Dataset::parse(GOOD).unwrap();
        assert_eq!(d.tickets.len(), 3);
        assert_eq!(d.counts()["billing"], 2);
        assert_eq!(d.counts()["shipping"], 0);
        assert_eq!(d.labels_by_frequency(), vec!["billing", "account_access"]);
    }

    #[test]
    fn malformed_line_is_named() {
        let text = "{\"id\":\"T1\",\"text\":\"a\",\"label\":\"billing\"}\n{\"id\":\"T2\",\"text\":\"b\"\n";
        let e = Dataset::parse(text).unwrap_err();
        assert!(matches!(e, DatasetError::Malformed { line: 2, .. }), "{e}");
        assert!(e.to_string().starts_with("line 2:"), "{e}");
    }

    #[test]
    fn unknown_field_is_malformed() {
        let e = Dataset::parse(r#"{"id":"T1","text":"a","label":"billing","x":1}"#).unwrap_err();
        assert!(matches!(e, DatasetError::Malformed { line: 1, .. }), "{e}");
    }

    #[test]
    fn empty_fields_unknown_labels_and_duplicates_are_refused() {
        let e = Dataset::parse(r#"{"id":" ","text":"a","label":"billing"}"#).unwrap_err();
        assert!(matches!(e, DatasetError::Empty { line: 1, field: "id" }), "{e}");
        let e = Dataset::parse(r#"{"id":"T1","text":"","label":"billing"}"#).unwrap_err();
        assert!(
            matches!(
                e,
                DatasetError::Empty {
                    line: 1,
                    field: "text"
                }
            ),
            "{e}"
        );
        let e = Dataset::parse(r#"{"id":"T1","text":"a","label":"refunds"}"#).unwrap_err();
        assert!(matches!(e, DatasetError::UnknownLabel { line: 1, .. }), "{e}");
        assert!(e.to_string().contains("refunds"), "{e}");
        let text = "{\"id\":\"T1\",\"text\":\"a\",\"label\":\"billing\"}\n\n{\"id\":\"T1\",\"text\":\"b\",\"label\":\"billing\"}";
        let e = Dataset::parse(text).unwrap_err();
        assert!(
            matches!(
                e,
                DatasetError::DuplicateId {
                    line: 3,
                    first: 1,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn empty_file_is_refused() {
        assert!(matches!(Dataset::parse("\n\n"), Err(DatasetError::NoTickets)));
    }
}
