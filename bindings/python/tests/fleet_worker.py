"""One process of the fleet test: hammers one resource on a shared Redis
until a deadline and prints, as JSON, the [sent, answered] times
(time.monotonic, shared by every process of the machine) of each grant.

Usage: fleet_worker.py RESOURCE LIMITS_JSON START END (redis URL | cluster nodes)...
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pressure


async def main() -> None:
    resource, limits, start, end = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    mode, nodes = sys.argv[5], sys.argv[6:]
    options = {"timeoutMs": 2000, "connectTimeoutMs": 2000}
    if mode == "redis":
        broker = await pressure.ResourceBroker.connect(nodes[0], options=options)
    else:
        broker = await pressure.ResourceBroker.connect(cluster=nodes, options=options)
    broker.register_limit(resource, limits)
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    grants = []
    calls = 0
    while time.monotonic() < end and calls < 200_000:
        calls += 1
        sent = time.monotonic()
        a = await broker.try_acquire(resource)
        answered = time.monotonic()
        if a.allowed:
            grants.append([sent, answered])
        else:
            # Denied with a wait: come back a little before it ends, so that
            # the window's edges are probed.
            await asyncio.sleep(min(a.wait_time_ms / 1000.0, 0.005))
    print(json.dumps({"grants": grants, "calls": calls}))


asyncio.run(main())
