#!/usr/bin/env bash
# A local 3-master Redis Cluster on loopback, on fixed ports, to try the
# gateway or the benches against a cluster by hand. The tests do not need
# it: they start their own on free ports (crates/pressure-testkit).
#
#   scripts/redis-cluster.sh start    # idempotent: no-op when already up
#   scripts/redis-cluster.sh stop     # shut the nodes down, remove their dirs
#   scripts/redis-cluster.sh status   # exit 0 when the cluster is up and ok
#
# Ports: PRESSURE_CLUSTER_PORTS (default "7101 7102 7103"), on 127.0.0.1 only.
# Node dirs (nodes.conf, pid and log files): ${TMPDIR:-/tmp}/pressure-cluster/<port>.
set -euo pipefail

HOST=127.0.0.1
read -r -a PORTS <<<"${PRESSURE_CLUSTER_PORTS:-7101 7102 7103}"
BASE="${TMPDIR:-/tmp}/pressure-cluster"
WAIT_SECS=10

log() { echo "redis-cluster: $*" >&2; }
die() {
  log "$*"
  exit 1
}

cli() {
  local port=$1
  shift
  redis-cli -h "$HOST" -p "$port" "$@"
}

# Whether something answers PING on the port.
answers() { [[ "$(cli "$1" ping 2>/dev/null)" == PONG ]]; }

# Whether the node on the port is cluster-enabled.
cluster_enabled() { cli "$1" info cluster 2>/dev/null | tr -d '\r' | grep -qx 'cluster_enabled:1'; }

# Whether every node reports cluster_state:ok, all slots assigned and knows
# exactly the configured nodes.
cluster_ok() {
  local port info
  for port in "${PORTS[@]}"; do
    info=$(cli "$port" cluster info 2>/dev/null | tr -d '\r') || return 1
    grep -qx 'cluster_state:ok' <<<"$info" || return 1
    grep -qx 'cluster_slots_assigned:16384' <<<"$info" || return 1
    grep -qx "cluster_known_nodes:${#PORTS[@]}" <<<"$info" || return 1
  done
}

# Stops the node on the port (if any) and removes its dir.
stop_node() {
  local port=$1 dir="$BASE/$1" i
  if answers "$port"; then
    if ! cluster_enabled "$port"; then
      die "127.0.0.1:$port answers but is not a cluster node; not touching it"
    fi
    cli "$port" shutdown nosave >/dev/null 2>&1 || true
    for ((i = 0; i < WAIT_SECS * 10; i++)); do
      answers "$port" || break
      sleep 0.1
    done
    if answers "$port"; then die "127.0.0.1:$port did not shut down"; fi
  fi
  rm -rf -- "$dir"
}

start_node() {
  local port=$1 dir="$BASE/$1"
  mkdir -p -- "$dir"
  redis-server \
    --bind "$HOST" --port "$port" \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
    --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
    --save "" --appendonly no --daemonize yes >/dev/null ||
    die "redis-server on $port did not start (see $dir/redis.log)"
}

wait_for() {
  local i
  for ((i = 0; i < WAIT_SECS * 10; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

all_answer() {
  local port
  for port in "${PORTS[@]}"; do answers "$port" || return 1; done
}

start() {
  command -v redis-server >/dev/null || die "redis-server not found"
  command -v redis-cli >/dev/null || die "redis-cli not found"
  if cluster_ok; then
    log "already up on ${PORTS[*]}"
    return 0
  fi
  local port nodes=()
  # Stale nodes or nodes.conf from an earlier run: start from scratch.
  for port in "${PORTS[@]}"; do stop_node "$port"; done
  for port in "${PORTS[@]}"; do
    start_node "$port"
    nodes+=("$HOST:$port")
  done
  wait_for all_answer || die "the nodes did not come up within ${WAIT_SECS}s"
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null ||
    die "redis-cli --cluster create failed"
  wait_for cluster_ok || die "the cluster did not reach cluster_state:ok within ${WAIT_SECS}s"
  log "up on ${PORTS[*]}"
}

stop() {
  local port
  for port in "${PORTS[@]}"; do stop_node "$port"; done
  rmdir -- "$BASE" 2>/dev/null || true
  log "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) cluster_ok ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
