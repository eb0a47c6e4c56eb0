//! The evaluation's report as readable text ([`EvalReport::render`]): a
//! table of the levels, the per-class recall of each measured level, the
//! levels' notes and errors, and a legend.

use crate::dataset::LABELS;
use crate::eval::{micros_f64, EvalReport, LevelKind, LevelReport};

impl EvalReport {
    /// The report as readable text: a header, one table row per level, the
    /// per-class accuracy per level, the levels' notes and errors, and a
    /// legend.
    pub fn render(&self) -> String {
        let mut out = self.render_header();
        out.push_str(&table(&self.level_rows()));
        let measured: Vec<&LevelReport> = self.levels.iter().filter(|l| l.measured).collect();
        if !measured.is_empty() {
            out.push_str("\nper-class recall (correct / tickets of the class)\n");
            out.push_str(&table(&self.recall_rows(&measured)));
        }
        out.push_str(&self.render_notes());
        out.push_str(LEGEND);
        out
    }

    /// What was measured, on what, with which levels.
    fn render_header(&self) -> String {
        format!(
            "pressure triage eval: use case {:?}, {} tickets from {}\nLLM levels: {}\n\
             rules levels: keyword rules of the config, run in process\n\n",
            self.use_case, self.tickets, self.dataset, self.llm_source
        )
    }

    /// The levels' table: a header row, then one row per level (a level
    /// not measured shows its note instead of figures).
    fn level_rows(&self) -> Vec<Vec<String>> {
        let header = [
            "level",
            "kind",
            "answered by",
            "accuracy",
            "coverage",
            "precision",
            "errors",
            "latency p50 / p95",
            "tokens in / out",
            "cost",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
        rows.extend(self.levels.iter().map(LevelReport::row));
        rows
    }

    /// The per-class recall table: a row per label, a column per measured
    /// level.
    fn recall_rows(&self, measured: &[&LevelReport]) -> Vec<Vec<String>> {
        let mut header = vec!["class".to_owned(), "tickets".to_owned()];
        header.extend(measured.iter().map(|l| format!("L{} {}", l.level, l.name)));
        let mut rows = vec![header];
        for label in LABELS {
            let n = self.class_counts.get(*label).copied().unwrap_or(0);
            let mut row = vec![(*label).to_owned(), n.to_string()];
            row.extend(measured.iter().map(|l| {
                l.per_class
                    .get(*label)
                    .filter(|c| c.total > 0)
                    .map_or_else(|| "-".to_owned(), |c| pct(c.accuracy()))
            }));
            rows.push(row);
        }
        rows
    }

    /// The measured levels' notes, then the error kinds of every level
    /// with errors (with a hint when every call failed).
    fn render_notes(&self) -> String {
        let mut out = String::new();
        for l in self.levels.iter().filter(|l| l.measured) {
            if let Some(note) = &l.note {
                out.push_str(&format!("\nlevel {}: {note}\n", l.level));
            }
        }
        for l in self.levels.iter().filter(|l| !l.error_kinds.is_empty()) {
            let kinds: Vec<String> = l.error_kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            out.push_str(&format!("\nlevel {} errors: {}", l.level, kinds.join(", ")));
            if l.errors == l.total {
                out.push_str(
                    " (every call failed: is the provider running? `--mock` starts pressure's mock)",
                );
            }
            out.push('\n');
        }
        out
    }
}

/// What the columns of the rendered report mean.
const LEGEND: &str = "\naccuracy = correct / all tickets; coverage = share given a label (model: a parsable answer; \
     rules: a rule matched);\nprecision = correct / labelled; latency = per answered call, through the client stack (queueing, \
     retries included);\ntokens = as the provider counted them; cost = what the client's price \
     table charged.\n";

impl LevelReport {
    /// This level's row of the rendered table: its figures, or its note
    /// when it was not measured. Errors are shown for model levels only
    /// (rules cannot fail).
    fn row(&self) -> Vec<String> {
        let mut row = vec![
            self.level.to_string(),
            self.kind.as_str().to_owned(),
            self.name.clone(),
        ];
        if !self.measured {
            row.push(self.note.clone().unwrap_or_default());
            return row;
        }
        let model = matches!(self.kind, LevelKind::Model | LevelKind::Knn);
        row.extend([
            pct(self.accuracy),
            pct(self.coverage),
            pct(self.precision),
            if model {
                self.errors.to_string()
            } else {
                "-".to_owned()
            },
            match (self.p50_latency_ms, self.p95_latency_ms) {
                (Some(p50), Some(p95)) => format!("{p50:.0} / {p95:.0} ms"),
                _ => "-".to_owned(),
            },
            match (self.input_tokens, self.output_tokens) {
                (Some(i), Some(o)) => format!("{i} / {o}"),
                _ => "-".to_owned(),
            },
            match self.spent_micro_usd {
                Some(m) => dollars(m),
                None => "$0".to_owned(),
            },
        ]);
        row
    }
}

/// Left-aligned columns separated by two spaces; rows may be shorter than
/// the header (their last cell then runs on).
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for row in rows {
        // The last cell of a short row runs on and sets no width.
        let sized = if row.len() == cols {
            row.len()
        } else {
            row.len().saturating_sub(1)
        };
        for (i, cell) in row.iter().take(sized).enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A share as a percentage: `12.5 %`.
fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// Micro-USD as dollars: `$0.0123`.
fn dollars(micros: u64) -> String {
    format!("${:.4}", micros_f64(micros) / 1_000_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let rows = vec![
            vec!["a".to_owned(), "bbb".to_owned(), "c".to_owned()],
            vec!["aaaa".to_owned(), "b".to_owned(), "c".to_owned()],
            vec!["x".to_owned(), "a long note".to_owned()],
        ];
        assert_eq!(table(&rows), "a     bbb  c\naaaa  b    c\nx     a long note\n");
        let rows = vec![
            vec!["a".to_owned(), "b".to_owned(), "c".to_owned()],
            vec!["x".to_owned(), "yyyy".to_owned(), "note".to_owned()],
            vec!["long first".to_owned(), "note".to_owned()],
        ];
        assert_eq!(
            table(&rows),
            "a           b     c\nx           yyyy  note\nlong first  note\n"
        );
    }
}
