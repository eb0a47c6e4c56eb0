#!/usr/bin/env bash
# Instructions per check of pressure-core's hot path next to governor,
# counted by valgrind's callgrind. Unlike nanoseconds, instruction counts do
# not move with the machine's speed or with what else runs on it, so they
# are the numbers to compare between commits.
#
# The bench binary crates/pressure-core/benches/instructions.rs runs one
# case N times inside its function `measured` (after a warm-up elsewhere);
# callgrind counts only inside that function (--collect-atstart=no
# --toggle-collect). Each case runs with N = CG_N and N = 2·CG_N, and the
# figure is (instr(2N) − instr(N)) / N: one check, with every fixed cost
# (setup, first-use allocations, the loop's entry) cancelled out.
#
# Caveat: callgrind counts a locked read-modify-write (`lock xadd`,
# `lock cmpxchg`) as one instruction like any other, though it costs ~20
# cycles uncontended; the nanosecond figures of `cargo bench-core` show that
# cost, these do not.
#
# Usage:  benches/callgrind-core.sh [case ...]     (default: every case)
# Environment:
#   CG_N=100000      the smaller N
#   CG_BIN=path      a prebuilt bench binary (default: cargo bench --no-run)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before

n=${CG_N:-100000}
n2=$((2 * n))

die() {
  echo "callgrind-core: $*" >&2
  exit 1
}
for tool in valgrind python3 awk; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done

if [[ -n ${CG_BIN:-} ]]; then
  bin=$CG_BIN
else
  echo "== building (cargo bench -p pressure-core --bench instructions --no-run)" >&2
  bin=$(timeout 1800 cargo bench -q -p pressure-core --bench instructions --no-run --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "instructions":
        print(m["executable"])')
fi
[[ -x $bin ]] || die "no bench binary ($bin)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/callgrind-core.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# instr CASE N: instructions counted inside `measured`.
instr() {
  local out="$tmp/cg.$1.$2"
  timeout 600 valgrind --tool=callgrind --callgrind-out-file="$out" \
    --collect-atstart=no --toggle-collect='*instructions::measured*' \
    "$bin" "$1" "$2" >"$tmp/log" 2>&1 || die "$1 $2 failed: $(tail -n 20 "$tmp/log")"
  awk '/^(summary|totals):/ { t = $2 } END { print t + 0 }' "$out"
}

# per_check CASE: (instr(2N) − instr(N)) / N, one decimal.
per_check() {
  local a b
  a=$(instr "$1" "$n")
  b=$(instr "$1" "$n2")
  [[ $a -gt 0 ]] || die "$1: nothing counted (was \`measured\` inlined?)"
  awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / n }'
}

if [[ $# -gt 0 ]]; then
  cases=("$@")
else
  mapfile -t cases < <("$bin" --list | cut -f1)
fi

declare -A ipc
for c in "${cases[@]}"; do
  ipc[$c]=$(per_check "$c")
  echo "== $c: ${ipc[$c]}" >&2
done

# The governor cases each row is compared with (the issue's one-key
# reference; for three dimensions also governor's parts for them).
references() {
  case $1 in
    governor_*) echo "" ;;
    denied_*) echo governor_direct_denied ;;
    *_1000) echo governor_keyed ;;
    multi_*) echo governor_direct governor_three ;;
    *) echo governor_direct ;;
  esac
}
ref_ipc() { # CASE: governor's figure, measured now if not yet
  local r=$1
  if [[ -z ${ipc[$r]:-} ]]; then ipc[$r]=$(per_check "$r"); fi
  echo "${ipc[$r]}"
}

echo
echo "instructions per check (callgrind; (instr($n2) − instr($n)) / $n)"
echo
echo "| case | pressure | governor | ratio |"
echo "|---|---:|---:|---:|"
for c in "${cases[@]}"; do
  refs=$(references "$c")
  if [[ -z $refs ]]; then
    echo "| $c | – | ${ipc[$c]} | – |"
    continue
  fi
  for r in $refs; do
    g=$(ref_ipc "$r")
    echo "| $c | ${ipc[$c]} | $g ($r) | $(awk -v a="${ipc[$c]}" -v b="$g" 'BEGIN { printf "%.2f", a / b }')× |"
  done
done
machine_report after
