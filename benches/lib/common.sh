# Shared by the bench scripts (sourced, not run): loopback ports and the
# bounded stop of the processes a script started. The sourcing script
# defines `die MESSAGE` first.

# free_port VAR: sets VAR to a loopback TCP port nothing listens on and not
# handed out before (a global, not $(...), so the record of used ports
# survives). Ports are drawn below the kernel's ephemeral range, so no
# outgoing connection can hold one without listening on it.
used_ports=" "
ephemeral_low=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
((ephemeral_low > 12000)) || ephemeral_low=32768
free_port() {
  local port
  for _ in $(seq 200); do
    port=$((10000 + RANDOM % (ephemeral_low - 10000)))
    [[ $used_ports == *" $port "* ]] && continue
    # Connecting fails when nothing listens there.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      used_ports+="$port "
      printf -v "$1" '%s' "$port"
      return
    fi
  done
  die "no free port found"
}

# stop_pids PID...: TERM to each, then a bounded wait (KILL after 5 s).
stop_pids() {
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# machine_report WHEN: one line naming the machine a bench ran on and its
# load average at WHEN ("before" or "after"), so that a ratio printed beside
# it says where it was seen (issue 22: a ratio seen on one machine only is
# not a result). CPU model, cores, L2/L3 sizes from lscpu (or /proc/cpuinfo),
# the 1/5/15-minute load average from /proc/loadavg.
machine_report() {
  local model cores l2 l3 load
  model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
  [[ -n $model ]] || model=$(sed -n 's/^model name\t*: //p' /proc/cpuinfo 2>/dev/null | head -1)
  cores=$(nproc 2>/dev/null || echo '?')
  l2=$(lscpu 2>/dev/null | sed -n 's/^L2 cache: *//p' | head -1)
  l3=$(lscpu 2>/dev/null | sed -n 's/^L3 cache: *//p' | head -1)
  load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')
  echo "machine ($1): ${model:-unknown CPU}, $cores cores, L2 ${l2:-?}, L3 ${l3:-?}; load average $load"
}
