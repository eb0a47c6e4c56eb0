#!/usr/bin/env bash
# The pressure gateway versus nginx as a rate-limiting reverse proxy, side by
# side with wrk, against the same trivial upstream.
#
# 1. Upstream: a private nginx instance answering `return 200 "ok\n";` on a
#    loopback port. All paths below proxy to it.
# 2. Pass path (limits never reached), wrk against:
#      direct   the upstream itself (the ceiling of this box)
#      nginx    nginx reverse proxy, limit_req rate=1000000r/s burst (never
#               reached), keepalive pool to the upstream
#      pressure `pressure gateway`, perService requestsPerSecond 1e12 (window)
# 3. Reject path (nearly every request 429), wrk against:
#      nginx    limit_req rate=1r/s, no burst, limit_req_status 429
#      pressure perRoute requestsPerSecond 1 on the same path
# 4. Table: requests/s and p99 of each run, ratios pressure/nginx.
#    Goal: rps ratio >= 1.0 and p99 ratio <= 1.0 on both paths. Then the
#    CPU time the proxy (master and workers) and the upstream used per
#    request during each measured run, from /proc: the proxy's user and
#    system time apart, since the kernel's share is large on loopback.
# 5. Memory: crates/pressure-gateway/examples/tenants_rss.rs registers
#    100,000 lazy tenant resources in the gateway's broker (memory backend)
#    and reports the RSS delta; the idle RSS of the gateway and of the nginx
#    proxy after the runs are printed too.
#
# Usage:  benches/gateway-vs-nginx.sh
# Environment:
#   BENCH_SECS=10     duration of each measured wrk run
#   BENCH_WARMUP=2    duration of the unmeasured warm-up run before each
#   BENCH_CONNS=64    wrk connections (-c)    BENCH_THREADS=2  wrk threads (-t)
#   BENCH_TENANTS=100000   (0: skip the memory part and its example build)
#   PRESSURE_BIN=path  benchmark this prebuilt `pressure` binary instead of
#                      building one (to compare two builds back to back)
#   BENCH_GATEWAY_ARGS="--share-cores"  extra arguments for `pressure gateway`
#                      (split on spaces; e.g. the opt-in that yields a
#                      saturated server thread's core, docs/cli.md)
#
# Needs wrk and nginx (Debian packages `wrk`, `nginx`); run as root, the
# script installs them with apt-get when missing. Everything listens on
# 127.0.0.1 only, every step has a timeout, and every process started here is
# stopped on exit (trap). The runs take about 80 s after the build.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before

secs=${BENCH_SECS:-10}
warmup=${BENCH_WARMUP:-2}
conns=${BENCH_CONNS:-64}
threads=${BENCH_THREADS:-2}
tenants=${BENCH_TENANTS:-100000}
cores=$(nproc)

log() { echo "== $*" >&2; }
die() {
  echo "gateway-vs-nginx: $*" >&2
  exit 1
}

# --- Tools ------------------------------------------------------------------
# wrk and nginx from Debian; installed here only when running as root.
if ! command -v wrk >/dev/null || ! command -v nginx >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    log "installing wrk and nginx (apt-get)"
    timeout 300 apt-get update -qq
    # policy-rc.d may refuse to start the system nginx; that is what we want.
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq wrk nginx >/dev/null
  fi
fi
for tool in wrk nginx cargo awk; do
  command -v "$tool" >/dev/null || die "missing tool: $tool (apt-get install wrk nginx)"
done
nginx_bin=$(command -v nginx)

# --- Scratch dir and cleanup ------------------------------------------------
# Every process started below is recorded in `pids` and stopped on exit;
# the scratch dir (configs, pid files, logs) is removed.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gateway-vs-nginx.XXXXXX")
pids=()
cleanup() {
  stop_pids "${pids[@]}"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits (at most 10 s) until something accepts on 127.0.0.1:$1; $2 names it.
wait_port() {
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
      return
    fi
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within 10 s (logs: see below)"$'\n'"$(tail -n 20 "$tmp"/*.log 2>/dev/null)"
}

# The sums of what awk program $2 prints for /proc/PID/$1 over process $3
# and its direct children (nginx workers), word by word.
proc_tree_sum() {
  local pid
  for pid in "$3" $(pgrep -P "$3" 2>/dev/null || true); do
    awk "$2" "/proc/$pid/$1" 2>/dev/null || true
  done | awk '{ for (i = 1; i <= NF; i++) t[i] += $i; if (NF > k) k = NF }
    END { if (k == 0) print 0; for (i = 1; i <= k; i++) printf "%d%s", t[i], (i < k ? " " : "\n") }'
}
# CPU time used so far, in clock ticks: user (utime) and system (stime)
# (0 0 once the process is gone).
cpu_tree_ticks() {
  local ticks
  read -r -a ticks <<<"$(proc_tree_sum stat '{ print $14, $15 }' "$1")"
  echo "${ticks[0]:-0} ${ticks[1]:-0}"
}
# Resident set size, in KiB.
rss_tree_kib() { proc_tree_sum status '/^VmRSS:/ { print $2 }' "$1"; }

# --- Build ------------------------------------------------------------------
if [[ -n ${PRESSURE_BIN:-} ]]; then
  # A prebuilt binary (e.g. an older commit's, to compare builds back to back).
  log "using PRESSURE_BIN=$PRESSURE_BIN"
  pressure_bin=$PRESSURE_BIN
else
  log "building (cargo build --release -p pressure-cli, example tenants_rss)"
  timeout 900 cargo build -q --release -p pressure-cli
  pressure_bin=target/release/pressure
fi
if ((tenants > 0)); then
  timeout 900 cargo build -q --release -p pressure-gateway --example tenants_rss
fi
[[ -x $pressure_bin ]] || die "no $pressure_bin after the build"

up_port="" ngx_pass_port="" ngx_rej_port="" gw_port="" gw_admin_port="" # set by free_port
free_port up_port       # trivial upstream (nginx)
free_port ngx_pass_port # nginx proxy, limit never reached
free_port ngx_rej_port  # nginx proxy, rate=1r/s
free_port gw_port       # pressure gateway (both paths)
free_port gw_admin_port # its admin listener

# nginx drops to an unprivileged user when started as root; the scratch dir
# is root-only, so keep the workers as root for this private instance.
nginx_user=""
[[ $(id -u) == 0 ]] && nginx_user="user root;"

# Common top of both nginx configs: private prefix, no access log, temp
# paths in the scratch dir, epoll with many connections per worker.
nginx_head() {
  cat <<EOF
$nginx_user
worker_processes $1;
pid $tmp/$2.pid;
error_log $tmp/$2.error.log error;
events { worker_connections 4096; }
EOF
}
# Common directives of both http blocks; $1 names the instance.
nginx_http_common() {
  cat <<EOF
    access_log off;
    client_body_temp_path $tmp/$1-body;
    proxy_temp_path $tmp/$1-proxy;
    fastcgi_temp_path $tmp/$1-fastcgi;
    uwsgi_temp_path $tmp/$1-uwsgi;
    scgi_temp_path $tmp/$1-scgi;
    keepalive_requests 1000000;
EOF
}

# --- 1. Upstream: nginx returning 200 "ok\n" --------------------------------
mkdir -p "$tmp/upstream"
{
  nginx_head "$cores" upstream
  cat <<EOF
http {
$(nginx_http_common upstream)
    server {
        listen 127.0.0.1:$up_port;
        location / { return 200 "ok\n"; }
    }
}
EOF
} >"$tmp/upstream/nginx.conf"

# --- 2./3. nginx reverse proxy: pass server and reject server ----------------
# Both proxy to the upstream with a keepalive pool; both rate-limit by client
# address (all of wrk's connections share one key, like pressure's one
# resource per route). The pass server's rate and burst are never reached;
# the reject server admits 1 request per second and answers 429 otherwise.
mkdir -p "$tmp/proxy"
{
  nginx_head "$cores" proxy
  cat <<EOF
http {
$(nginx_http_common proxy)
    limit_req_zone \$binary_remote_addr zone=pass:1m rate=1000000r/s;
    limit_req_zone \$binary_remote_addr zone=reject:1m rate=1r/s;
    upstream up {
        server 127.0.0.1:$up_port;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$ngx_pass_port;
        location / {
            limit_req zone=pass burst=1000000 nodelay;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://up;
        }
    }
    server {
        listen 127.0.0.1:$ngx_rej_port;
        location / {
            limit_req zone=reject;
            limit_req_status 429;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://up;
        }
    }
}
EOF
} >"$tmp/proxy/nginx.conf"

# Checks a config and starts an nginx instance in the foreground of a
# background job (daemon off: $! is the master, TERM stops its workers).
start_nginx() {
  local name=$1 port=$2
  timeout 10 "$nginx_bin" -t -q -p "$tmp/$name" -c "$tmp/$name/nginx.conf" -g 'daemon off;' \
    2>"$tmp/$name-check.log" || die "nginx $name config invalid: $(cat "$tmp/$name-check.log")"
  "$nginx_bin" -p "$tmp/$name" -c "$tmp/$name/nginx.conf" -g 'daemon off;' \
    >"$tmp/$name.log" 2>&1 &
  pids+=("$!")
  wait_port "$port" "nginx $name"
}

log "starting nginx upstream on 127.0.0.1:$up_port and nginx proxy on :$ngx_pass_port (pass) / :$ngx_rej_port (reject), $cores workers each"
start_nginx upstream "$up_port"
up_pid=${pids[-1]}
start_nginx proxy "$ngx_pass_port"
wait_port "$ngx_rej_port" "nginx proxy (reject)"
ngx_proxy_pid=${pids[-1]}

# --- pressure gateway: one process for both paths ----------------------------
# "/" is the upstream's service with a limit never reached (1e12 per second,
# window algorithm); the longer prefix "/reject" is a route limited to 1 per
# second. Memory backend, no auth, loopback listeners.
cat >"$tmp/gateway.json" <<EOF
{
  "gateway": {
    "listen": "127.0.0.1:$gw_port",
    "upstreams": { "bench": { "url": "http://127.0.0.1:$up_port", "pathPrefix": "/" } },
    "backend": { "type": "memory" },
    "admin": { "listen": "127.0.0.1:$gw_admin_port" },
    "pressure": {
      "enabled": true,
      "perService": { "bench": { "requestsPerSecond": 1000000000000, "algorithm": "window" } },
      "perRoute": [
        { "resource": "gateway:route:reject", "pathPrefix": "/reject",
          "limits": { "requestsPerSecond": 1 } }
      ]
    }
  }
}
EOF
timeout 10 "$pressure_bin" check-config "$tmp/gateway.json" >/dev/null
log "starting pressure gateway on 127.0.0.1:$gw_port (admin :$gw_admin_port) ${BENCH_GATEWAY_ARGS:-}"
# Its denial log lines (info level, JSON) go to a file, as nginx's limit_req
# rejections go to its error log.
read -r -a gateway_args <<<"${BENCH_GATEWAY_ARGS:-}"
"$pressure_bin" gateway --config "$tmp/gateway.json" "${gateway_args[@]}" >"$tmp/gateway.log" 2>&1 &
pids+=("$!")
gw_pid=$!
wait_port "$gw_port" "pressure gateway"

# Sanity: each endpoint answers as expected before anything is measured.
probe() {
  local got
  got=$(timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf 'GET $2 HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n' >&3; head -n1 <&3" | tr -d '\r')
  [[ $got == *" $3"* ]] || die "GET 127.0.0.1:$1$2: expected $3, got '$got'"
}
probe "$up_port" / 200
probe "$ngx_pass_port" / 200
probe "$gw_port" / 200

# --- wrk runs ---------------------------------------------------------------
# run NAME URL [PROXY_PID]: an unmeasured warm-up, then the measured run;
# its output is kept in $tmp/wrk-NAME.out, and the CPU ticks the proxy
# (with its workers) and the upstream used during it in $tmp/cpu-NAME.
run() {
  local name=$1 url=$2 proxy=${3:-} p0 u0 p1 u1
  log "wrk $name: $url (${warmup}s warm-up, ${secs}s measured, -t$threads -c$conns)"
  timeout $((warmup + 20)) wrk -t"$threads" -c"$conns" -d"${warmup}s" "$url" >/dev/null
  p0=$([[ -n $proxy ]] && cpu_tree_ticks "$proxy" || echo 0 0)
  u0=$(cpu_tree_ticks "$up_pid")
  timeout $((secs + 30)) wrk -t"$threads" -c"$conns" -d"${secs}s" --latency "$url" >"$tmp/wrk-$name.out"
  p1=$([[ -n $proxy ]] && cpu_tree_ticks "$proxy" || echo 0 0)
  u1=$(cpu_tree_ticks "$up_pid")
  # proxy user, proxy system, upstream user, upstream system (ticks)
  echo "$p0 $u0 $p1 $u1" | awk '{ print $5 - $1, $6 - $2, $7 - $3, $8 - $4 }' >"$tmp/cpu-$name"
}
# CPU µs per request of a run, from the columns of $tmp/cpu-NAME named by
# $2..: 1 proxy user, 2 proxy system, 3 upstream user, 4 upstream system
# (several are summed).
cpu_us() {
  local name=$1
  shift
  awk -v n="$(total "$name")" -v tck="$(getconf CLK_TCK)" -v cols="$*" \
    '{ t = 0; k = split(cols, c, " "); for (i = 1; i <= k; i++) t += $c[i]
       if (n > 0) printf "%.1f", t * 1000000 / tck / n; else print "n/a" }' "$tmp/cpu-$name"
}
# Requests/s of a run.
rps() { awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$tmp/wrk-$1.out"; }
# 99th percentile latency of a run, in microseconds (wrk prints us/ms/s).
p99_us() {
  awk '$1 == "99%" {
    v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
    m = (u == "us") ? 1 : (u == "ms") ? 1000 : (u == "s") ? 1000000 : (u == "m") ? 60000000 : 1
    printf "%.0f", v * m }' "$tmp/wrk-$1.out"
}
# Non-2xx/3xx responses of a run (0 when wrk prints no such line).
non2xx() { awk '/Non-2xx or 3xx responses:/ { n = $NF } END { print n + 0 }' "$tmp/wrk-$1.out"; }
# Total requests of a run.
total() { awk '/requests in/ { print $1 }' "$tmp/wrk-$1.out"; }
# Socket errors of a run ("none" when wrk prints no such line).
errors() {
  awk '/Socket errors:/ { sub(/^ *Socket errors: */, ""); e = $0 } END { print (e == "" ? "none" : e) }' \
    "$tmp/wrk-$1.out"
}

run direct "http://127.0.0.1:$up_port/"
run nginx "http://127.0.0.1:$ngx_pass_port/" "$ngx_proxy_pid"
run pressure "http://127.0.0.1:$gw_port/" "$gw_pid"
run nginx-reject "http://127.0.0.1:$ngx_rej_port/reject" "$ngx_proxy_pid"
run pressure-reject "http://127.0.0.1:$gw_port/reject" "$gw_pid"

# Idle RSS after the runs: the gateway process, and the nginx proxy's master
# plus workers.
gw_rss=$(rss_tree_kib "$gw_pid")
ngx_rss=$(rss_tree_kib "$ngx_proxy_pid")

# --- Memory: 100,000 tenants ------------------------------------------------
kv() { awk -F= -v k="$1" '$1 == k { print $2 }' "$tmp/tenants.out"; }
if ((tenants > 0)); then
  log "tenants_rss: $tenants lazy tenant resources in the gateway's broker"
  timeout 120 target/release/examples/tenants_rss "$tenants" >"$tmp/tenants.out"
fi

# --- Report -----------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }
verdict() { # $1 ratio, $2 ">=" or "<=" 1.0
  awk -v r="$1" -v op="$2" 'BEGIN { ok = (op == ">=") ? (r >= 1.0) : (r <= 1.0); print (ok ? "ok" : "MISSED") }'
}

echo
echo "gateway-vs-nginx: wrk -t$threads -c$conns -d${secs}s --latency, $cores cores, $(nginx -v 2>&1 | sed 's/.*: //'), $(wrk -v 2>&1 | head -n1 | awk '{ print $1, $2 }')${BENCH_GATEWAY_ARGS:+, pressure gateway $BENCH_GATEWAY_ARGS}"
echo
printf '%-16s %12s %10s %12s %10s  %s\n' run "requests/s" "p99 ms" requests non-2xx "socket errors"
for name in direct nginx pressure nginx-reject pressure-reject; do
  printf '%-16s %12s %10s %12s %10s  %s\n' "$name" "$(rps "$name")" "$(ms "$(p99_us "$name")")" \
    "$(total "$name")" "$(non2xx "$name")" "$(errors "$name")"
done
echo
pass_rps=$(ratio "$(rps pressure)" "$(rps nginx)")
pass_p99=$(ratio "$(p99_us pressure)" "$(p99_us nginx)")
rej_rps=$(ratio "$(rps pressure-reject)" "$(rps nginx-reject)")
rej_p99=$(ratio "$(p99_us pressure-reject)" "$(p99_us nginx-reject)")
echo "CPU per request (µs, from /proc; 1 tick = $((1000000 / $(getconf CLK_TCK))) µs):"
printf '%-16s %12s %12s %12s %12s\n' run "proxy" "proxy user" "proxy sys" upstream
for name in direct nginx pressure nginx-reject pressure-reject; do
  printf '%-16s %12s %12s %12s %12s\n' "$name" "$(cpu_us "$name" 1 2)" "$(cpu_us "$name" 1)" \
    "$(cpu_us "$name" 2)" "$(cpu_us "$name" 3 4)"
done
echo
printf '%-22s %14s %8s %14s %8s\n' "pressure / nginx" "rps ratio" "(>=1.0)" "p99 ratio" "(<=1.0)"
printf '%-22s %14s %8s %14s %8s\n' "pass (never limited)" "$pass_rps" "$(verdict "$pass_rps" '>=')" \
  "$pass_p99" "$(verdict "$pass_p99" '<=')"
printf '%-22s %14s %8s %14s %8s\n' "reject (~all 429)" "$rej_rps" "$(verdict "$rej_rps" '>=')" \
  "$rej_p99" "$(verdict "$rej_p99" '<=')"
echo
if ((tenants > 0)); then
  echo "memory: $(kv tenants) tenants registered (evicted $(kv evicted)) in $(kv register_ms) ms:" \
    "RSS $(kv rss_before_kib) KiB -> $(kv rss_after_kib) KiB, delta $(kv rss_delta_kib) KiB" \
    "= $(kv bytes_per_tenant) bytes per tenant"
fi
echo "idle RSS after the runs: pressure gateway ${gw_rss} KiB; nginx proxy (master + $cores workers) ${ngx_rss} KiB"
machine_report after
