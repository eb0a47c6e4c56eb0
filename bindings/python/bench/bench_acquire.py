"""try_acquire + release per second, pressure against PyPI `limits`.

Both sides are asyncio and count a moving (sliding) window:

* pressure: ``await broker.try_acquire(r)`` + ``await a.release()``, memory
  backend and Redis backend;
* limits: ``await MovingWindowRateLimiter.hit(item, key)`` (limits has no
  permit to release) on ``async+memory://`` and ``async+redis://`` (redis-py)
  — the same Redis as pressure's;
* for reference, limits' synchronous ``MovingWindowRateLimiter`` on
  ``memory://`` (no event loop in the way).

Rounds are interleaved (every contender once per round, the order rotated),
and the report gives the median calls/s, µs per call and the ratio against
the peer on the same storage measured in the same run.

A second run puts ``--callers`` Redis acquisitions in flight at once (a
service under load), where pipelining counts more than one call's latency.

Then the exactness check: two contenders of each kind hammer a limit of N per
1 s window for a few seconds; the report gives the most grants that surely
fell in one window (see ``surely_inside``) against N, and the total.

Usage:
    pip install ./bindings/python -r bindings/python/bench/requirements.txt
    python bindings/python/bench/bench_acquire.py [--redis redis://127.0.0.1:6379]
        [--rounds 7] [--calls 20000] [--redis-calls 2000]
Without --redis it starts a redis-server of its own on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Awaitable, Callable, Dict, List, Optional, Tuple

import limits
import limits.aio.strategies
import limits.storage
import limits.strategies

import pressure

Op = Callable[[], Awaitable[bool]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis() -> Tuple[str, subprocess.Popen, str]:
    """A redis-server of the bench's own (no persistence) on a free port."""
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("needs redis-server on PATH (Debian/Ubuntu: apt-get install redis-server), or --redis URL")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="pressure-bench-redis-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return f"redis://127.0.0.1:{port}", proc, workdir
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not answer within 10 s")


async def contenders(redis_url: str, n: int) -> Dict[str, Op]:
    """One acquire(+release) operation per contender, on a limit of n per second."""
    key = uuid.uuid4().hex[:8]
    mem = pressure.ResourceBroker()
    red = await pressure.ResourceBroker.connect(redis_url, options={"timeoutMs": 1000})
    for b in (mem, red):
        b.register_limit(f"bench:{key}", {"requestsPerSecond": n})
    item = limits.RateLimitItemPerSecond(n)
    l_mem = limits.aio.strategies.MovingWindowRateLimiter(limits.storage.storage_from_string("async+memory://"))
    l_red = limits.aio.strategies.MovingWindowRateLimiter(
        limits.storage.storage_from_string(
            redis_url.replace("redis://", "async+redis://", 1), implementation="redispy"
        )
    )
    l_sync = limits.strategies.MovingWindowRateLimiter(limits.storage.storage_from_string("memory://"))

    def ours(broker: pressure.ResourceBroker) -> Op:
        resource = f"bench:{key}"

        async def op() -> bool:
            a = await broker.try_acquire(resource)
            await a.release()
            return a.allowed

        return op

    def theirs(limiter: limits.aio.strategies.MovingWindowRateLimiter) -> Op:
        async def op() -> bool:
            return await limiter.hit(item, "bench", key)

        return op

    async def sync_op() -> bool:
        return l_sync.hit(item, "bench", key)

    return {
        "pressure memory": ours(mem),
        "limits async+memory": theirs(l_mem),
        "limits memory (sync)": sync_op,
        "pressure redis": ours(red),
        "limits async+redis": theirs(l_red),
    }


async def timed(op: Op, calls: int) -> float:
    """Seconds for `calls` sequential operations."""
    t0 = time.perf_counter()
    for _ in range(calls):
        await op()
    return time.perf_counter() - t0


async def timed_concurrent(op: Op, calls: int, callers: int) -> float:
    """Seconds for `calls` operations made by `callers` tasks at once."""

    async def caller(k: int) -> None:
        for _ in range(k):
            await op()

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(calls // callers) for _ in range(callers)))
    return time.perf_counter() - t0


async def throughput_concurrent(redis_url: str, rounds: int, calls: int, callers: int) -> None:
    """The Redis contenders with `callers` acquisitions in flight at once
    (a service under load): pipelining and connection use, not latency."""
    ops = await contenders(redis_url, 10_000_000)
    names = ["pressure redis", "limits async+redis"]
    per_call: Dict[str, List[float]] = {n: [] for n in names}
    for name in names:
        await timed_concurrent(ops[name], 400, callers)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            k = calls - calls % callers
            per_call[name].append(await timed_concurrent(ops[name], k, callers) / k)
    med = {n: statistics.median(v) for n, v in per_call.items()}
    print(f"\n## Redis, {callers} callers at once, median of {rounds} interleaved rounds")
    print(f"{'contender':<24}{'calls/s':>12}{'µs/call':>10}  vs peer")
    print(
        f"{'pressure redis':<24}{1 / med['pressure redis']:>12,.0f}{med['pressure redis'] * 1e6:>10.2f}"
        f"  {med['limits async+redis'] / med['pressure redis']:.2f}x the calls/s of limits async+redis"
    )
    print(f"{'limits async+redis':<24}{1 / med['limits async+redis']:>12,.0f}{med['limits async+redis'] * 1e6:>10.2f}")


async def throughput(redis_url: str, rounds: int, calls: int, redis_calls: int) -> None:
    # A limit far above the rate reached, so every call is a grant (the
    # common case) and both sides do their whole counting work.
    ops = await contenders(redis_url, 10_000_000)
    names = list(ops)
    per_call: Dict[str, List[float]] = {n: [] for n in names}
    for name in names:  # warm-up: connections, scripts, caches
        await timed(ops[name], 200)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            k = redis_calls if "redis" in name else calls
            per_call[name].append(await timed(ops[name], k) / k)
    print(f"\n## try_acquire + release, sequential, median of {rounds} interleaved rounds")
    print(f"{'contender':<24}{'calls/s':>12}{'µs/call':>10}  vs peer")
    peers = {
        "pressure memory": "limits async+memory",
        "pressure redis": "limits async+redis",
    }
    med = {n: statistics.median(v) for n, v in per_call.items()}
    for name in names:
        line = f"{name:<24}{1 / med[name]:>12,.0f}{med[name] * 1e6:>10.2f}"
        if name in peers:
            line += f"  {med[peers[name]] / med[name]:.2f}x the calls/s of {peers[name]}"
        print(line)
    print(
        f"(pressure memory vs limits memory (sync): "
        f"{med['limits memory (sync)'] / med['pressure memory']:.2f}x)"
    )


def surely_inside(grants: List[Tuple[float, float]], width: float) -> int:
    """The most grants that certainly fell in one interval of `width`: a
    grant was decided between its send and answer times."""
    grants = sorted(grants)
    best = 0
    for s, _ in grants:
        inside = sum(1 for sent, answered in grants if sent >= s and answered <= s + width)
        best = max(best, inside)
    return best


async def exactness(redis_url: str, n: int, seconds: float) -> None:
    """Two callers per contender hammer a limit of n per 1 s window."""
    print(f"\n## exactness: limit {n} per 1 s, 2 callers each, {seconds:.1f} s of saturation")
    print(f"{'contender':<24}{'max in any 1 s':>16}{'N':>6}{'admitted':>10}{'per s':>8}")
    for name in ["pressure memory", "limits async+memory", "pressure redis", "limits async+redis"]:
        ops = await contenders(redis_url, n)
        op = ops[name]
        grants: List[Tuple[float, float]] = []
        end = time.monotonic() + seconds

        async def caller() -> None:
            while time.monotonic() < end:
                sent = time.monotonic()
                ok = await op()
                answered = time.monotonic()
                if ok:
                    grants.append((sent, answered))
                else:
                    await asyncio.sleep(0.001)

        await asyncio.gather(caller(), caller())
        worst = surely_inside(grants, 1.0)
        flag = "" if worst <= n else "  EXCEEDS N"
        print(f"{name:<24}{worst:>16}{n:>6}{len(grants):>10}{len(grants) / seconds:>8.1f}{flag}")


def machine_report(when: str) -> None:
    """One line naming the machine the bench ran on and how quiet it was, as
    the shell benches print it (benches/lib/common.sh): CPU model, cores,
    L2/L3 sizes (from lscpu where there is one) and the load average."""
    fields = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    model = fields.get("Model name", "unknown CPU")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine ({when}): {model}, {os.cpu_count()} cores, L2 {fields.get('L2 cache', '?')}, "
          f"L3 {fields.get('L3 cache', '?')}; load average {load}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redis", help="Redis URL (default: start a redis-server of our own)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20_000, help="calls per round, memory contenders")
    p.add_argument("--redis-calls", type=int, default=2_000, help="calls per round, Redis contenders")
    p.add_argument("--callers", type=int, default=32, help="tasks at once in the concurrent Redis run")
    p.add_argument("--exact-n", type=int, default=100)
    p.add_argument("--exact-seconds", type=float, default=3.0)
    args = p.parse_args()
    proc: Optional[subprocess.Popen] = None
    workdir = None
    url = args.redis
    if url is None:
        url, proc, workdir = start_redis()
    try:
        machine_report("before")
        print(f"python {sys.version.split()[0]}, limits {limits.__version__ if hasattr(limits, '__version__') else '?'}, "
              f"{os.cpu_count()} cpus, redis {url}")
        asyncio.run(throughput(url, args.rounds, args.calls, args.redis_calls))
        asyncio.run(throughput_concurrent(url, args.rounds, args.redis_calls * 2, args.callers))
        asyncio.run(exactness(url, args.exact_n, args.exact_seconds))
        machine_report("after")
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
