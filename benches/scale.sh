#!/usr/bin/env bash
# Scale on Redis Cluster (issue 24; the numbers and the arithmetic to a
# million decisions a second are in docs/scale.md): 4 broker instances as
# separate OS processes against clusters of 1, 2 and 3 masters, on 10 000
# tenants and on one hot key (limit never reached, and saturated), quota
# leasing off and on. Per case: decisions/s (sum of the processes), store
# operations per decision (script calls from INFO commandstats of every
# master), bytes per store call, p50/p99 latency of a decision, and on the
# saturated hot key the admissions over N in any window of 1 s.
#
# The work is done by crates/pressure-redis/benches/redis_scale.rs, which
# starts the clusters itself on free loopback ports (pressure-testkit: gone
# when it ends) and re-executes itself as the worker processes (each with a
# hard deadline). Every process and every shard share this machine's cores:
# on a small machine the shard scaling is bounded by the CPU, not the design.
#
# Usage:  benches/scale.sh
# Environment (see the bench's header): BENCH_SECS=3 BENCH_PROCS=4
#   BENCH_TASKS=8 BENCH_THREADS=1 BENCH_KEYS=10000 BENCH_N=2000
#   BENCH_SHARE_PPM=100000 BENCH_TTL_MS=50 BENCH_SHARDS=1,2,3
#   BENCH_TIMEOUT=300      seconds allowed for the run (after the build)
set -euo pipefail

cd "$(dirname "$0")/.."
die() {
  echo "scale: $*" >&2
  exit 1
}
# shellcheck source=benches/lib/common.sh
source benches/lib/common.sh
machine_report before

for tool in redis-server redis-cli cargo; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done

echo "== building (bench profile): pressure-redis bench redis_scale" >&2
cargo bench --quiet -p pressure-redis --bench redis_scale --no-run

echo "== running on $(nproc) cores ($(uname -m)); bounded to ${BENCH_TIMEOUT:-300}s" >&2
timeout --kill-after=10 "${BENCH_TIMEOUT:-300}" \
  cargo bench --quiet -p pressure-redis --bench redis_scale
machine_report after
