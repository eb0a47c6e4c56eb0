#!/usr/bin/env bash
# LLM gateways side by side: pressure's gateway, the LiteLLM proxy and
# Portkey's gateway in front of the same zero-delay mock provider, driven by
# oha over HTTP/1.1 keep-alive, `POST /v1/chat/completions` with one small
# chat request.
#
# 1. Mock provider: a private nginx (one worker) answering every
#    `POST /v1/chat/completions` with a fixed OpenAI `chat.completion` JSON.
# 2. Targets, each calling that mock:
#      direct    the mock itself (the baseline of the "added" columns)
#      pressure  `pressure gateway`, gateway.llm with one OpenAI-kind
#                provider, one model whose limits are never reached, one use
#                case `bench`; memory backend
#      litellm   LiteLLM proxy from PyPI (`litellm[proxy]`), 2 workers, one
#                model `bench` = openai/m with api_base the mock
#      portkey   Portkey's gateway from npm (`@portkey-ai/gateway`, node),
#                requests carry x-portkey-provider: openai and
#                x-portkey-custom-host: the mock
# 3. Per target: a warm-up, a concurrency-1 run (`oha -c 1 -n N`: p50/p99),
#    then open-loop runs at fixed rates (`oha -q RATE -z DURATION
#    --latency-correction`). The rates are the outer loop and the targets the
#    inner one, so a target's row and the direct row it is compared with were
#    measured seconds apart (this box's speed drifts).
# 4. Tables (benches/llm-peers/summarize.py): achieved rate, p50, p99, added
#    p50/p99 over direct at the same rate, error share (non-2xx + connection
#    errors), CPU time of the target's own processes per response (from
#    /proc, the mock's for direct), and the max sustained rate (highest rate
#    tried with achieved >= 95% of it and error share < 1%).
#
# Usage:  benches/llm-peers.sh
# Environment:
#   BENCH_PEERS=pressure,litellm,portkey   which peers to run (direct always)
#   BENCH_RATES=100,500,2000,5000          open-loop rates, requests/s
#   BENCH_DURATION=10                      seconds of each open-loop run
#   BENCH_SERIAL_N=1000                    requests of the concurrency-1 run
#   BENCH_WARMUP_N=300                     unmeasured requests per target first
#   BENCH_CONNS=0                          oha connections of the open-loop runs
#                                          (0: rate/10, at least 50, at most 500)
#   BENCH_LITELLM_WORKERS=2                LiteLLM's --num_workers
#   BENCH_LITELLM_ARGS=                    more `litellm` flags, split on
#                                          spaces (e.g. --run_granian)
#   BENCH_LOGS=quiet                       quiet: every gateway logs errors
#                                          and warnings only (pressure
#                                          --log-level warn, LITELLM_LOG=ERROR,
#                                          Portkey --headless); default: each
#                                          as shipped (pressure: one JSON line
#                                          per LLM answer; LiteLLM: uvicorn's
#                                          access log)
#   BENCH_SCRATCH=$HOME/.cache/pressure-llm-peers
#                                          where LiteLLM (venv), Portkey (npm)
#                                          and oha (cargo install --root) are
#                                          installed; reused when present
#   PRESSURE_BIN=path                      a prebuilt `pressure` instead of
#                                          building one
#   BENCH_NETNS=auto                       1: run the measured part in a new
#                                          network namespace with only lo
#                                          (`unshare -n`, root); 0: do not;
#                                          auto: when unshare -n works
#
# Needs cargo, python3 (with venv), node + npm, nginx, and the network for
# the first run's installs (PyPI, npm, crates.io). Everything measured
# listens on 127.0.0.1 only (Portkey's start script has no host flag:
# benches/llm-peers/portkey-loopback.mjs pins it), LiteLLM runs with its
# local model cost map, and as root the measured part runs in a network
# namespace holding only lo (BENCH_NETNS). Every step has a timeout, each
# process started here gets its own process group (setsid) and the whole
# group is stopped on exit (trap). The defaults take about 4 minutes after
# the build and installs: (1 + peers) * rates runs of DURATION + 1 s, the
# serial runs (LiteLLM's ~6-15 ms per request) and LiteLLM's startup.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before
here=$PWD

peers=${BENCH_PEERS:-pressure,litellm,portkey}
rates=${BENCH_RATES:-100,500,2000,5000}
duration=${BENCH_DURATION:-10}
serial_n=${BENCH_SERIAL_N:-1000}
warmup_n=${BENCH_WARMUP_N:-300}
conns_knob=${BENCH_CONNS:-0}
litellm_workers=${BENCH_LITELLM_WORKERS:-2}
read -r -a litellm_args <<<"${BENCH_LITELLM_ARGS:-}"
logs=${BENCH_LOGS:-quiet}
scratch=${BENCH_SCRATCH:-$HOME/.cache/pressure-llm-peers}
cores=$(nproc)

log() { echo "== $*" >&2; }
die() {
  echo "llm-peers: $*" >&2
  exit 1
}

for peer in ${peers//,/ }; do
  case $peer in
    pressure | litellm | portkey) ;;
    *) die "unknown peer '$peer' in BENCH_PEERS (pressure, litellm, portkey)" ;;
  esac
done
[[ $rates =~ ^[0-9]+(,[0-9]+)*$ ]] || die "BENCH_RATES must be comma-separated integers, got '$rates'"
[[ $duration =~ ^[0-9]+$ ]] || die "BENCH_DURATION must be whole seconds, got '$duration'"
[[ $logs == quiet || $logs == default ]] || die "BENCH_LOGS must be quiet or default, got '$logs'"
wants() { [[ ,$peers, == *,$1,* ]]; }

for tool in cargo python3 nginx awk setsid timeout; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done
nginx_bin=$(command -v nginx)
if wants portkey; then
  for tool in node npm; do
    command -v "$tool" >/dev/null || die "missing tool: $tool (needed by the portkey peer)"
  done
fi

# --- Installs into the scratch dir (reused between runs) ---------------------
mkdir -p "$scratch"

# oha: BENCH_OHA_BIN (set by the network-namespace re-run below), else from
# PATH, else `cargo install oha --locked --root $scratch/oha`.
if [[ -n ${BENCH_OHA_BIN:-} ]]; then
  oha_bin=$BENCH_OHA_BIN
elif command -v oha >/dev/null; then
  oha_bin=$(command -v oha)
else
  oha_bin=$scratch/oha/bin/oha
  if [[ ! -x $oha_bin ]]; then
    log "installing oha (cargo install oha --locked --root $scratch/oha)"
    timeout 1800 cargo install -q oha --locked --root "$scratch/oha" ||
      die "cargo install oha failed"
  fi
fi

# LiteLLM proxy: a venv with litellm[proxy] from PyPI.
litellm_bin=$scratch/litellm-venv/bin/litellm
if wants litellm && [[ ! -x $litellm_bin ]]; then
  log "installing LiteLLM proxy (python3 -m venv; pip install 'litellm[proxy]')"
  timeout 120 python3 -m venv "$scratch/litellm-venv" || die "python3 -m venv failed"
  timeout 1200 "$scratch/litellm-venv/bin/pip" install -q --disable-pip-version-check 'litellm[proxy]' ||
    die "pip install 'litellm[proxy]' failed"
fi

# Portkey gateway: @portkey-ai/gateway from npm into $scratch/portkey.
portkey_start=$scratch/portkey/node_modules/@portkey-ai/gateway/build/start-server.js
if wants portkey && [[ ! -f $portkey_start ]]; then
  log "installing Portkey gateway (npm install @portkey-ai/gateway)"
  mkdir -p "$scratch/portkey"
  timeout 600 npm install --silent --no-audit --no-fund --prefix "$scratch/portkey" @portkey-ai/gateway ||
    die "npm install @portkey-ai/gateway failed"
  [[ -f $portkey_start ]] || die "no $portkey_start after npm install"
fi

# --- Build ------------------------------------------------------------------
if wants pressure; then
  if [[ -n ${PRESSURE_BIN:-} ]]; then
    log "using PRESSURE_BIN=$PRESSURE_BIN"
    pressure_bin=$PRESSURE_BIN
  else
    log "building (cargo build --release -p pressure-cli)"
    timeout 1800 cargo build -q --release -p pressure-cli
    pressure_bin=$here/target/release/pressure
  fi
  [[ -x $pressure_bin ]] || die "no $pressure_bin after the build"
fi

# --- Loopback-only network namespace ----------------------------------------
# With BENCH_NETNS=auto (default, when running as root and `unshare -n`
# works) or 1, the measured part runs in a new network namespace that has
# only a loopback interface: nothing started below can reach anything but
# 127.0.0.1, whatever it tries (LiteLLM fetching its cost map, telemetry).
# 0: the host's network namespace (everything still listens on 127.0.0.1).
netns=${BENCH_NETNS:-auto}
if [[ ${BENCH_IN_NETNS:-} != 1 && $netns != 0 ]]; then
  if [[ $netns == 1 ]] || { [[ $(id -u) == 0 ]] && timeout 5 unshare -n true 2>/dev/null; }; then
    command -v ip >/dev/null || die "BENCH_NETNS needs ip (iproute2) to bring up lo"
    log "re-running in a new network namespace with only lo (BENCH_NETNS=0: do not)"
    export BENCH_IN_NETNS=1 BENCH_OHA_BIN=$oha_bin
    [[ -n ${pressure_bin:-} ]] && export PRESSURE_BIN=$pressure_bin
    # shellcheck disable=SC2016
    exec unshare -n -- bash -c 'ip link set lo up && exec "$0" "$@"' "$here/benches/llm-peers.sh" "$@"
  fi
fi
[[ ${BENCH_IN_NETNS:-} == 1 ]] && log "in a network namespace of its own: $(ip -brief link 2>/dev/null | awk '{ printf "%s ", $1 }')"

# --- Scratch dir of this run and cleanup ------------------------------------
# Every process is started with setsid (its own process group: LiteLLM forks
# workers, nginx its worker) and recorded in `pgids`; on exit each group gets
# TERM, then KILL after 5 s. The run's temp dir is removed.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llm-peers.XXXXXX")
pgids=()
# Whether process group $1 still has a member that is not a zombie (a
# group's leader stays one until `wait`; pgrep cannot tell).
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

# spawn NAME CMD...: starts CMD in a new session (process group id = its
# pid) with output in $tmp/NAME.log; records the group, also as group[NAME].
declare -A group
spawn() {
  local name=$1
  shift
  setsid "$@" >"$tmp/$name.log" 2>&1 </dev/null &
  pgids+=("$!")
  group[$name]=$!
}

# CPU time (user + system) of every live process of group $1, microseconds.
# /proc/PID/stat after the command's ")": field 3 (state) first, utime and
# stime are fields 14 and 15.
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

# exited NAME: dies when the process group of NAME has ended, with its log.
exited() {
  group_alive "${group[$1]}" ||
    die "$1 exited; its log:"$'\n'"$(tail -n 30 "$tmp/$1.log" 2>/dev/null)"
}

# wait_port PORT NAME SECONDS: until something accepts on 127.0.0.1:PORT.
wait_port() {
  local tries=$(($3 * 10))
  for _ in $(seq "$tries"); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
      return
    fi
    exited "$2"
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within $3 s; its log:"$'\n'"$(tail -n 30 "$tmp/$2.log" 2>/dev/null)"
}

# The one request body, and the headers every target gets (Portkey more).
body='{"model":"bench","messages":[{"role":"user","content":"hello"}],"max_tokens":16}'
printf '%s' "$body" >"$tmp/body.json"

mock_port="" gw_port="" gw_admin_port="" litellm_port="" portkey_port=""
free_port mock_port
free_port gw_port
free_port gw_admin_port
free_port litellm_port
free_port portkey_port

# --- 1. Mock provider: nginx, one worker ------------------------------------
nginx_user=""
[[ $(id -u) == 0 ]] && nginx_user="user root;"
completion='{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}'
mkdir -p "$tmp/mock"
cat >"$tmp/mock/nginx.conf" <<EOF
$nginx_user
worker_processes 1;
pid $tmp/mock/nginx.pid;
error_log $tmp/mock/error.log error;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $tmp/mock/body;
    proxy_temp_path $tmp/mock/proxy;
    fastcgi_temp_path $tmp/mock/fastcgi;
    uwsgi_temp_path $tmp/mock/uwsgi;
    scgi_temp_path $tmp/mock/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_buffer_size 64k;
    server {
        listen 127.0.0.1:$mock_port backlog=4096;
        location = /v1/chat/completions {
            default_type application/json;
            return 200 '$completion';
        }
        location / { return 404 '{"error":{"message":"not found"}}'; }
    }
}
EOF
timeout 10 "$nginx_bin" -t -q -p "$tmp/mock" -c "$tmp/mock/nginx.conf" -g 'daemon off;' \
  2>"$tmp/mock-check.log" || die "mock nginx config invalid: $(cat "$tmp/mock-check.log")"
log "starting the mock provider (nginx, 1 worker) on 127.0.0.1:$mock_port"
spawn mock "$nginx_bin" -p "$tmp/mock" -c "$tmp/mock/nginx.conf" -g 'daemon off;'
wait_port "$mock_port" mock 10

# --- 2a. pressure gateway ---------------------------------------------------
# One provider (OpenAI kind) at the mock, one model with limits never
# reached, one use case "bench" (the request's model). The upstreams map is
# required; its prefix is never requested.
if wants pressure; then
  huge=1000000000000
  cat >"$tmp/pressure.json" <<EOF
{
  "gateway": {
    "listen": "127.0.0.1:$gw_port",
    "admin": { "listen": "127.0.0.1:$gw_admin_port" },
    "backend": { "type": "memory" },
    "upstreams": { "mock": { "url": "http://127.0.0.1:$mock_port", "pathPrefix": "/api" } },
    "pressure": { "enabled": true },
    "llm": {
      "providers": {
        "mock": {
          "kind": "openai",
          "baseUrl": "http://127.0.0.1:$mock_port/v1",
          "apiKeyEnv": "BENCH_MOCK_API_KEY",
          "timeouts": { "maxConnections": 4096, "poolWaitMs": 10000 }
        }
      },
      "models": [
        {
          "provider": "mock", "model": "m",
          "limits": { "requestsPerMinute": $huge, "inputTokensPerMinute": $huge,
                      "outputTokensPerMinute": $huge, "algorithm": "window" },
          "context": { "contextTokens": 8192, "maxOutputTokens": 512 },
          "price": { "inputMicroUsdPer1M": 1000000, "outputMicroUsdPer1M": 2000000 }
        }
      ],
      "useCases": { "bench": { "chain": [ { "model": "mock/m" } ] } }
    }
  }
}
EOF
  timeout 10 "$pressure_bin" check-config "$tmp/pressure.json" >/dev/null ||
    die "pressure config invalid"
  log "starting pressure gateway on 127.0.0.1:$gw_port"
  # RUST_LOG would replace --log-level: unset.
  pressure_log=(--log-level warn)
  [[ $logs == default ]] && pressure_log=(--log-level info)
  spawn pressure env -u RUST_LOG BENCH_MOCK_API_KEY=dummy \
    "$pressure_bin" gateway --config "$tmp/pressure.json" "${pressure_log[@]}"
fi

# --- 2b. LiteLLM proxy ------------------------------------------------------
# Offline: the bundled model cost map instead of fetching it (its telemetry
# records nothing until a destination is configured), no admin UI;
# quiet: errors only (uvicorn's log level follows LITELLM_LOG), default: no
# LITELLM_LOG at all, as shipped.
if wants litellm; then
  sed "s/@MOCK_PORT@/$mock_port/g" benches/llm-peers/litellm.yaml >"$tmp/litellm.yaml"
  log "starting LiteLLM proxy ($litellm_workers workers) on 127.0.0.1:$litellm_port"
  litellm_log=(LITELLM_LOG=ERROR)
  [[ $logs == default ]] && litellm_log=(-u LITELLM_LOG)
  spawn litellm env "${litellm_log[@]}" LITELLM_LOCAL_MODEL_COST_MAP=True \
    DISABLE_ADMIN_UI=True "$litellm_bin" --config "$tmp/litellm.yaml" --host 127.0.0.1 \
    --port "$litellm_port" --num_workers "$litellm_workers" "${litellm_args[@]}"
fi

# --- 2c. Portkey gateway ----------------------------------------------------
if wants portkey; then
  log "starting Portkey gateway on 127.0.0.1:$portkey_port"
  spawn portkey env NODE_ENV=production PORTKEY_START="$portkey_start" \
    node benches/llm-peers/portkey-loopback.mjs --port="$portkey_port" --headless
fi

wants pressure && wait_port "$gw_port" pressure 20
wants portkey && wait_port "$portkey_port" portkey 30
wants litellm && wait_port "$litellm_port" litellm 180

# Target table: name, URL and extra oha arguments (headers).
targets=(direct)
declare -A url
url[direct]="http://127.0.0.1:$mock_port/v1/chat/completions"
group[direct]=${group[mock]}
url[pressure]="http://127.0.0.1:$gw_port/v1/chat/completions"
url[litellm]="http://127.0.0.1:$litellm_port/v1/chat/completions"
url[portkey]="http://127.0.0.1:$portkey_port/v1/chat/completions"
for peer in ${peers//,/ }; do targets+=("$peer"); done
common_headers=(-H 'content-type: application/json' -H 'authorization: Bearer dummy')
extra_headers() {
  if [[ $1 == portkey ]]; then
    printf '%s\n' -H 'x-portkey-provider: openai' \
      -H "x-portkey-custom-host: http://127.0.0.1:$mock_port/v1"
  fi
}

# --- Sanity: every target answers the request with a chat.completion --------
probe() {
  local name=$1 args code
  mapfile -t args < <(extra_headers "$name")
  code=$(python3 - "${url[$name]}" "$tmp/body.json" "$tmp/probe-$name.out" "${args[@]}" <<'PY'
import sys, urllib.request
url, body, out, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
headers = {"content-type": "application/json", "authorization": "Bearer dummy"}
for flag, value in zip(rest[::2], rest[1::2]):
    k, v = value.split(":", 1)
    headers[k.strip()] = v.strip()
req = urllib.request.Request(url, data=open(body, "rb").read(), headers=headers, method="POST")
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open(req, timeout=30) as r:
        open(out, "wb").write(r.read()); print(r.status)
except urllib.error.HTTPError as e:
    open(out, "wb").write(e.read()); print(e.code)
except Exception as e:
    open(out, "w").write(str(e)); print(0)
PY
  )
  [[ $code == 200 ]] && grep -q 'chat.completion' "$tmp/probe-$name.out"
}
# ready NAME SECONDS: probes until a chat.completion comes back (LiteLLM's
# parent listens before its workers have started).
ready() {
  local deadline=$((SECONDS + $2))
  until probe "$1"; do
    exited "$1"
    ((SECONDS < deadline)) ||
      die "$1: POST ${url[$1]} gave no chat.completion within $2 s: $(head -c 400 "$tmp/probe-$1.out")"$'\n'"$(tail -n 20 "$tmp/$1.log" 2>/dev/null)"
    sleep 0.5
  done
}
for t in "${targets[@]}"; do ready "$t" 180; done
log "every target answers a chat.completion (targets: ${targets[*]})"

# --- oha runs ---------------------------------------------------------------
out=$tmp/oha
mkdir -p "$out"
# oha_run NAME OUTFILE BOUND ARGS...: one oha run against target NAME; the
# CPU time its process group (the mock's, for direct) used meanwhile goes
# to OUTFILE's .cpu_us.
oha_run() {
  local name=$1 file=$2 bound=$3 hdrs cpu_before pg
  shift 3
  mapfile -t hdrs < <(extra_headers "$name")
  pg=${group[$name]}
  cpu_before=$(group_cpu_us "$pg")
  timeout --kill-after=5 "$bound" "$oha_bin" --no-tui --output-format json \
    -m POST "${common_headers[@]}" "${hdrs[@]}" -D "$tmp/body.json" "$@" \
    "${url[$name]}" >"$file" 2>"$file.err" || {
    echo "llm-peers: oha against $name failed or timed out ($(head -c 300 "$file.err"))" >&2
    rm -f "$file"
  }
  echo $(($(group_cpu_us "$pg") - cpu_before)) >"${file%.json}.cpu_us"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for t in "${targets[@]}"; do
  log "warm-up $t: $warmup_n requests, 4 connections"
  oha_run "$t" "$out/$t-warmup.json" 120 -c 4 -n "$warmup_n"
  log "concurrency 1 $t: $serial_n requests"
  oha_run "$t" "$out/$t-serial.json" 120 -c 1 -n "$serial_n"
done

for rate in ${rates//,/ }; do
  conns=$conns_knob
  if ((conns == 0)); then
    conns=$((rate / 10))
    ((conns < 50)) && conns=50
    ((conns > 500)) && conns=500
  fi
  for t in "${targets[@]}"; do
    log "open loop $t: $rate/s for ${duration}s, $conns connections"
    oha_run "$t" "$out/$t-$rate.json" $((duration + 30)) \
      -c "$conns" -q "$rate" -z "${duration}s" --latency-correction
    sleep 1
  done
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- Report -----------------------------------------------------------------
ver_litellm="" ver_portkey=""
if wants litellm; then
  ver_litellm=$("$scratch/litellm-venv/bin/pip" show litellm 2>/dev/null | awk '/^Version:/ { print $2 }')
fi
if wants portkey; then
  ver_portkey=$(awk -F'"' '/"version":/ { print $4; exit }' \
    "$scratch/portkey/node_modules/@portkey-ai/gateway/package.json")
fi
echo
peer_versions=""
[[ -n $ver_litellm ]] && peer_versions+=", LiteLLM $ver_litellm ($litellm_workers workers${litellm_args[*]:+ ${litellm_args[*]}})"
[[ -n $ver_portkey ]] && peer_versions+=", Portkey gateway $ver_portkey"
echo "llm-peers: $cores cores ($(uname -m)), ${duration}s per open-loop run, $serial_n serial requests;" \
  "$("$oha_bin" --version 2>/dev/null | head -n1), mock $("$nginx_bin" -v 2>&1 | sed 's/.*: //')$peer_versions;" \
  "logs $logs; load average (1/5/15 min) $load_before before the runs, $load_after after"
echo
python3 benches/llm-peers/summarize.py "$out" "$(
  IFS=,
  echo "${targets[*]}"
)" "$rates"
machine_report after
