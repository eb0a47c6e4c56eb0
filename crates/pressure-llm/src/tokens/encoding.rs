//! Which BPE encoding counts a model's tokens: the [`Encoding`]s this crate
//! ships and the model → encoding table ([`Encoding::for_model`]).
//!
//! The table follows OpenAI's `tiktoken` (`model.py`):
//!
//! | models | encoding | exact |
//! | --- | --- | --- |
//! | `gpt-5*`, `gpt-4.1*`, `gpt-4.5*`, `gpt-4o*`, `chatgpt-4o*`, `o1`, `o3`, `o4` families, `gpt-oss*` | `o200k_base` | yes |
//! | `gpt-4`, `gpt-4-*` (turbo, 32k, dated), `gpt-3.5*`, `gpt-35*` (Azure), `text-embedding-3-*`, `text-embedding-ada-002` | `cl100k_base` | yes |
//! | `claude*` (Anthropic) | `cl100k_base` | no: an approximation |
//! | anything else | `o200k_base` | no: an approximation |
//!
//! Anthropic's tokenizer is not public, so Claude prompts are counted with
//! `cl100k_base`, which is in the right range but not equal to what the
//! provider bills: Claude reports *more* tokens, up to about 30 % more for
//! English text and code (the bound and where it comes from:
//! [`provider::anthropic`](crate::provider::anthropic#token-estimates-for-claude-models)). Other
//! vendors' models (Llama, Mistral, Gemini, …) and unknown names get
//! `o200k_base`, the newest OpenAI encoding. An approximate count is only
//! an estimate for the reservation: the broker corrects it from the
//! response's `usage` (`Permit::reconcile`), so the error lasts one call.
//!
//! A provider prefix (`openai/gpt-4o`) and a fine-tune prefix
//! (`ft:gpt-4o-mini:org::id`) are looked through; matching ignores ASCII case.
//! `gpt-oss` uses `o200k_harmony`, which is `o200k_base` plus special tokens,
//! so ordinary text counts the same.

use std::fmt;

/// A BPE encoding shipped with this crate (the ranks are embedded in the
/// binary by `tiktoken-rs`; nothing is downloaded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `o200k_base`: GPT-4o, GPT-4.1, GPT-5 and the `o` series; the default.
    O200kBase,
    /// `cl100k_base`: GPT-4, GPT-3.5 and the `text-embedding-3` models.
    Cl100kBase,
}

impl Encoding {
    /// Every encoding, in a fixed order (the cache index).
    pub const ALL: [Encoding; 2] = [Encoding::O200kBase, Encoding::Cl100kBase];

    /// The encoding's name as `tiktoken` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    /// Parses a `tiktoken` encoding name (`o200k_base`, `cl100k_base`).
    pub fn from_name(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Position in [`Encoding::ALL`].
    pub(crate) fn index(self) -> usize {
        match self {
            Encoding::O200kBase => 0,
            Encoding::Cl100kBase => 1,
        }
    }

    /// The encoding that counts `model`'s tokens, and whether the count is
    /// exact or an approximation (see the module docs for the table).
    pub fn for_model(model: &str) -> ModelEncoding {
        let name = normalize(model);
        let starts = |p: &str| starts_with_ignore_case(name, p);
        // A family: the bare name or the name followed by `-` (`o1`, `o1-mini`).
        let family = |f: &str| {
            name.eq_ignore_ascii_case(f) || (starts(f) && name.as_bytes().get(f.len()) == Some(&b'-'))
        };
        // Order matters: `gpt-4o` and `gpt-4.1` must win over `gpt-4`.
        let o200k = ["gpt-5", "gpt-4.1", "gpt-4.5", "gpt-4o", "chatgpt-4o", "gpt-oss"];
        if o200k.into_iter().any(starts) || ["o1", "o3", "o4"].into_iter().any(family) {
            return ModelEncoding::exact(Encoding::O200kBase);
        }
        let cl100k = ["gpt-3.5", "gpt-35", "text-embedding-3-", "text-embedding-ada-002"];
        if family("gpt-4") || cl100k.into_iter().any(starts) {
            return ModelEncoding::exact(Encoding::Cl100kBase);
        }
        if starts("claude") {
            return ModelEncoding::approximate(Encoding::Cl100kBase);
        }
        ModelEncoding::approximate(Encoding::O200kBase)
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The answer of [`Encoding::for_model`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelEncoding {
    /// The encoding used to count.
    pub encoding: Encoding,
    /// `true` when the model is known to use this encoding; `false` when the
    /// count is an approximation (a non-OpenAI or unknown model).
    pub exact: bool,
}

impl ModelEncoding {
    /// A known model's own encoding.
    pub fn exact(encoding: Encoding) -> Self {
        Self {
            encoding,
            exact: true,
        }
    }

    /// An encoding standing in for an unknown tokenizer.
    pub fn approximate(encoding: Encoding) -> Self {
        Self {
            encoding,
            exact: false,
        }
    }
}

/// Strips a provider prefix (`openai/…`, the last `/` wins) and a fine-tune
/// prefix (`ft:`).
fn normalize(model: &str) -> &str {
    let model = model.trim();
    let model = model.rsplit('/').next().unwrap_or(model);
    match model.get(..3) {
        Some(p) if p.eq_ignore_ascii_case("ft:") => &model[3..],
        _ => model,
    }
}

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}
