#!/usr/bin/env bash
# Smoke test of `pressure triage eval` against a real local model:
# SmolLM2-135M-Instruct served by llama-cpp-python's OpenAI-compatible
# server (see real-model.md for the recipe). It runs the eval on the first
# tickets of the golden set twice, plain and schema-constrained, through the
# gateway's client stack, and checks what must hold for any model:
#
#   * no call failed (the server answered every ticket);
#   * schema-constrained, every answer parsed to a label (the grammar allows
#     nothing else) and at least one was right;
#   * the report names the endpoint and the model.
#
# It does not check the model's accuracy: that is a measurement (see
# docs/triage.md), not a property of pressure.
#
# What it needs, one of:
#   PRESSURE_LLAMA_SERVER=http://127.0.0.1:8000/v1  a running server
#                                     (model name PRESSURE_LLAMA_MODEL, default smollm2;
#                                     response_format dialect PRESSURE_LLAMA_DIALECT,
#                                     default json-object, llama-cpp-python's)
#   PRESSURE_LLAMA_PYTHON=venv/bin/python  with llama-cpp-python[server] installed, and
#   PRESSURE_LLAMA_GGUF=…/SmolLM2-135M-Instruct.Q4_1.gguf
#                                     the script starts the server on a free loopback
#                                     port and stops it at the end
# When neither is there it prints one SKIPPED line and exits 0;
# PRESSURE_REQUIRE_LLAMA=1 makes that a failure (exit 1).
#
# Other knobs: PRESSURE_SMOKE_TICKETS (default 20), PRESSURE_BIN (the pressure
# binary; default `cargo run -q --release -p pressure-cli --`).
set -euo pipefail
cd "$(dirname "$0")/../.."

tickets=${PRESSURE_SMOKE_TICKETS:-20}
model=${PRESSURE_LLAMA_MODEL:-smollm2}
dialect=${PRESSURE_LLAMA_DIALECT:-json-object}
server_pid=
log=

skip() {
  if [[ ${PRESSURE_REQUIRE_LLAMA:-} == 1 ]]; then
    echo "FAILED real-model smoke: $1 (PRESSURE_REQUIRE_LLAMA=1)" >&2
    exit 1
  fi
  echo "SKIPPED real-model smoke: $1 (PRESSURE_REQUIRE_LLAMA=1 makes this a failure)" >&2
  exit 0
}

stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [[ -n $log ]]; then rm -f -- "$log"; fi
}
trap stop_server EXIT

command -v python3 >/dev/null 2>&1 || skip "no python3 (it reads the JSON reports)"

if [[ -n ${PRESSURE_LLAMA_SERVER:-} ]]; then
  url=$PRESSURE_LLAMA_SERVER
else
  py=${PRESSURE_LLAMA_PYTHON:-}
  gguf=${PRESSURE_LLAMA_GGUF:-}
  [[ -n $py && -n $gguf ]] ||
    skip "no model server: set PRESSURE_LLAMA_SERVER=URL, or PRESSURE_LLAMA_PYTHON and PRESSURE_LLAMA_GGUF (see examples/triage/real-model.md)"
  [[ -f $gguf ]] || skip "PRESSURE_LLAMA_GGUF=$gguf is not a file"
  "$py" -c 'import llama_cpp.server' 2>/dev/null || skip "$py cannot import llama_cpp.server (pip install 'llama-cpp-python[server]')"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  log=$(mktemp "${TMPDIR:-/tmp}/llama-server.XXXXXX")
  # One thread: on a small shared machine two threads spin against each other.
  "$py" -m llama_cpp.server --model "$gguf" --model_alias "$model" --host 127.0.0.1 --port "$port" \
    --n_ctx 2048 --n_threads 1 --n_threads_batch 1 >"$log" 2>&1 &
  server_pid=$!
  url="http://127.0.0.1:$port/v1"
  for _ in $(seq 120); do
    if python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/models', timeout=1)" "$url" 2>/dev/null; then
      break
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; echo "FAILED real-model smoke: the server exited" >&2; exit 1; }
    sleep 1
  done
fi

if [[ -n ${PRESSURE_BIN:-} ]]; then
  pressure=("$PRESSURE_BIN")
else
  pressure=(cargo run -q --release -p pressure-cli --)
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/triage-smoke.XXXXXX")
for mode in plain structured; do
  args=(triage eval --provider "$url" --model "$model" --limit "$tickets" --concurrency 1 --json)
  if [[ $mode == structured ]]; then args+=(--structured "$dialect"); fi
  echo "real-model smoke: $mode, $tickets tickets against $model at $url" >&2
  "${pressure[@]}" "${args[@]}" >"$out/$mode.json"
done

python3 - "$out" "$model" "$url" <<'EOF'
import json, sys
out, model, url = sys.argv[1:]
failures = []
for mode in ("plain", "structured"):
    r = json.load(open(f"{out}/{mode}.json"))
    level = next(l for l in r["levels"] if l["kind"] == "model")
    line = (f"{mode:10}  accuracy {level['accuracy']:.1%}  coverage {level['coverage']:.1%}  "
            f"errors {level['errors']}  p50 {level.get('p50_latency_ms', 0):.0f} ms  "
            f"p95 {level.get('p95_latency_ms', 0):.0f} ms")
    print(line)
    if level["name"] != f"endpoint/{model}" or url not in r["llm_source"]:
        failures.append(f"{mode}: the report names {level['name']} at {r['llm_source']}")
    if level["errors"]:
        failures.append(f"{mode}: {level['errors']} calls failed: {level['error_kinds']}")
    if mode == "structured":
        if level["labelled"] != level["total"]:
            failures.append(f"structured: {level['total'] - level['labelled']} answers without a label")
        if level["correct"] == 0:
            failures.append("structured: no answer was right")
for f in failures:
    print("FAILED real-model smoke:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
EOF
rm -rf -- "$out"
echo "real-model smoke: ok" >&2
