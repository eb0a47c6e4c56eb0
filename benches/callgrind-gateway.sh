#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: the pressure
# gateway next to nginx as a rate-limiting reverse proxy, on the pass path
# (limit never reached) and the reject path (429). Unlike requests per
# second, instruction counts do not move with the machine's speed or with
# what else runs on it, so they are the numbers to compare between commits.
#
# 1. An unmeasured nginx upstream answers `return 200 "ok\n";`.
# 2. The measured proxy runs under `valgrind --tool=callgrind`:
#      nginx     one process (master_process off), limit_req as in
#                benches/gateway-vs-nginx.sh, keepalive pool to the upstream
#      pressure  `pressure gateway`, the same two routes, plus /free: an
#                upstream with no limit (what the limiter adds to a pass is
#                the difference between the two pass rows)
#    and, for the LLM row, `pressure gateway` with `gateway.llm` in front of
#    an unmeasured nginx answering a fixed chat.completion (no nginx row:
#    nginx has no LLM path; compare it with pressure's own pass path)
# 3. Per path: WARMUP requests, then the counters are zeroed
#    (callgrind_control -z), then N requests on one keep-alive connection
#    (curl's URL globbing), then a dump (callgrind_control -d). The dump's
#    total divided by N is the figure: everything the proxy process did for
#    those requests, its timers and idle wake-ups included.
#
# With CG_TOOL=strace the same runs count system calls instead: the proxy
# runs natively and `strace -f -c` is attached for the measured requests
# (syscalls per request, every thread of the process).
#
# Usage:  benches/callgrind-gateway.sh
# Environment:
#   CG_REQUESTS=2000   measured requests per path
#   CG_WARMUP=200      unmeasured requests before them
#   PRESSURE_BIN=path  a prebuilt `pressure` (default: build --release)
#   CG_TOOL=callgrind  or strace (system calls per request)
#   CG_KEEP=dir        keep each dump there (cg-<proxy>-<path>.out), for
#                      callgrind_annotate
#   CG_CONNS=1         with more than 1, the measured requests are sent by
#                      `wrk -t1 -cCG_CONNS -dCG_SECS` (CG_SECS=20) instead
#                      of curl, and N is the count wrk completed: the cost
#                      per request under concurrency (timers, wake-ups and
#                      queues with many connections open), which one
#                      sequential connection does not show
#
# Needs valgrind, nginx and curl (Debian packages). Everything listens on
# 127.0.0.1 only, every step has a timeout, and every process started here
# is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before

requests=${CG_REQUESTS:-2000}
warmup=${CG_WARMUP:-200}
conns=${CG_CONNS:-1}
cg_secs=${CG_SECS:-20}

log() { echo "== $*" >&2; }
die() {
  echo "callgrind-gateway: $*" >&2
  exit 1
}
tool_kind=${CG_TOOL:-callgrind}
case $tool_kind in
  callgrind) tools="valgrind callgrind_control" ;;
  strace) tools="strace" ;;
  *) die "CG_TOOL must be callgrind or strace (got $tool_kind)" ;;
esac
((conns > 1)) && tools="$tools wrk"
for tool in $tools nginx curl awk; do
  command -v "$tool" >/dev/null || die "missing tool: $tool (apt-get install valgrind nginx curl)"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/callgrind-gateway.XXXXXX")
pids=()
cleanup() {
  stop_pids "${pids[@]}"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() {
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return; fi
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within 30 s: $(tail -n 20 "$tmp"/*.log 2>/dev/null)"
}

if [[ -n ${PRESSURE_BIN:-} ]]; then
  pressure_bin=$PRESSURE_BIN
else
  log "building (cargo build --release -p pressure-cli)"
  timeout 1800 cargo build -q --release -p pressure-cli
  pressure_bin=target/release/pressure
fi

up_port="" ngx_port="" gw_port="" gw_admin_port="" # set by free_port
free_port up_port
free_port ngx_port
free_port gw_port
free_port gw_admin_port
user=""
[[ $(id -u) == 0 ]] && user="user root;"

nginx_conf() { # NAME BODY
  mkdir -p "$tmp/$1"
  cat >"$tmp/$1/nginx.conf" <<EOF
$user
daemon off;
master_process off;
worker_processes 1;
pid $tmp/$1.pid;
error_log $tmp/$1.error.log error;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/$1-body;
    proxy_temp_path $tmp/$1-proxy;
    fastcgi_temp_path $tmp/$1-fastcgi;
    uwsgi_temp_path $tmp/$1-uwsgi;
    scgi_temp_path $tmp/$1-scgi;
    keepalive_requests 1000000;
$2
}
EOF
}
completion='{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}'
nginx_conf upstream "    server { listen 127.0.0.1:$up_port;
        location / { return 200 \"ok\\n\"; }
        location = /v1/chat/completions { default_type application/json; return 200 '$completion'; } }"
nginx_conf proxy "
    limit_req_zone \$binary_remote_addr zone=pass:1m rate=1000000r/s;
    limit_req_zone \$binary_remote_addr zone=reject:1m rate=1r/s;
    upstream up { server 127.0.0.1:$up_port; keepalive 16; }
    server {
        listen 127.0.0.1:$ngx_port;
        location / {
            limit_req zone=pass burst=1000000 nodelay;
            proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_pass http://up;
        }
        location /reject {
            limit_req zone=reject; limit_req_status 429;
            proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_pass http://up;
        }
    }"
cat >"$tmp/gateway.json" <<EOF
{ "gateway": {
    "listen": "127.0.0.1:$gw_port",
    "upstreams": { "bench": { "url": "http://127.0.0.1:$up_port", "pathPrefix": "/" },
                   "free": { "url": "http://127.0.0.1:$up_port", "pathPrefix": "/free" } },
    "backend": { "type": "memory" },
    "admin": { "listen": "127.0.0.1:$gw_admin_port" },
    "pressure": {
      "perService": { "bench": { "requestsPerSecond": 1000000000000, "algorithm": "window" } },
      "perRoute": [ { "resource": "gateway:route:reject", "pathPrefix": "/reject",
                      "limits": { "requestsPerSecond": 1 } } ] },
    "llm": {
      "providers": { "mock": { "baseUrl": "http://127.0.0.1:$up_port/v1" } },
      "models": [ { "provider": "mock", "model": "m",
                    "limits": { "requestsPerSecond": 1000000000, "tokensPerMinute": 1000000000000 },
                    "context": { "contextTokens": 8192, "maxOutputTokens": 256 } } ],
      "useCases": { "bench": { "chain": [ { "model": "mock/m" } ] } } } } }
EOF
printf '%s' '{"model":"bench","messages":[{"role":"user","content":"Say ok."}]}' >"$tmp/chat.json"

nginx -p "$tmp/upstream" -c "$tmp/upstream/nginx.conf" >"$tmp/upstream.log" 2>&1 &
pids+=("$!")
wait_port "$up_port" "nginx upstream"

# measured NAME CMD...: starts CMD under callgrind; sets $measured_pid.
measured() {
  local name=$1
  shift
  if [[ $tool_kind == strace ]]; then
    "$@" >"$tmp/$name.log" 2>&1 &
  else
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg-$name.%p" "$@" >"$tmp/$name.log" 2>&1 &
  fi
  pids+=("$!")
  measured_pid=$!
}

# send PORT PATH [CURL ARGS...]: the measured requests, their status codes
# counted in $tmp/codes (lines "COUNT CODE"), their number in $tmp/sent.
# With CG_CONNS > 1, wrk sends
# them (a POST body given as `--data-binary @FILE` becomes its script's).
send() {
  local port=$1 path=$2
  shift 2
  if ((conns == 1)); then
    timeout 600 curl -s -o /dev/null -w '%{http_code}\n' "$@" "http://127.0.0.1:$port$path?n=[1-$requests]" |
      sort | uniq -c >"$tmp/codes"
    echo "$requests" >"$tmp/sent"
    return
  fi
  local script="$tmp/wrk.lua" body=""
  while (($#)); do
    [[ $1 == --data-binary ]] && body=${2#@}
    shift
  done
  {
    if [[ -n $body ]]; then
      echo 'wrk.method = "POST"'
      echo 'wrk.headers["content-type"] = "application/json"'
      printf 'wrk.body = [==[%s]==]\n' "$(cat "$body")"
    fi
    echo 'function done(summary)'
    echo '  io.write(string.format("sent %d\\n", summary.requests))'
    echo 'end'
  } >"$script"
  timeout $((cg_secs + 60)) wrk -t1 -c"$conns" -d"${cg_secs}s" -s "$script" "http://127.0.0.1:$port$path" >"$tmp/wrk.out"
  awk '$1 == "sent" { print $2 }' "$tmp/wrk.out" >"$tmp/sent"
  # wrk counts only the answers that were not 2xx or 3xx.
  awk -v n="$(cat "$tmp/sent")" '/Non-2xx or 3xx responses:/ { bad = $NF }
    END { if (n - bad > 0) print n - bad, "2xx/3xx"; if (bad > 0) print bad, "other" }' \
    "$tmp/wrk.out" >"$tmp/codes"
}

# count PID PORT PATH NAME [CURL ARGS...]: instructions (or system calls)
# per request on that path.
count() {
  local pid=$1 port=$2 path=$3 name=$4
  shift 4
  timeout 300 curl -s -o /dev/null "$@" "http://127.0.0.1:$port$path?w=[1-$warmup]"
  if [[ $tool_kind == strace ]]; then
    local out="$tmp/strace-$name-${path//\//_}" tracer
    timeout 900 strace -f -c -o "$out" -p "$pid" 2>/dev/null &
    tracer=$!
    sleep 1 # attached to every thread
    send "$port" "$path" "$@"
    sleep 0.5
    kill -INT "$tracer" 2>/dev/null || true
    wait "$tracer" 2>/dev/null || true
    awk -v n="$(cat "$tmp/sent")" '$NF == "total" { printf "%.2f", $4 / n }' "$out"
    if [[ -n ${CG_KEEP:-} ]]; then
      mkdir -p "$CG_KEEP"
      cp "$out" "$CG_KEEP/"
    fi
    return
  fi
  timeout 60 callgrind_control -z "$pid" >/dev/null 2>&1
  send "$port" "$path" "$@"
  timeout 60 callgrind_control -d "$pid" >/dev/null 2>&1
  # The newest dump of that process holds the counts since the zeroing.
  local dump
  dump=$(ls -t "$tmp"/cg-*."$pid".* 2>/dev/null | head -n1)
  [[ -n $dump ]] || die "no callgrind dump for pid $pid"
  awk -v n="$(cat "$tmp/sent")" '/^(summary|totals):/ { t = $2 } END { printf "%.0f", t / n }' "$dump"
  if [[ -n ${CG_KEEP:-} ]]; then
    mkdir -p "$CG_KEEP"
    cp "$dump" "$CG_KEEP/cg-$name-${path//\//_}.out"
  fi
  rm -f "$dump"
}
codes() { awk '{ printf "%s×%s ", $1, $2 }' "$tmp/codes"; }

log "nginx proxy under callgrind on 127.0.0.1:$ngx_port"
measured nginx nginx -p "$tmp/proxy" -c "$tmp/proxy/nginx.conf"
wait_port "$ngx_port" "nginx proxy"
nginx_pid=$measured_pid
ngx_pass=$(count "$nginx_pid" "$ngx_port" / nginx)
ngx_pass_codes=$(codes)
ngx_rej=$(count "$nginx_pid" "$ngx_port" /reject nginx)
ngx_rej_codes=$(codes)

log "pressure gateway under callgrind on 127.0.0.1:$gw_port"
measured pressure "$pressure_bin" gateway --config "$tmp/gateway.json"
wait_port "$gw_port" "pressure gateway"
gw_pid=$measured_pid
gw_pass=$(count "$gw_pid" "$gw_port" / pressure)
gw_pass_codes=$(codes)
gw_free=$(count "$gw_pid" "$gw_port" /free pressure)
gw_free_codes=$(codes)
gw_rej=$(count "$gw_pid" "$gw_port" /reject pressure)
gw_rej_codes=$(codes)
gw_llm=$(count "$gw_pid" "$gw_port" /v1/chat/completions pressure -H 'content-type: application/json' --data-binary "@$tmp/chat.json")
gw_llm_codes=$(codes)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
what="instructions per request (callgrind"
[[ $tool_kind == strace ]] && what="system calls per request (strace -f -c"
if ((conns == 1)); then
  echo "$what, $requests requests on one keep-alive connection, after $warmup)"
else
  echo "$what, wrk -t1 -c$conns for ${cg_secs} s per path, after $warmup requests on one connection)"
fi
echo
echo "| path | pressure | nginx | pressure / nginx | answers (pressure; nginx) |"
echo "|---|---|---|---|---|"
echo "| pass | $gw_pass | $ngx_pass | $(ratio "$gw_pass" "$ngx_pass")× | $gw_pass_codes; $ngx_pass_codes |"
echo "| reject | $gw_rej | $ngx_rej | $(ratio "$gw_rej" "$ngx_rej")× | $gw_rej_codes; $ngx_rej_codes |"
echo "| pass, no limit on the route (the proxy alone) | $gw_free | $ngx_pass | $(ratio "$gw_free" "$ngx_pass")× | $gw_free_codes |"
echo "| LLM chat completion | $gw_llm | – | – | $gw_llm_codes |"
machine_report after
