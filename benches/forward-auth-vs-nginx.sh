#!/usr/bin/env bash
# The cost of asking pressure from nginx: nginx + `auth_request` to the
# gateway's `/v1/forward-auth` versus nginx `limit_req` alone, side by side
# with wrk in the same run, against the same trivial upstream.
#
# 1. Upstream: a private nginx instance answering `return 200 "ok\n";`.
# 2. One nginx proxy with two servers, both proxying to the upstream with a
#    keepalive pool:
#      limit_req     limit_req rate=1e6r/s burst (never reached)
#      forward-auth  auth_request to pressure (keepalive pool to its decision
#                    listener), the 403 -> 429 recipe of docs/forward-auth.md
#    and the same pair on /reject: limit_req rate=1r/s (429) versus a
#    pressure route limited to 1 per second.
# 3. pressure gateway: perService requestsPerSecond 1e12 (never reached) on
#    "/", perRoute requestsPerSecond 1 on "/reject", decision listener on.
# 4. The runs alternate (limit_req, forward-auth, limit_req, forward-auth, ...)
#    BENCH_ROUNDS times, so both see the same machine; the table shows the
#    mean requests/s of each and the ratio forward-auth / limit_req.
#
# Usage:  benches/forward-auth-vs-nginx.sh
# Environment:
#   BENCH_SECS=5      duration of each measured wrk run
#   BENCH_ROUNDS=3    alternating rounds
#   BENCH_CONNS=64    wrk connections (-c)    BENCH_THREADS=2  wrk threads (-t)
#   PRESSURE_BIN=path benchmark this prebuilt `pressure` binary
#
# Needs wrk and nginx (Debian packages `wrk`, `nginx`). Everything listens on
# 127.0.0.1 only, every step has a timeout, every process started here is
# stopped on exit.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before

secs=${BENCH_SECS:-5}
rounds=${BENCH_ROUNDS:-3}
conns=${BENCH_CONNS:-64}
threads=${BENCH_THREADS:-2}
cores=$(nproc)

log() { echo "== $*" >&2; }
die() {
  echo "forward-auth-vs-nginx: $*" >&2
  exit 1
}

for tool in wrk nginx cargo awk; do
  command -v "$tool" >/dev/null || die "missing tool: $tool (apt-get install wrk nginx)"
done
nginx_bin=$(command -v nginx)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/forward-auth-vs-nginx.XXXXXX")
pids=()
cleanup() {
  stop_pids "${pids[@]}"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() {
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
      return
    fi
    sleep 0.1
  done
  die "$2 did not listen on 127.0.0.1:$1 within 10 s"$'\n'"$(tail -n 20 "$tmp"/*.log 2>/dev/null)"
}

if [[ -n ${PRESSURE_BIN:-} ]]; then
  pressure_bin=$PRESSURE_BIN
else
  log "building (cargo build --release -p pressure-cli)"
  timeout 1800 cargo build -q --release -p pressure-cli
  pressure_bin=target/release/pressure
fi
[[ -x $pressure_bin ]] || die "no $pressure_bin after the build"

up_port="" lr_port="" fa_port="" gw_port="" gw_admin_port="" dec_port=""
free_port up_port
free_port lr_port
free_port fa_port
free_port gw_port
free_port gw_admin_port
free_port dec_port

nginx_user=""
[[ $(id -u) == 0 ]] && nginx_user="user root;"
nginx_head() {
  cat <<EOF
$nginx_user
worker_processes $1;
pid $tmp/$2.pid;
error_log $tmp/$2.error.log error;
events { worker_connections 4096; }
EOF
}
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

mkdir -p "$tmp/upstream" "$tmp/proxy"
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

{
  nginx_head "$cores" proxy
  cat <<EOF
http {
$(nginx_http_common proxy)
    limit_req_zone \$binary_remote_addr zone=pass:1m rate=1000000r/s;
    limit_req_zone \$binary_remote_addr zone=reject:1m rate=1r/s;
    upstream up { server 127.0.0.1:$up_port; keepalive 64; }
    upstream pressure { server 127.0.0.1:$dec_port; keepalive 64; }
    server {
        listen 127.0.0.1:$lr_port;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location / { limit_req zone=pass burst=1000000 nodelay; proxy_pass http://up; }
        location /reject { limit_req zone=reject; limit_req_status 429; proxy_pass http://up; }
    }
    server {
        listen 127.0.0.1:$fa_port;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location / {
            auth_request /_pressure;
            auth_request_set \$pressure_retry_after \$upstream_http_retry_after;
            error_page 403 = @pressure_limited;
            proxy_pass http://up;
        }
        location = /_pressure {
            internal;
            proxy_pass http://pressure/v1/forward-auth;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header Connection "";
            proxy_set_header X-Original-Method \$request_method;
            proxy_set_header X-Original-URI \$request_uri;
            proxy_set_header X-Pressure-Deny-Status 403;
        }
        location @pressure_limited {
            add_header Retry-After \$pressure_retry_after always;
            return 429;
        }
    }
}
EOF
} >"$tmp/proxy/nginx.conf"

start_nginx() {
  local name=$1 port=$2
  timeout 10 "$nginx_bin" -t -q -p "$tmp/$name" -e "$tmp/$name.error.log" -c "$tmp/$name/nginx.conf" \
    -g 'daemon off;' 2>"$tmp/$name-check.log" || die "nginx $name config invalid: $(cat "$tmp/$name-check.log")"
  "$nginx_bin" -p "$tmp/$name" -e "$tmp/$name.error.log" -c "$tmp/$name/nginx.conf" -g 'daemon off;' \
    >"$tmp/$name.log" 2>&1 &
  pids+=("$!")
  wait_port "$port" "nginx $name"
}

cat >"$tmp/gateway.json" <<EOF
{
  "gateway": {
    "listen": "127.0.0.1:$gw_port",
    "upstreams": { "bench": { "url": "http://127.0.0.1:$up_port", "pathPrefix": "/" } },
    "admin": { "listen": "127.0.0.1:$gw_admin_port" },
    "decisions": { "listen": "127.0.0.1:$dec_port" },
    "pressure": {
      "perService": { "bench": { "requestsPerSecond": 1000000000000, "algorithm": "window" } },
      "perRoute": [
        { "resource": "gateway:route:reject", "pathPrefix": "/reject", "limits": { "requestsPerSecond": 1 } }
      ]
    }
  }
}
EOF
timeout 10 "$pressure_bin" check-config "$tmp/gateway.json" >/dev/null
log "starting nginx upstream :$up_port, nginx proxy :$lr_port (limit_req) / :$fa_port (auth_request), pressure :$dec_port"
start_nginx upstream "$up_port"
start_nginx proxy "$lr_port"
wait_port "$fa_port" "nginx proxy (forward auth)"
"$pressure_bin" gateway --config "$tmp/gateway.json" >"$tmp/gateway.log" 2>&1 &
pids+=("$!")
wait_port "$dec_port" "pressure decision listener"

probe() {
  local got
  got=$(timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf 'GET $2 HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n' >&3; head -n1 <&3" | tr -d '\r')
  [[ $got == *" $3"* ]] || die "GET 127.0.0.1:$1$2: expected $3, got '$got'"
}
probe "$lr_port" / 200
probe "$fa_port" / 200
probe "$fa_port" /reject 200
probe "$fa_port" /reject 429

# run NAME URL ROUND: the measured wrk run, kept in $tmp/wrk-NAME-ROUND.out.
run() {
  log "wrk $1 (round $3): $2 (${secs}s, -t$threads -c$conns)"
  timeout $((secs + 30)) wrk -t"$threads" -c"$conns" -d"${secs}s" "$2" >"$tmp/wrk-$1-$3.out"
}
rps_of() { awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$1"; }
mean_rps() { # NAME
  local sum=0 n=0 r f
  for f in "$tmp"/wrk-"$1"-*.out; do
    r=$(rps_of "$f")
    sum=$((sum + r))
    n=$((n + 1))
  done
  echo $((sum / n))
}

# Warm-up, unmeasured.
timeout 20 wrk -t"$threads" -c"$conns" -d2s "http://127.0.0.1:$lr_port/" >/dev/null
timeout 20 wrk -t"$threads" -c"$conns" -d2s "http://127.0.0.1:$fa_port/" >/dev/null
for round in $(seq "$rounds"); do
  run limit_req "http://127.0.0.1:$lr_port/" "$round"
  run forward-auth "http://127.0.0.1:$fa_port/" "$round"
  run limit_req-reject "http://127.0.0.1:$lr_port/reject" "$round"
  run forward-auth-reject "http://127.0.0.1:$fa_port/reject" "$round"
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo
echo "forward-auth-vs-nginx: wrk -t$threads -c$conns -d${secs}s x $rounds alternating rounds, $cores cores, $(nginx -v 2>&1 | sed 's/.*: //')"
echo
printf '%-22s %12s\n' run "requests/s (mean)"
for name in limit_req forward-auth limit_req-reject forward-auth-reject; do
  printf '%-22s %12s\n' "$name" "$(mean_rps "$name")"
done
echo
echo "forward-auth / limit_req, pass path:   $(ratio "$(mean_rps forward-auth)" "$(mean_rps limit_req)")"
echo "forward-auth / limit_req, reject path: $(ratio "$(mean_rps forward-auth-reject)" "$(mean_rps limit_req-reject)")"
machine_report after
