#!/usr/bin/env bash
# Added latency of the agents' endpoints: a streamed `POST /v1/messages`
# (Anthropic Messages) and a streamed `POST /v1/responses` (OpenAI
# Responses) through `pressure gateway`, over calling the mock provider
# directly, with the chat path (`POST /v1/chat/completions`, streamed) in
# the same run. Goal: added p99 at 2,000 requests/s open-loop ≤ 1 ms on each
# path (reported, not asserted: the speed is the machine's).
#
# 1. Mock provider: `pressure mock-provider` (the same binary), one phase
#    with zero latency and no faults (a behaviour file), 16 output tokens
#    per answer (each request's max_tokens), streamed in the dialect asked.
# 2. Gateway: `pressure gateway` with three providers at the mock, memory
#    backend, model limits never reached, logs at warn:
#      anthropic         kind anthropic         use case `messages`,
#                                               aliases ["claude-sonnet-4-5"]
#      openai-responses  kind openai-responses  use case `responses`,
#                                               aliases ["gpt-5-codex"]
#      openai            kind openai            use case `chat`
#    so `/v1/messages` and `/v1/responses` are native passthroughs (the
#    agent's body goes to the provider's own endpoint, its events come back
#    as they came) and chat is chat. The mock's per-endpoint counts after
#    each gateway run show where the requests went.
# 3. Per path, the same body and headers against the mock's endpoint
#    (direct) and the gateway's (gateway): x-api-key + anthropic-version for
#    messages, Authorization: Bearer for the other two; `stream: true`.
#    First a short open-loop warm-up of each (path, target), then ROUNDS
#    rounds of: for each path, direct then gateway, each
#    `oha -q RATE -z DURATION --latency-correction` (open loop: latency is
#    counted from each request's scheduled start, so a stall shows as
#    queueing, not as fewer requests). oha times the whole streamed answer
#    (to its last byte).
# 4. Table (benches/lib/agents-overhead-table.py): per path the direct and
#    gateway p50/p99/p99.9 (medians over the rounds), added p99 = gateway −
#    direct of the same round (each round's, and their median), pass/fail
#    against 1 ms, the gateway's CPU per request, and errors (non-2xx +
#    failed requests, per target; the mock's own non-200 answers beside).
#
# Exit status: non-zero when any run has an error (or oha failed); the
# 1 ms target is only reported.
#
# Usage:  benches/agents-overhead.sh
# Environment:
#   BENCH_RATE=2000        open-loop rate, requests/s
#   BENCH_DURATION=20      seconds of each measured run
#   BENCH_WARMUP=3         seconds of the warm-up run per (path, target)
#   BENCH_ROUNDS=2         interleaved rounds (each: every path, direct then gateway)
#   BENCH_PATHS=chat,messages,responses
#   BENCH_CONNS=0          oha connections (0: rate/10, at least 50, at most 500)
#   BENCH_SCRATCH=$HOME/.cache/pressure-llm-peers
#                          where oha is installed when not on PATH
#                          (`cargo install oha --locked --root`, as llm-peers.sh)
#   PRESSURE_BIN=path      a prebuilt `pressure` instead of building one
#
# Bounded: every oha run has a timeout (DURATION + 30 s), every process
# started here gets its own process group (setsid) and is stopped on exit.
# The defaults take about 4.5 minutes after the build: paths × (2 warm-ups
# of WARMUP + 1 s) + ROUNDS × paths × 2 runs of DURATION + 1 s, plus startup.
# Everything listens on 127.0.0.1 only.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before
here=$PWD

rate=${BENCH_RATE:-2000}
duration=${BENCH_DURATION:-20}
warmup=${BENCH_WARMUP:-3}
rounds=${BENCH_ROUNDS:-2}
paths=${BENCH_PATHS:-chat,messages,responses}
conns=${BENCH_CONNS:-0}
scratch=${BENCH_SCRATCH:-$HOME/.cache/pressure-llm-peers}

log() { echo "== $*" >&2; }
die() {
  echo "agents-overhead: $*" >&2
  exit 1
}

for knob in rate duration warmup rounds conns; do
  [[ ${!knob} =~ ^[0-9]+$ ]] || die "BENCH_${knob^^} must be a whole number, got '${!knob}'"
done
((rounds >= 1)) || die "BENCH_ROUNDS must be at least 1"
for p in ${paths//,/ }; do
  case $p in
    chat | messages | responses) ;;
    *) die "unknown path '$p' in BENCH_PATHS (chat, messages, responses)" ;;
  esac
done
if ((conns == 0)); then
  conns=$((rate / 10))
  ((conns < 50)) && conns=50
  ((conns > 500)) && conns=500
fi
for tool in cargo python3 curl setsid timeout; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done

# --- oha ----------------------------------------------------------------------
# From PATH, else `cargo install oha --locked --root $scratch/oha` (the
# place benches/llm-peers.sh installs it, so the two share one install).
if command -v oha >/dev/null; then
  oha_bin=$(command -v oha)
else
  oha_bin=$scratch/oha/bin/oha
  if [[ ! -x $oha_bin ]]; then
    log "installing oha (cargo install oha --locked --root $scratch/oha)"
    mkdir -p "$scratch"
    timeout 1800 cargo install -q oha --locked --root "$scratch/oha" ||
      die "cargo install oha failed"
  fi
fi
oha_version=$("$oha_bin" --version 2>/dev/null | head -n1)

# --- Build --------------------------------------------------------------------
if [[ -n ${PRESSURE_BIN:-} ]]; then
  log "using PRESSURE_BIN=$PRESSURE_BIN"
  pressure_bin=$PRESSURE_BIN
else
  log "building (cargo build --release -p pressure-cli)"
  timeout 1800 cargo build -q --release -p pressure-cli
  pressure_bin=$here/target/release/pressure
fi
[[ -x $pressure_bin ]] || die "no $pressure_bin after the build"
# What the binary was built from, for the report line.
if [[ -n ${PRESSURE_BIN:-} ]]; then
  built_from="prebuilt: PRESSURE_BIN=$PRESSURE_BIN"
else
  built_from="built from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  [[ -z $(git status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null) ]] ||
    built_from+=" with uncommitted changes under crates/"
fi

# --- Scratch dir and cleanup --------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/agents-overhead.XXXXXX")
pgids=()
# Whether process group $1 still has a member that is not a zombie.
# shellcheck disable=SC2009
group_alive() { ps -o stat= -g "$1" 2>/dev/null | grep -qv '^Z'; }
cleanup() {
  local pgid
  for pgid in "${pgids[@]}"; do
    kill -TERM -- "-$pgid" 2>/dev/null || true
  done
  for pgid in "${pgids[@]}"; do
    for _ in $(seq 50); do
      group_alive "$pgid" || break
      sleep 0.1
    done
    kill -KILL -- "-$pgid" 2>/dev/null || true
    wait "$pgid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# spawn NAME CMD...: CMD in a new session (process group id = its pid),
# output in $tmp/NAME.log; recorded as group[NAME].
declare -A group
spawn() {
  local name=$1
  shift
  setsid "$@" >"$tmp/$name.log" 2>&1 </dev/null &
  pgids+=("$!")
  group[$name]=$!
}
exited() {
  group_alive "${group[$1]}" ||
    die "$1 exited; its log:"$'\n'"$(tail -n 30 "$tmp/$1.log" 2>/dev/null)"
}
wait_port() {
  for _ in $(seq $(($3 * 10))); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
      return
    fi
    exited "$2"
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within $3 s; its log:"$'\n'"$(tail -n 30 "$tmp/$2.log" 2>/dev/null)"
}

# CPU time (user + system) of every live process of group $1, microseconds
# (/proc/PID/stat: utime and stime, fields 14 and 15).
clk_tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
group_cpu_us() {
  local ticks=0 pid stat fields
  for pid in $(pgrep -g "$1" 2>/dev/null); do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    read -r -a fields <<<"${stat##*) }"
    ticks=$((ticks + fields[11] + fields[12]))
  done
  echo $((ticks * 1000000 / clk_tck))
}

mock_port="" gw_port="" gw_admin_port=""
free_port mock_port
free_port gw_port
free_port gw_admin_port
mock=http://127.0.0.1:$mock_port

# --- 1. Mock provider ---------------------------------------------------------
cat >"$tmp/behaviour.json" <<'EOF'
{ "phases": [ { "name": "bench", "latency": { "minMs": 0, "maxMs": 0 }, "outputTokens": 16 } ] }
EOF
log "starting the mock provider (pressure mock-provider, zero latency, no faults) on 127.0.0.1:$mock_port"
spawn mock env -u RUST_LOG "$pressure_bin" mock-provider --listen "127.0.0.1:$mock_port" \
  --behaviour "$tmp/behaviour.json" --seed 1
wait_port "$mock_port" mock 20

# --- 2. Gateway ---------------------------------------------------------------
huge=1000000000000
model() { # PROVIDER MODEL
  cat <<EOF
        {
          "provider": "$1", "model": "$2",
          "limits": { "requestsPerMinute": $huge, "inputTokensPerMinute": $huge,
                      "outputTokensPerMinute": $huge, "algorithm": "window" },
          "context": { "contextTokens": 8192, "maxOutputTokens": 512 },
          "price": { "inputMicroUsdPer1M": 1000000, "outputMicroUsdPer1M": 2000000 }
        }
EOF
}
provider() { # KIND
  cat <<EOF
{ "kind": "$1", "baseUrl": "$mock/v1", "apiKeyEnv": "BENCH_MOCK_API_KEY",
          "timeouts": { "maxConnections": 4096, "poolWaitMs": 10000 } }
EOF
}
cat >"$tmp/gateway.json" <<EOF
{
  "gateway": {
    "listen": "127.0.0.1:$gw_port",
    "admin": { "listen": "127.0.0.1:$gw_admin_port" },
    "backend": { "type": "memory" },
    "upstreams": { "mock": { "url": "$mock", "pathPrefix": "/api" } },
    "pressure": { "enabled": true },
    "llm": {
      "providers": {
        "anthropic": $(provider anthropic),
        "openai-responses": $(provider openai-responses),
        "openai": $(provider openai)
      },
      "models": [
$(model anthropic claude-sonnet-4-5),
$(model openai-responses gpt-5-codex),
$(model openai chat)
      ],
      "useCases": {
        "messages": { "chain": [ { "model": "anthropic/claude-sonnet-4-5" } ], "aliases": ["claude-sonnet-4-5"] },
        "responses": { "chain": [ { "model": "openai-responses/gpt-5-codex" } ], "aliases": ["gpt-5-codex"] },
        "chat": { "chain": [ { "model": "openai/chat" } ] }
      }
    }
  }
}
EOF
timeout 20 "$pressure_bin" check-config "$tmp/gateway.json" >"$tmp/check.log" 2>&1 ||
  die "gateway config invalid: $(cat "$tmp/check.log")"
log "starting pressure gateway on 127.0.0.1:$gw_port"
# RUST_LOG would replace --log-level: unset.
spawn gateway env -u RUST_LOG BENCH_MOCK_API_KEY=dummy \
  "$pressure_bin" gateway --config "$tmp/gateway.json" --log-level warn
wait_port "$gw_port" gateway 30

# --- Requests -----------------------------------------------------------------
# Per path: endpoint, body (streamed, 16 output tokens), headers, and the
# last event a complete stream carries.
declare -A endpoint headers done_marker
endpoint[chat]=/v1/chat/completions
endpoint[messages]=/v1/messages
endpoint[responses]=/v1/responses
printf '%s' '{"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":16,"stream":true}' \
  >"$tmp/body-chat.json"
printf '%s' '{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hello"}]}' \
  >"$tmp/body-messages.json"
printf '%s' '{"model":"gpt-5-codex","input":"hello","max_output_tokens":16,"stream":true}' \
  >"$tmp/body-responses.json"
headers[chat]='authorization: Bearer dummy'
headers[messages]=$'x-api-key: dummy\nanthropic-version: 2023-06-01'
headers[responses]='authorization: Bearer dummy'
done_marker[chat]='data: [DONE]'
done_marker[messages]='event: message_stop'
done_marker[responses]='event: response.completed'
declare -A base
base[direct]=$mock
base[gateway]=http://127.0.0.1:$gw_port
group[direct]=${group[mock]}

# header_args PATH: -H arguments for curl and oha, one per line.
header_args() {
  local h
  printf '%s\n' -H 'content-type: application/json'
  while IFS= read -r h; do printf '%s\n' -H "$h"; done <<<"${headers[$1]}"
}

# --- Sanity: every (path, target) streams a complete answer ------------------
for p in ${paths//,/ }; do
  for t in direct gateway; do
    mapfile -t hargs < <(header_args "$p")
    code=$(curl -sS -N --max-time 20 -o "$tmp/probe-$p-$t.out" -w '%{http_code}' \
      -X POST "${hargs[@]}" --data-binary "@$tmp/body-$p.json" "${base[$t]}${endpoint[$p]}" 2>&1) || true
    [[ $code == 200 ]] && grep -qF "${done_marker[$p]}" "$tmp/probe-$p-$t.out" ||
      die "$t ${endpoint[$p]}: status $code, no '${done_marker[$p]}' in the stream: $(head -c 600 "$tmp/probe-$p-$t.out" 2>/dev/null)"$'\n'"gateway log: $(tail -n 20 "$tmp/gateway.log")"
  done
done
log "every path streams a complete answer, direct and through the gateway (paths: ${paths//,/ })"

# --- oha runs -----------------------------------------------------------------
out=$tmp/oha
mkdir -p "$out"
failed_runs=0
# oha_run PATH TARGET FILE SECONDS: one open-loop run; the mock's stats of
# the run (reset first) go to FILE's .mock.json, the CPU time of the
# target's process group (the mock's, for direct) to its .cpu_us.
oha_run() {
  local p=$1 t=$2 file=$3 secs=$4 hargs cpu_before
  mapfile -t hargs < <(header_args "$p")
  exited mock
  curl -sS --max-time 5 -X POST "$mock/mock/reset" >/dev/null ||
    die "POST /mock/reset failed; the mock's log:"$'\n'"$(tail -n 30 "$tmp/mock.log" 2>/dev/null)"
  cpu_before=$(group_cpu_us "${group[$t]}")
  timeout --kill-after=5 $((secs + 30)) "$oha_bin" --no-tui --output-format json \
    -m POST "${hargs[@]}" -D "$tmp/body-$p.json" \
    -c "$conns" -q "$rate" -z "${secs}s" --latency-correction \
    "${base[$t]}${endpoint[$p]}" >"$file" 2>"$file.err" || {
    echo "agents-overhead: oha against $t ${endpoint[$p]} failed or timed out ($(head -c 300 "$file.err"))" >&2
    rm -f "$file"
    failed_runs=$((failed_runs + 1))
  }
  echo $(($(group_cpu_us "${group[$t]}") - cpu_before)) >"${file%.json}.cpu_us"
  curl -sS --max-time 5 "$mock/mock/stats" >"${file%.json}.mock.json" || true
  exited mock
  exited gateway
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for p in ${paths//,/ }; do
  for t in direct gateway; do
    log "warm-up $p $t: $rate/s for ${warmup}s"
    oha_run "$p" "$t" "$out/warmup-$p-$t.json" "$warmup"
    sleep 1
  done
done
for r in $(seq "$rounds"); do
  for p in ${paths//,/ }; do
    for t in direct gateway; do
      log "round $r/$rounds: $p $t, $rate/s for ${duration}s, $conns connections"
      oha_run "$p" "$t" "$out/$p-$t-$r.json" "$duration"
      sleep 1
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- Report -------------------------------------------------------------------
echo
echo "agents-overhead: $(nproc) cores ($(uname -m)); $oha_version; $rate/s open loop (--latency-correction)," \
  "$conns connections, ${duration}s per run, $rounds interleaved rounds (direct, gateway per path);" \
  "pressure $("$pressure_bin" --version 2>/dev/null | awk '{ print $NF }') ($built_from)," \
  "mock provider: pressure mock-provider, 0 ms, 16 output tokens;" \
  "load average (1/5/15 min) $load_before before the runs, $load_after after"
echo
status=0
python3 benches/lib/agents-overhead-table.py "$out" "$paths" "$rounds" || status=$?
machine_report after
((failed_runs == 0)) || {
  echo "agents-overhead: $failed_runs oha run(s) failed" >&2
  status=1
}
exit "$status"
