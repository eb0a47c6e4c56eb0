#!/usr/bin/env bash
# Instructions per decision, counted by valgrind's callgrind: `pressure rls`
# answering ShouldRateLimit over gRPC (OK and OVER_LIMIT, memory backend),
# next to the gateway's in-process 429 path (an HTTP request refused by a
# route limit) measured in the same run the same way.
#
# Per case: the measured server runs under `valgrind --tool=callgrind`;
# WARMUP unmeasured calls, the counters are zeroed (callgrind_control -z), N
# calls on one connection (gRPC: the rls_load example, sequential, one
# HTTP/2 connection; HTTP: curl's URL globbing on one keep-alive
# connection), a dump (callgrind_control -d); the dump's total over N is the
# figure — everything the server process did for those calls.
#
# Usage:  benches/callgrind-rls.sh
# Environment:
#   CG_REQUESTS=2000   measured calls per case
#   CG_WARMUP=200      unmeasured calls before them
#   PRESSURE_BIN=path  a prebuilt `pressure` (default: build --release)
#
# Needs valgrind and curl (Debian packages). Everything listens on 127.0.0.1
# only, every step has a timeout, every process started here is stopped on
# exit.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "== $*" >&2; }
die() {
  echo "callgrind-rls: $*" >&2
  exit 1
}
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before

requests=${CG_REQUESTS:-2000}
warmup=${CG_WARMUP:-200}
for tool in valgrind callgrind_control curl awk; do
  command -v "$tool" >/dev/null || die "missing tool: $tool (apt-get install valgrind curl)"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/callgrind-rls.XXXXXX")
pids=()
cleanup() {
  stop_pids "${pids[@]}"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() {
  for _ in $(seq 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return; fi
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within 60 s: $(tail -n 20 "$tmp"/*.log 2>/dev/null)"
}

log "building (cargo build --release: pressure, rls_load)"
timeout 1800 cargo build -q --release -p pressure-rls --example rls_load
load=target/release/examples/rls_load
if [[ -n ${PRESSURE_BIN:-} ]]; then
  pressure_bin=$PRESSURE_BIN
else
  timeout 1800 cargo build -q --release -p pressure-cli
  pressure_bin=target/release/pressure
fi

rls_port="" gw_port="" gw_admin_port=""
free_port rls_port
free_port gw_port
free_port gw_admin_port

cat >"$tmp/rls.yaml" <<EOF2
domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
  - key: blocked
    rate_limit:
      unit: minute
      requests_per_unit: 1
EOF2
cat >"$tmp/gateway.json" <<EOF2
{ "gateway": {
    "listen": "127.0.0.1:$gw_port",
    "upstreams": { "bench": { "url": "http://127.0.0.1:9", "pathPrefix": "/" } },
    "backend": { "type": "memory" },
    "admin": { "listen": "127.0.0.1:$gw_admin_port" },
    "pressure": {
      "perRoute": [ { "resource": "gateway:route:reject", "pathPrefix": "/reject",
                      "limits": { "requestsPerSecond": 1 } } ] } } }
EOF2

# measured NAME CMD...: starts CMD under callgrind; sets $measured_pid.
measured() {
  local name=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg-$name.%p" "$@" >"$tmp/$name.log" 2>&1 &
  pids+=("$!")
  measured_pid=$!
}

# per_call PID: instructions per call of the newest dump of PID.
per_call() {
  local dump
  dump=$(ls -t "$tmp"/cg-*."$1".* 2>/dev/null | head -n1)
  [[ -n $dump ]] || die "no callgrind dump for pid $1"
  awk -v n="$requests" '/^(summary|totals):/ { t = $2 } END { printf "%.0f", t / n }' "$dump"
  rm -f "$dump"
}

# grpc PID KEY: instructions per ShouldRateLimit of descriptor KEY=v.
grpc() {
  local url="http://127.0.0.1:$rls_port"
  timeout 300 "$load" "$url" bench "$2" v "$warmup" >/dev/null
  timeout 60 callgrind_control -z "$1" >/dev/null 2>&1
  timeout 600 "$load" "$url" bench "$2" v "$requests" >"$tmp/answers"
  timeout 60 callgrind_control -d "$1" >/dev/null 2>&1
  per_call "$1"
}

log "pressure rls under callgrind on 127.0.0.1:$rls_port"
measured rls "$pressure_bin" rls --config "$tmp/rls.yaml" --listen "127.0.0.1:$rls_port" --no-watch
wait_port "$rls_port" "pressure rls"
rls_pid=$measured_pid
rls_ok=$(grpc "$rls_pid" client)
rls_ok_answers=$(cat "$tmp/answers")
rls_over=$(grpc "$rls_pid" blocked)
rls_over_answers=$(cat "$tmp/answers")

log "pressure gateway under callgrind on 127.0.0.1:$gw_port"
measured gateway "$pressure_bin" gateway --config "$tmp/gateway.json"
wait_port "$gw_port" "pressure gateway"
gw_pid=$measured_pid
timeout 300 curl -s -o /dev/null "http://127.0.0.1:$gw_port/reject?w=[1-$warmup]"
timeout 60 callgrind_control -z "$gw_pid" >/dev/null 2>&1
timeout 600 curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$gw_port/reject?n=[1-$requests]" >"$tmp/codes"
timeout 60 callgrind_control -d "$gw_pid" >/dev/null 2>&1
gw_rej=$(per_call "$gw_pid")
gw_codes=$(sort "$tmp/codes" | uniq -c | awk '{ printf "%s×%s ", $1, $2 }')

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "instructions per decision (callgrind, $requests calls on one connection, after $warmup)"
echo
echo "| case | instructions | / gateway 429 | answers |"
echo "|---|---:|---:|---|"
echo "| rls OK (gRPC, memory) | $rls_ok | $(ratio "$rls_ok" "$gw_rej")× | $rls_ok_answers |"
echo "| rls OVER_LIMIT (gRPC, memory) | $rls_over | $(ratio "$rls_over" "$gw_rej")× | $rls_over_answers |"
echo "| gateway 429 (HTTP/1.1, memory) | $gw_rej | 1.00× | $gw_codes |"
machine_report after
