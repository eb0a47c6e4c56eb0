#!/usr/bin/env bash
# Governed accuracy, side by side: two pressure gateways on one Redis and two
# LiteLLM proxies on one Redis, each pair with the same request and token
# limits per minute and the same daily money budget, in front of the same
# mock provider, under the same 64 concurrent clients. Measured where it
# lands (the mock's record of every call it served): requests and tokens
# admitted above the limit in any 60 s window, money spent above the
# budget, refusals while under every limit, throughput and latency.
#
# 1. Mock provider: `pressure mock-provider` (normal scenario: 40-60 ms per
#    answer, 48 output tokens or max_tokens if lower, usage in every answer,
#    billed at $1 per 1M input and $4 per 1M output tokens; it records every
#    call with its arrival time, tokens and price: GET /mock/arrivals).
# 2. One private redis-server on a free loopback port, emptied before each
#    stack starts.
# 3. pressure: two `pressure gateway` processes on that Redis (backend
#    redis, failureMode closed), one API key (auth.apiKeys) naming tenant
#    `bench`, whose limits are requestsPerMinute R, tokensPerMinute T
#    (algorithm window: a strict sliding window) and costMicroUsdPerDay B;
#    one use case `bench` = the mock's model `m` at the mock's prices, one
#    attempt (no retries).
#    LiteLLM: two `litellm --config` proxies (PyPI litellm[proxy], one
#    worker each) on that Redis: the deployment `bench` with rpm R, tpm T,
#    max_budget B (in dollars), budget_duration 1d and the mock's prices;
#    router pre-call checks enforce_model_rate_limits and
#    router_budget_limiting (benches/governed/litellm.yaml says why this and
#    not a virtual key: those need Postgres through Prisma, whose engines
#    are downloaded from outside the package registries).
# 4. Load (benches/governed/drive.py, Python asyncio + aiohttp): 64 clients,
#    half on each instance, closed loop for DURATION seconds, half small
#    (~25 prompt tokens, max_tokens 16) and half large (~330 prompt tokens,
#    max_tokens 64) requests; after a refusal a client pauses PAUSE_MS. One
#    stack, then the other, never both at once.
# 5. Report (benches/governed/report.py): the table in Markdown, pressure's
#    column first. Exit code 3 when pressure let anything through above a
#    limit or the budget.
#
# The defaults cross every limit within the run: at the mock's prices the
# token limit binds within the first seconds of each minute, and the budget
# (about 1.4 minutes of traffic at the token limit) runs out early in the
# second minute.
#
# Usage:  benches/governed-vs-litellm.sh
# Environment:
#   BENCH_STACKS=pressure,litellm      which stacks to run, in this order
#   BENCH_DURATION=75                  seconds of load per stack
#   BENCH_CLIENTS=64                   concurrent clients, spread evenly
#   BENCH_RPM=600                      requests per minute
#   BENCH_TPM=100000                   tokens (input + output) per minute
#   BENCH_BUDGET_MICRO_USD=200000      the daily budget ($0.20)
#   BENCH_PAUSE_MS=100                 a client's pause after a refusal
#   BENCH_OUT=dir                      keep the raw records there (per stack:
#                                      drive.json, arrivals.json, stats.json)
#   PRESSURE_BIN=path                  a prebuilt `pressure` instead of
#                                      `cargo build --release -p pressure-cli`
#   BENCH_LITELLM_BIN=path             a `litellm` to use; default: the one on
#                                      PATH, else a venv with litellm[proxy]
#                                      in $HOME/.cache/pressure-llm-peers
#                                      (shared with benches/llm-peers.sh)
#
# Needs cargo, python3, redis-server, redis-cli and the network for the
# first run's installs (crates.io, PyPI). Everything listens on 127.0.0.1
# only; every process started here gets its own process group and is
# stopped on exit (trap); every step has a timeout. The defaults take about
# 3.5 minutes after the build and installs. The daily budget is a UTC day
# (pressure's costMicroUsdPerDay): a run that would cross 00:00 UTC waits
# for it first.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
here=$PWD

log() { echo "== $*" >&2; }
die() {
  echo "governed-vs-litellm: $*" >&2
  exit 1
}

stacks=${BENCH_STACKS:-pressure,litellm}
duration=${BENCH_DURATION:-75}
clients=${BENCH_CLIENTS:-64}
rpm=${BENCH_RPM:-600}
tpm=${BENCH_TPM:-100000}
budget=${BENCH_BUDGET_MICRO_USD:-200000}
pause_ms=${BENCH_PAUSE_MS:-100}
scratch=$HOME/.cache/pressure-llm-peers
for v in duration clients rpm tpm budget pause_ms; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, got '${!v}'"
done
for s in ${stacks//,/ }; do
  [[ $s == pressure || $s == litellm ]] || die "unknown stack '$s' in BENCH_STACKS (pressure, litellm)"
done
wants() { [[ ,$stacks, == *,$1,* ]]; }
for tool in python3 redis-server redis-cli setsid timeout curl sha256sum; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done

# --- Installs and build -------------------------------------------------------
litellm_bin=${BENCH_LITELLM_BIN:-}
if wants litellm && [[ -z $litellm_bin ]]; then
  if command -v litellm >/dev/null; then
    litellm_bin=$(command -v litellm)
  else
    litellm_bin=$scratch/litellm-venv/bin/litellm
    if [[ ! -x $litellm_bin ]]; then
      log "installing LiteLLM proxy (python3 -m venv; pip install 'litellm[proxy]')"
      mkdir -p "$scratch"
      timeout 120 python3 -m venv "$scratch/litellm-venv" || die "python3 -m venv failed"
      timeout 1200 "$scratch/litellm-venv/bin/pip" install -q --disable-pip-version-check 'litellm[proxy]' ||
        die "pip install 'litellm[proxy]' failed"
    fi
  fi
fi
# The driver's Python: one with aiohttp (LiteLLM brings it).
py=python3
if ! python3 -c 'import aiohttp' 2>/dev/null; then
  if [[ -n $litellm_bin && -x $(dirname "$litellm_bin")/python3 ]]; then
    py=$(dirname "$litellm_bin")/python3
  else
    die "the load driver needs aiohttp: pip install aiohttp"
  fi
fi
if [[ -n ${PRESSURE_BIN:-} ]]; then
  pressure_bin=$PRESSURE_BIN
else
  command -v cargo >/dev/null || die "missing tool: cargo (or set PRESSURE_BIN)"
  log "building (cargo build --release -p pressure-cli)"
  timeout 3600 cargo build -q --release -p pressure-cli
  pressure_bin=${CARGO_TARGET_DIR:-$here/target}/release/pressure
fi
[[ -x $pressure_bin ]] || die "no $pressure_bin"

# --- A daily budget must not cross 00:00 UTC -----------------------------------
need=$((2 * duration + 150))
to_midnight=$((86400 - $(date -u +%s) % 86400))
if ((to_midnight < need)); then
  log "the run would cross 00:00 UTC (the daily budget resets): waiting ${to_midnight} s"
  sleep $((to_midnight + 2))
fi

machine_report before

# --- Processes, cleanup ---------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/governed.XXXXXX")
pgids=()
# shellcheck disable=SC2009
group_alive() { ps -o stat= -g "$1" 2>/dev/null | grep -qv '^Z'; }
stop_group() {
  local pgid=$1
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 50); do
    group_alive "$pgid" || break
    sleep 0.1
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  wait "$pgid" 2>/dev/null || true
}
cleanup() {
  local pgid
  for pgid in "${pgids[@]}"; do stop_group "$pgid"; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return; fi
    exited "$2"
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within $3 s; its log:"$'\n'"$(tail -n 30 "$tmp/$2.log" 2>/dev/null)"
}
# wait_http URL NAME SECONDS: until GET URL answers 200.
wait_http() {
  local deadline=$((SECONDS + $3))
  until [[ $(curl -s -o /dev/null -m 5 -w '%{http_code}' "$1") == 200 ]]; do
    exited "$2"
    ((SECONDS < deadline)) || die "$2: GET $1 gave no 200 within $3 s; its log:"$'\n'"$(tail -n 30 "$tmp/$2.log")"
    sleep 0.5
  done
}
clk_tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
# CPU time (user + system) of every live process of the groups given, µs.
groups_cpu_us() {
  local ticks=0 pid stat fields g
  for g in "$@"; do
    for pid in $(pgrep -g "$g" 2>/dev/null); do
      stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
      read -r -a fields <<<"${stat##*) }"
      ticks=$((ticks + fields[11] + fields[12]))
    done
  done
  echo $((ticks * 1000000 / clk_tck))
}

mock_port="" redis_port="" gw1="" gw2="" adm1="" adm2="" ll1="" ll2=""
for v in mock_port redis_port gw1 gw2 adm1 adm2 ll1 ll2; do free_port "$v"; done

log "starting redis-server on 127.0.0.1:$redis_port (no persistence)"
spawn redis redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no
wait_port "$redis_port" redis 10
log "starting the mock provider on 127.0.0.1:$mock_port"
spawn mock "$pressure_bin" mock-provider --listen "127.0.0.1:$mock_port" --seed 7
wait_port "$mock_port" mock 20
mock=http://127.0.0.1:$mock_port

# --- The stacks -------------------------------------------------------------------
key=sk-bench-governed-0123456789abcdef
key_sha=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
master_key=sk-bench-governed-master

start_pressure() {
  local i listen admin
  for i in 1 2; do
    listen=gw$i admin=adm$i
    cat >"$tmp/pressure-$i.json" <<EOF
{
  "gateway": {
    "listen": "127.0.0.1:${!listen}",
    "admin": { "listen": "127.0.0.1:${!admin}" },
    "backend": { "type": "redis", "url": "redis://127.0.0.1:$redis_port", "failureMode": "closed",
                 "timeoutMs": 1000, "keyPrefix": "governed" },
    "upstreams": { "mock": { "url": "$mock", "pathPrefix": "/api" } },
    "auth": { "required": true, "apiKeys": [ { "sha256": "$key_sha", "tenant": "bench", "name": "bench-key" } ] },
    "pressure": { "perTenant": { "enabled": true, "limits": {
      "requestsPerMinute": $rpm, "tokensPerMinute": $tpm, "costMicroUsdPerDay": $budget, "algorithm": "window" } } },
    "llm": {
      "providers": { "mock": { "kind": "openai", "baseUrl": "$mock/v1", "apiKeyEnv": "BENCH_MOCK_API_KEY",
                               "timeouts": { "maxConnections": 1024 } } },
      "models": [ { "provider": "mock", "model": "m",
                    "context": { "contextTokens": 8192, "maxOutputTokens": 512 },
                    "price": { "inputMicroUsdPer1M": 1000000, "outputMicroUsdPer1M": 4000000 } } ],
      "useCases": { "bench": { "chain": [ { "model": "mock/m" } ], "retry": { "maxAttempts": 1 } } }
    }
  }
}
EOF
    timeout 10 "$pressure_bin" check-config "$tmp/pressure-$i.json" >/dev/null 2>"$tmp/check-$i.log" ||
      die "pressure config invalid: $(cat "$tmp/check-$i.log")"
    spawn "pressure-$i" env -u RUST_LOG BENCH_MOCK_API_KEY=dummy \
      "$pressure_bin" gateway --config "$tmp/pressure-$i.json" --log-level warn
  done
  wait_port "$gw1" pressure-1 20
  wait_port "$gw2" pressure-2 20
  wait_http "http://127.0.0.1:$adm1/readyz" pressure-1 20
  wait_http "http://127.0.0.1:$adm2/readyz" pressure-2 20
  stack_groups=("${group[pressure-1]}" "${group[pressure-2]}")
  stack_urls=http://127.0.0.1:$gw1,http://127.0.0.1:$gw2
  stack_key=$key
}

start_litellm() {
  local i port
  sed -e "s/@MOCK_PORT@/$mock_port/; s/@REDIS_PORT@/$redis_port/; s/@RPM@/$rpm/; s/@TPM@/$tpm/" \
    -e "s/@BUDGET_USD@/$(awk -v b="$budget" 'BEGIN { printf "%.6f", b / 1e6 }')/; s/@MASTER_KEY@/$master_key/" \
    benches/governed/litellm.yaml >"$tmp/litellm.yaml"
  for i in 1 2; do
    port=ll$i
    # Offline: the bundled model cost map; errors only in the log.
    spawn "litellm-$i" env LITELLM_LOG=ERROR LITELLM_LOCAL_MODEL_COST_MAP=True DISABLE_ADMIN_UI=True \
      "$litellm_bin" --config "$tmp/litellm.yaml" --host 127.0.0.1 --port "${!port}" --num_workers 1
  done
  wait_port "$ll1" litellm-1 180
  wait_port "$ll2" litellm-2 180
  wait_http "http://127.0.0.1:$ll1/health/liveliness" litellm-1 120
  wait_http "http://127.0.0.1:$ll2/health/liveliness" litellm-2 120
  stack_groups=("${group[litellm-1]}" "${group[litellm-2]}")
  stack_urls=http://127.0.0.1:$ll1,http://127.0.0.1:$ll2
  stack_key=$master_key
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
report_args=()
for s in ${stacks//,/ }; do
  log "$s: emptying Redis, starting two instances"
  timeout 10 redis-cli -p "$redis_port" flushall >/dev/null
  "start_$s"
  curl -s -m 10 -X POST "$mock/mock/reset" >/dev/null
  mkdir -p "$tmp/$s"
  cpu0=$(groups_cpu_us "${stack_groups[@]}")
  log "$s: $clients clients for ${duration} s over $stack_urls"
  timeout $((duration + 90)) "$py" benches/governed/drive.py --targets "$stack_urls" --key "$stack_key" \
    --model bench --mock "$mock" --clients "$clients" --duration "$duration" --pause-ms "$pause_ms" \
    --out "$tmp/$s/drive.json" || die "$s: the load driver failed"
  echo $(($(groups_cpu_us "${stack_groups[@]}") - cpu0)) >"$tmp/$s/cpu_us"
  sleep 2 # answers still in flight at the mock finish
  curl -s -m 30 "$mock/mock/arrivals" >"$tmp/$s/arrivals.json"
  curl -s -m 10 "$mock/mock/stats" >"$tmp/$s/stats.json"
  for g in "${stack_groups[@]}"; do stop_group "$g"; done
  report_args+=("$s=$tmp/$s")
  if [[ -n ${BENCH_OUT:-} ]]; then
    mkdir -p "$BENCH_OUT/$s" && cp "$tmp/$s"/* "$BENCH_OUT/$s/"
  fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- Report -------------------------------------------------------------------------
rev=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')
ver_litellm=""
wants litellm && ver_litellm=$("$(dirname "$litellm_bin")/python3" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null ||
  "$py" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null || echo '?')
echo
echo "governed-vs-litellm: pressure $rev ($("$pressure_bin" --version 2>/dev/null | head -n1))${ver_litellm:+, LiteLLM $ver_litellm (1 worker per proxy)}," \
  "$(redis-server --version | awk '{ print $3 }' | sed 's/v=/Redis /'); $clients clients, ${duration} s per stack, pause ${pause_ms} ms after a refusal;" \
  "limits $rpm requests and $tpm tokens per minute, budget $budget µ\$ a day;" \
  "load average (1/5/15 min) $load_before before, $load_after after"
echo
rc=0
"$py" benches/governed/report.py --limits "$rpm,$tpm,$budget" --window 60 "${report_args[@]}" || rc=$?
machine_report after
exit "$rc"
