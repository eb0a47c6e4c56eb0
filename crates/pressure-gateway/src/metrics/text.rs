//! The one writer of the Prometheus text format (0.0.4) in the gateway:
//! `# HELP` / `# TYPE` lines and samples with escaped label values. Every
//! section of `/metrics` (the gateway's counters, the broker's snapshot, the
//! LLM client) writes through it.

use std::fmt::{self, Write as _};

/// The content type of the page.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The `# HELP` and `# TYPE` lines of a family.
pub(crate) fn header(out: &mut String, name: &str, kind: &str, help: &str) -> fmt::Result {
    writeln!(out, "# HELP {name} {help}")?;
    writeln!(out, "# TYPE {name} {kind}")
}

/// One sample line, `name{k1="v1",k2="v2"} v` (no braces without labels),
/// the label values escaped.
pub(crate) fn sample(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    v: impl fmt::Display,
) -> fmt::Result {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (key, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(key);
            out.push_str("=\"");
            escape_label_value(out, value);
            out.push('"');
        }
        out.push('}');
    }
    writeln!(out, " {v}")
}

/// Label value escaping of the text format: `\`, `"` and newline.
pub(crate) fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A family of one sample per labelled item: name, type, help, and the
/// item's value (none: no sample for that item).
pub(crate) type Family<T> = (&'static str, &'static str, &'static str, fn(&T) -> Option<u64>);

/// Writes each of `families` with one sample per item of `items`, labelled
/// `label="<key>"`.
pub(crate) fn families<'a, K: AsRef<str>, T: 'a>(
    out: &mut String,
    families: &[Family<T>],
    label: &str,
    items: impl IntoIterator<Item = (K, &'a T)> + Clone,
) -> fmt::Result {
    for (name, kind, help, value) in families {
        header(out, name, kind, help)?;
        for (key, item) in items.clone() {
            if let Some(v) = value(item) {
                sample(out, name, &[(label, key.as_ref())], v)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_escape_and_omit_empty_braces() {
        let mut out = String::new();
        sample(&mut out, "a", &[], 1).expect("write");
        sample(&mut out, "b", &[("k", "x\"y\\z\n")], 2).expect("write");
        assert_eq!(out, "a 1\nb{k=\"x\\\"y\\\\z\\n\"} 2\n");
    }
}
