//! The answer's text: cut to a token budget, and split into stream chunks,
//! both at word boundaries.

use crate::tokens::count_text;

/// The byte offsets where a word starts (after whitespace), past the
/// first: the places where `text` may be split without cutting a word.
fn word_starts(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut prev_space = true;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if space && !prev_space && i > 0 {
            starts.push(i);
        }
        prev_space = space;
    }
    starts
}

/// The responder's text cut to a token budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cut {
    pub(crate) text: String,
    pub(crate) tokens: u64,
    pub(crate) truncated: bool,
}

/// Cuts `text` to at most `limit` tokens of `model`, at word boundaries.
///
/// The tokenizers split text into words (with their leading space) before
/// merging, and never merge across words, so the sum of per-word counts is
/// the count of the text.
pub(crate) fn cut_text(model: &str, text: &str, limit: u64) -> Cut {
    let mut bounds = word_starts(text);
    bounds.push(text.len());
    let mut start = 0;
    let mut tokens = 0u64;
    for end in bounds {
        let piece = &text[start..end];
        let n = count_text(model, piece);
        if tokens + n > limit {
            // Fill the budget with the longest prefix of the word that fits.
            let mut end = start;
            let mut used = tokens;
            for (j, _) in piece.char_indices().skip(1) {
                let m = count_text(model, &piece[..j]);
                if tokens + m > limit {
                    break;
                }
                (end, used) = (start + j, tokens + m);
            }
            return Cut {
                text: text[..end].to_owned(),
                tokens: used,
                truncated: true,
            };
        }
        tokens += n;
        start = end;
    }
    Cut {
        text: text.to_owned(),
        tokens,
        truncated: false,
    }
}

/// Splits `text` at word boundaries into at most `n` parts of similar size.
pub(crate) fn split_even(text: &str, n: usize) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut starts = vec![0];
    starts.extend(word_starts(text));
    let words = starts.len();
    let parts = words.min(n).max(1);
    (0..parts)
        .map(|p| {
            let from = starts[p * words / parts];
            let to = if p + 1 == parts {
                text.len()
            } else {
                starts[(p + 1) * words / parts]
            };
            text[from..to].to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_text_respects_the_budget_and_counts_like_the_tokenizer() {
        let text = "This is gpt-4o, the pressure mock provider, answering. The quick brown fox.";
        let whole = count_text("gpt-4o", text);
        let all = cut_text("gpt-4o", text, 1_000);
        assert_eq!((all.tokens, all.truncated), (whole, false));
        for limit in 1..whole {
            let cut = cut_text("gpt-4o", text, limit);
            assert!(cut.truncated && !cut.text.is_empty() && text.starts_with(&cut.text));
            // The budget is filled (a word may be cut inside).
            assert_eq!(cut.tokens, limit, "{limit}: {:?}", cut.text);
            assert_eq!(count_text("gpt-4o", &cut.text), cut.tokens);
        }
        assert_eq!(cut_text("gpt-4o", text, 0).tokens, 0);
    }

    #[test]
    fn split_even_keeps_every_byte() {
        let text = "one two three four five six seven eight nine ten";
        let parts = split_even(text, 4);
        assert_eq!(parts.len(), 4);
        assert_eq!(parts.concat(), text);
        assert_eq!(split_even("single", 8), vec!["single".to_owned()]);
        assert!(split_even("", 8).is_empty());
    }
}
