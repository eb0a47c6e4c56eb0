#!/usr/bin/env bash
# Our RedisBackend versus redis-benchmark, side by side, against one local Redis.
#
# 1. Runs the bench binary crates/pressure-redis/benches/redis_acquire.rs
#    (`cargo bench -p pressure-redis --bench redis_acquire`): ONE process,
#    64 tokio tasks calling ResourceBroker::try_acquire on one resource, limits
#    never reached; throughput, p50/p99 latency and the server time per call
#    (INFO commandstats after CONFIG RESETSTAT) for each case.
# 2. Replays, with redis-benchmark (64 clients, pipelined -P 16 and not
#    pipelined -P 1), EXACTLY the EVALSHA our backend sent for the same case
#    (captured by the bench with MONITOR), same request count, and reads the
#    server time per call the same way.
# 3. Prints the table: throughput ours / redis-benchmark, and the server time
#    per acquisition of each case against a bare one-key GCRA script.
#
# The backend sends, per limit shape, a script generated for it
# (crates/pressure-redis/src/shape.rs); the *-generic cases send the same
# acquisitions with the generic lua/acquire.lua (what it sent before), so one
# run gives the before/after of the generated scripts.
#
# Usage:
#   benches/redis-vs-redis-benchmark.sh               # Redis at 127.0.0.1:6379
#   benches/redis-vs-redis-benchmark.sh --own-redis   # starts a private redis-server
#                                                     # on 127.0.0.1:${BENCH_REDIS_PORT:-6399}
#   ... --callgrind     # also (d): instructions per EVALSHA of every case, from a
#                       # second private redis-server under valgrind --tool=callgrind
#                       # on 127.0.0.1:${BENCH_CALLGRIND_PORT:-6398} (numbers that do
#                       # not move with the machine's load; needs valgrind)
# Environment:
#   PRESSURE_REDIS_URL  redis://127.0.0.1:6379 (host must be 127.0.0.1 or localhost)
#   BENCH_SECS=10 (window1, dim3)  BENCH_AUX_SECS=5 (other cases)  BENCH_TASKS=64
#   RB_PIPELINE=16      pipeline depth of the pipelined redis-benchmark runs
#   BENCH_ROUNDS=5 BENCH_ROUND_REQUESTS=100000
#                       (c): interleaved rounds of redis-benchmark replays of every
#                       case (bare GCRA first in each round), medians per case and
#                       the median of the per-round ratios to the bare GCRA: on a
#                       shared machine the mean of one long run moves with the load,
#                       round-paired ratios much less
#
# Side effects on that Redis: CONFIG RESETSTAT (server statistics are reset),
# SCRIPT LOAD of a few scripts, keys with the hash tags {rbench.*}, deleted at the
# end. Only 127.0.0.1 is contacted; every step has a timeout.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before

own_redis=0
callgrind=0
for arg in "$@"; do
  case "$arg" in
    --own-redis) own_redis=1 ;;
    --callgrind) callgrind=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 64 ;;
  esac
done

for tool in redis-cli redis-benchmark cargo awk; do
  command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 69; }
done

tmp=$(mktemp -d)
server_pid=""
cg_pid=""
keys_to_delete=()
cleanup() {
  if [[ ${#keys_to_delete[@]} -gt 0 ]] && [[ -n "${RHOST:-}" ]]; then
    timeout 5 redis-cli -h "$RHOST" -p "$RPORT" DEL "${keys_to_delete[@]}" >/dev/null 2>&1 || true
  fi
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [[ -n "$cg_pid" ]]; then
    kill "$cg_pid" 2>/dev/null || true
    wait "$cg_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if [[ $own_redis == 1 ]]; then
  command -v redis-server >/dev/null || { echo "missing tool: redis-server" >&2; exit 69; }
  port=${BENCH_REDIS_PORT:-6399}
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
    --protected-mode yes --daemonize no --logfile "$tmp/redis.log" &
  server_pid=$!
  for _ in $(seq 50); do
    redis-cli -h 127.0.0.1 -p "$port" PING >/dev/null 2>&1 && break
    sleep 0.1
  done
  export PRESSURE_REDIS_URL="redis://127.0.0.1:$port"
fi

url=${PRESSURE_REDIS_URL:-redis://127.0.0.1:6379}
export PRESSURE_REDIS_URL="$url"
hostport=${url#redis://}
hostport=${hostport%%/*}
if [[ "$hostport" == *@* ]]; then
  echo "PRESSURE_REDIS_URL with credentials is not supported by this script" >&2
  exit 64
fi
RHOST=${hostport%%:*}
RPORT=${hostport##*:}
[[ "$RPORT" == "$hostport" ]] && RPORT=6379
case "$RHOST" in
  127.0.0.1|localhost) RHOST=127.0.0.1 ;;
  *) echo "refusing to talk to $RHOST: only 127.0.0.1 is allowed" >&2; exit 64 ;;
esac
rcli() { timeout 10 redis-cli -h "$RHOST" -p "$RPORT" "$@"; }
if [[ "$(rcli PING 2>/dev/null)" != "PONG" ]]; then
  echo "no Redis at $RHOST:$RPORT (start one, or use --own-redis)" >&2
  exit 69
fi
pipeline=${RB_PIPELINE:-16}
tasks=${BENCH_TASKS:-64}

echo "== building the bench (cargo bench --no-run)"
timeout 600 cargo bench -q -p pressure-redis --bench redis_acquire --no-run

mkdir -p "$tmp/scripts"
export BENCH_SCRIPT_DIR="$tmp/scripts"
echo "== our side: cargo bench -p pressure-redis --bench redis_acquire (Redis $RHOST:$RPORT, $tasks tasks)"
timeout 300 cargo bench -q -p pressure-redis --bench redis_acquire | tee "$tmp/ours.out"

# Value of key=value field $2 in the RESULT line of case $1.
field() {
  awk -v c="case=$1" -v k="$2=" '$1 == "RESULT" && $2 == c {
    for (i = 3; i <= NF; i++) if (index($i, k) == 1) { print substr($i, length(k) + 1); exit } }' "$tmp/ours.out"
}
# The captured command of case $1 (EVALSHA sha numkeys keys.. args..).
cmd_of() {
  awk -v c="case=$1" '$1 == "CMD" && $2 == c { for (i = 3; i <= NF; i++) printf "%s%s", $i, (i < NF ? " " : "\n") }' \
    "$tmp/ours.out"
}

grep -q '^ARGCHECK .* ok=false' "$tmp/ours.out" && echo "WARNING: captured EVALSHA args differ from the expected ones (see ARGCHECK)" >&2

# The SHA the backend uses must be the file's, byte for byte (redis-cli -x keeps
# the trailing newline; "$(cat file)" would drop it and load another SHA).
file_sha=$(rcli -x SCRIPT LOAD < crates/pressure-redis/lua/acquire.lua)
read -r -a w1 <<< "$(cmd_of window1-generic)"
if [[ -n "${w1[1]:-}" && "${w1[1]}" != "$file_sha" ]]; then
  echo "acquire.lua SHA mismatch: the generic cases sent ${w1[1]}, file is $file_sha" >&2
  exit 1
fi
read -r -a w1 <<< "$(cmd_of window1)"
if [[ "${w1[1]:-}" == "$file_sha" ]]; then
  echo "note: window1 used the generic acquire.lua (no script generated for its shape)" >&2
fi

# redis-benchmark run: $1 label, $2 case, $3 pipeline, $4 requests.
# Appends "label case P rps p50_ms p99_ms evalsha_usec_per_call calls failed" to rb.tsv.
rb() {
  local label=$1 case=$2 p=$3 n=$4 cmd csv stats
  read -r -a cmd <<< "$(cmd_of "$case")"
  [[ ${#cmd[@]} -gt 0 ]] || return 0
  for ((i = 3; i < 3 + cmd[2]; i++)); do keys_to_delete+=("${cmd[i]}"); done
  rcli CONFIG RESETSTAT >/dev/null
  csv=$(timeout 90 redis-benchmark -h "$RHOST" -p "$RPORT" -c "$tasks" -P "$p" -n "$n" --csv "${cmd[@]}")
  stats=$(rcli INFO commandstats | tr -d '\r' | grep '^cmdstat_evalsha:' || true)
  echo "$csv" | tail -n 1 | awk -F'","' -v label="$label" -v c="$case" -v p="$p" -v st="$stats" '{
      gsub(/"/, "", $NF)
      # cmdstat_evalsha:calls=N,usec=N,usec_per_call=F,rejected_calls=N,failed_calls=N
      calls = 0; usec = 0; failed = 0
      m = split(st, kv, /[:,=]/)
      for (i = 2; i < m; i += 2) {
        if (kv[i] == "calls") calls = kv[i + 1]
        else if (kv[i] == "usec") usec = kv[i + 1]
        else if (kv[i] == "failed_calls") failed = kv[i + 1]
      }
      upc = (calls > 0) ? usec / calls : 0
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%s\t%s\n", label, c, p, $2, $5, $7, upc, calls, failed
    }' >> "$tmp/rb.tsv"
  echo "   $label $case -P $p -n $n: $(tail -n 1 "$tmp/rb.tsv" | cut -f4) req/s"
}

echo "== redis-benchmark replaying the same EVALSHA ($tasks clients, same request count)"
: > "$tmp/rb.tsv"
for c in window1 window1-generic gcra1 gcra1-generic dim3 dim3-generic gcra-bare; do
  n=$(field "$c" granted)
  [[ -n "$n" && "$n" -gt 0 ]] || continue
  rb "rb-P$pipeline" "$c" "$pipeline" "$n"
  if [[ $c == window1 || $c == dim3 || $c == dim3-generic ]]; then
    rb "rb-P1" "$c" 1 "$n"
  fi
done
for c in window1 gcra1 dim3 window1-raw gcra-bare window1-generic gcra1-generic dim3-generic; do
  read -r -a cmd <<< "$(cmd_of "$c")"
  for ((i = 3; i < 3 + ${cmd[2]:-0}; i++)); do keys_to_delete+=("${cmd[i]}"); done
done

rounds=${BENCH_ROUNDS:-5}
round_n=${BENCH_ROUND_REQUESTS:-100000}
echo "== interleaved: $rounds rounds of redis-benchmark -P $pipeline -n $round_n per case"
for ((r = 1; r <= rounds; r++)); do
  for c in gcra-bare dim3 dim3-generic window1 window1-generic gcra1 gcra1-generic; do
    [[ -n "$(cmd_of "$c")" ]] || continue
    rb "round$r" "$c" "$pipeline" "$round_n" >/dev/null
  done
done

# The table.
rbv() { awk -F'\t' -v l="$1" -v c="$2" -v col="$3" '$1 == l && $2 == c { print $col; exit }' "$tmp/rb.tsv"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b + 0 > 0) printf "%.2f", a / b; else printf "-" }'; }
ms() { awk -v u="$1" 'BEGIN { if (u == "") printf "-"; else printf "%.3f", u / 1000 }'; }

echo
echo "== (a) throughput: one process of ours ($tasks tasks) vs redis-benchmark ($tasks clients), same EVALSHA"
printf '%-12s %-26s %12s %9s %9s %14s %12s %12s\n' case driver "acq/s" "p50 ms" "p99 ms" "evalsha us/call" "ours/rb-P$pipeline" "ours/rb-P1"
for c in window1 window1-generic window1-raw gcra1 gcra1-generic dim3 dim3-generic gcra-bare; do
  ops=$(field "$c" ops_per_sec)
  [[ -n "$ops" ]] || continue
  driver=$(field "$c" driver)
  base=${c%-raw}
  rbp=$(rbv "rb-P$pipeline" "$base" 4)
  rb1=$(rbv rb-P1 "$base" 4)
  printf '%-12s %-26s %12s %9s %9s %14s %12s %12s\n' "$c" "ours ($driver)" "$ops" \
    "$(ms "$(field "$c" p50_us)")" "$(ms "$(field "$c" p99_us)")" "$(field "$c" evalsha_usec_per_call)" \
    "$(ratio "$ops" "$rbp")" "$(ratio "$ops" "$rb1")"
  [[ $c == *-raw ]] && continue
  for label in "rb-P$pipeline" rb-P1; do
    rps=$(rbv "$label" "$c" 4)
    [[ -n "$rps" ]] || continue
    printf '%-12s %-26s %12.0f %9s %9s %14s %12s %12s\n' "$c" "redis-benchmark -P ${label#rb-P}" "$rps" \
      "$(rbv "$label" "$c" 5)" "$(rbv "$label" "$c" 6)" "$(rbv "$label" "$c" 7)" "" ""
  done
done

echo
echo "== (b) server time per acquisition (INFO commandstats after CONFIG RESETSTAT)"
bare=$(field gcra-bare evalsha_usec_per_call)
bare_rb=$(rbv "rb-P$pipeline" gcra-bare 7)
printf '%-16s %-62s %13s %13s %14s %14s\n' case what "ours us/call" "rb us/call" "ours/bare" "rb/bare(rb)"
for c in window1 window1-generic gcra1 gcra1-generic dim3 dim3-generic gcra-bare; do
  v=$(field "$c" evalsha_usec_per_call)
  [[ -n "$v" ]] || continue
  case $c in
    window1) what="window, requestsPerMinute (1 dim), generated script" ;;
    gcra1) what="gcra, requestsPerSecond (1 dim), generated script" ;;
    dim3) what="window, rpm + tpm + maxConcurrentRequests, generated (ours: acquire/release mix)" ;;
    *-generic) what="  the same acquisition with the generic acquire.lua (before)" ;;
    gcra-bare) what="bare one-key GCRA (GET, TIME, SET PX)" ;;
  esac
  r=$(rbv "rb-P$pipeline" "$c" 7)
  printf '%-16s %-62s %13s %13s %14s %14s\n' "$c" "$what" "$v" "${r:--}" "$(ratio "$v" "$bare")" "$(ratio "$r" "$bare_rb")"
  if [[ $c == dim3 ]]; then
    acq=$(field dim3 server_usec_per_acq)
    printf '%-16s %-62s %13s %13s %14s %14s\n' "dim3" "  ours per acquisition, acquire + release EVALSHAs" \
      "$acq" "-" "$(ratio "$acq" "$bare")" "-"
  fi
done
echo
# Our dim3 run releases every lease (a second, cheap EVALSHA), so its
# per-call average mixes both; redis-benchmark replays the acquisition alone.
d3=$(rbv "rb-P$pipeline" dim3 7)
d3g=$(rbv "rb-P$pipeline" dim3-generic 7)
echo "3-dimension acquisition / bare GCRA, server time per call (redis-benchmark replay): $(ratio "$d3" "$bare_rb")x (goal <= 2x)"
echo "  the same with the generic acquire.lua (before): $(ratio "$d3g" "$bare_rb")x"
echo "3-dimension acquisition + its release / bare GCRA: $(ratio "$(field dim3 server_usec_per_acq)" "$bare")x"

echo
echo "== (c) server time per call, $rounds interleaved rounds (redis-benchmark -P $pipeline, INFO commandstats)"
printf '%-16s %10s %10s %10s %22s\n' case "median us" "min us" "max us" "median of round ratios"
for c in dim3 dim3-generic window1 window1-generic gcra1 gcra1-generic gcra-bare; do
  awk -F'\t' -v c="$c" '
    $1 ~ /^round/ { v[$1, $2] = $7; rounds[$1] = 1 }
    function median(a, n,   i, j, t) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
      n = 0; m = 0
      for (r in rounds) {
        if ((r, c) in v) { x[++n] = v[r, c] + 0 }
        if ((r, c) in v && (r, "gcra-bare") in v && v[r, "gcra-bare"] > 0) { q[++m] = v[r, c] / v[r, "gcra-bare"] }
      }
      if (n == 0) exit
      med = median(x, n)
      printf "%-16s %10.3f %10.3f %10.3f %21.2fx\n", c, med, x[1], x[n], (m ? median(q, m) : 0)
    }' "$tmp/rb.tsv"
done
echo "(goal for dim3: <= 2x the bare GCRA)"
awk -F'\t' '$9 != "" && $9 != "0" { print "WARNING: " $9 " failed EVALSHA calls in redis-benchmark run " $1 " " $2 }' "$tmp/rb.tsv" >&2
if [[ $callgrind == 1 ]]; then
  for tool in valgrind callgrind_control callgrind_annotate redis-server; do
    command -v "$tool" >/dev/null || { echo "missing tool for --callgrind: $tool" >&2; exit 69; }
  done
  cport=${BENCH_CALLGRIND_PORT:-6398}
  cg_n=${BENCH_CALLGRIND_CALLS:-2000}
  echo
  echo "== (d) instructions per EVALSHA (redis-server under callgrind, 127.0.0.1:$cport, $cg_n calls, one client)"
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" redis-server --bind 127.0.0.1 --port "$cport" \
    --save '' --appendonly no --protected-mode yes --daemonize no --logfile "$tmp/redis-cg.log" \
    >"$tmp/valgrind.log" 2>&1 &
  cg_pid=$!
  for _ in $(seq 150); do
    timeout 5 redis-cli -h 127.0.0.1 -p "$cport" PING >/dev/null 2>&1 && break
    sleep 0.2
  done
  ccli() { timeout 60 redis-cli -h 127.0.0.1 -p "$cport" "$@"; }
  for f in "$tmp"/scripts/*.lua; do ccli -x SCRIPT LOAD < "$f" >/dev/null; done
  printf '%-16s %14s %12s\n' case "instr/call" "vs bare"
  : > "$tmp/cg.tsv"
  for c in gcra-bare dim3 dim3-generic window1 window1-generic gcra1 gcra1-generic; do
    read -r -a cmd <<< "$(cmd_of "$c")"
    [[ ${#cmd[@]} -gt 0 ]] || continue
    for ((i = 3; i < 3 + cmd[2]; i++)); do ccli DEL "${cmd[i]}" >/dev/null; done
    timeout 120 redis-benchmark -h 127.0.0.1 -p "$cport" -c 1 -n 200 -q "${cmd[@]}" >/dev/null
    callgrind_control -z "$cg_pid" >/dev/null 2>&1
    timeout 300 redis-benchmark -h 127.0.0.1 -p "$cport" -c 1 -n "$cg_n" -q "${cmd[@]}" >/dev/null
    rm -f "$tmp"/cg.out.*
    callgrind_control -d "$cg_pid" >/dev/null 2>&1
    dump=""
    for _ in $(seq 50); do
      dump=$(ls -t "$tmp"/cg.out.* 2>/dev/null | head -n 1 || true)
      [[ -n "$dump" ]] && break
      sleep 0.1
    done
    sleep 0.3
    ir=$(callgrind_annotate --inclusive=yes "$dump" 2>/dev/null | awk '/:evalShaCommand / && !done { gsub(",", "", $1); print $1; done = 1 }' || true)
    per=$(( ${ir:-0} / cg_n ))
    printf '%s\t%s\n' "$c" "$per" >> "$tmp/cg.tsv"
    bare_ir=$(awk -F'\t' '$1 == "gcra-bare" { print $2 }' "$tmp/cg.tsv")
    printf '%-16s %14s %12s\n' "$c" "$per" "$(ratio "$per" "$bare_ir")"
  done
  kill "$cg_pid" 2>/dev/null || true
  wait "$cg_pid" 2>/dev/null || true
  cg_pid=""
fi

echo
echo "raw lines: RESULT/CMDSTATS from the bench above; redis-benchmark: label case P rps p50_ms p99_ms usec_per_call calls failed"
cat "$tmp/rb.tsv"
machine_report after
