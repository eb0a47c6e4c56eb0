#!/usr/bin/env bash
# Added latency of the gateway's LLM path (`POST /v1/chat/completions`
# through the LLM pipeline) compared with calling the mock provider directly:
# p50 / p99 / p99.9 and throughput at 100 and 500 concurrent requests, with a
# provider think time of 0 ms and 20 ms, plus a serial (concurrency 1)
# baseline. Goal: p99 overhead under 1 ms.
#
# The work is done by crates/pressure-gateway/examples/llm_overhead.rs, in
# one process on three tokio runtimes: an in-process axum mock provider
# (1 thread), the real gateway built with `Gateway::build` and served with
# `Gateway::serve` (memory backend, model limits never reached; 2 threads),
# and the load generator (hyper-util pooled keep-alive client, 2 threads,
# hdrhistogram per request). Everything listens on 127.0.0.1:0, the run is
# bounded by `timeout`, and the process owns every socket, so nothing
# outlives it. Client, gateway and mock share the box's cores: on a small
# machine the gateway rows include CPU contention with the load generator.
#
# Usage:  benches/llm-overhead.sh
# Environment:
#   BENCH_REQUESTS=20000   measured requests per run
#   BENCH_WARMUP=2000      unmeasured warm-up requests before each run
#   BENCH_CONCURRENCY=100,500
#   BENCH_THINK_MS=0,20    mock provider think times
#   BENCH_BASELINE=5000    serial baseline requests (0: skip)
#   BENCH_GATEWAY_THREADS=2
#   BENCH_TIMEOUT=110      seconds allowed for the run (after the build)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before

echo "== building (release): pressure-gateway example llm_overhead" >&2
cargo build --release --quiet -p pressure-gateway --example llm_overhead

bin=target/release/examples/llm_overhead
[[ -x $bin ]] || {
  echo "llm-overhead: $bin was not built" >&2
  exit 1
}

echo "== running on $(nproc) cores ($(uname -m)); bounded to ${BENCH_TIMEOUT:-110}s" >&2
timeout --kill-after=5 "${BENCH_TIMEOUT:-110}" "$bin" \
  --requests "${BENCH_REQUESTS:-20000}" \
  --warmup "${BENCH_WARMUP:-2000}" \
  --concurrency "${BENCH_CONCURRENCY:-100,500}" \
  --think-ms "${BENCH_THINK_MS:-0,20}" \
  --baseline "${BENCH_BASELINE:-5000}" \
  --gateway-threads "${BENCH_GATEWAY_THREADS:-2}"
machine_report after
