"""Shared fixtures: one broker per backend (memory always; Redis and Redis
Cluster when PRESSURE_TEST_REDIS_URL / PRESSURE_TEST_REDIS_CLUSTER_URL name
them), and unique resource ids so runs on one Redis never share keys."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Awaitable, Callable, List, TypeVar

import pytest

import pressure

T = TypeVar("T")

REDIS_URL = os.environ.get("PRESSURE_TEST_REDIS_URL") or None
CLUSTER_URL = os.environ.get("PRESSURE_TEST_REDIS_CLUSTER_URL") or None
# Set by the cargo wrapper: a missing store is then a failure, not a skip.
REQUIRED = os.environ.get("PRESSURE_REQUIRE_PYTHON_BINDING") == "1"

# Store calls get a generous timeout: the test machine is loaded, and a
# timed-out call would deny (failure mode "closed"), not count wrongly.
REDIS_OPTIONS = {"timeoutMs": 2000, "connectTimeoutMs": 2000}

# Every test is bounded: asyncio.wait_for around its body.
TEST_TIMEOUT_S = 60.0


def cluster_nodes() -> List[str]:
    """The seed node URLs of PRESSURE_TEST_REDIS_CLUSTER_URL (comma-separated)."""
    assert CLUSTER_URL is not None
    return [u.strip() for u in CLUSTER_URL.split(",") if u.strip()]


def unique(name: str) -> str:
    """A resource id of this run only."""
    return f"pytest:{name}:{uuid.uuid4().hex[:12]}"


async def make_broker(kind: str) -> pressure.ResourceBroker:
    """A broker on `kind`: "memory", "redis" or "cluster"."""
    if kind == "memory":
        return pressure.ResourceBroker()
    if kind == "redis":
        if REDIS_URL is None:
            _missing("PRESSURE_TEST_REDIS_URL")
        return await pressure.ResourceBroker.connect(REDIS_URL, options=REDIS_OPTIONS)
    if CLUSTER_URL is None:
        _missing("PRESSURE_TEST_REDIS_CLUSTER_URL")
    return await pressure.ResourceBroker.connect(cluster=cluster_nodes(), options=REDIS_OPTIONS)


def _missing(var: str) -> None:
    if REQUIRED:
        pytest.fail(f"{var} is not set (PRESSURE_REQUIRE_PYTHON_BINDING=1)")
    pytest.skip(f"{var} is not set")


def run(coro: Awaitable[T], timeout: float = TEST_TIMEOUT_S) -> T:
    """Runs one test body on a fresh event loop, bounded in time."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 10.0) -> None:
    """Waits (bounded) until `check()` holds: for state another task or the
    store settles in the background (a dropped permit's release)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.01)


async def stats_of(broker: pressure.ResourceBroker, resource: str) -> dict:
    """The stats dict of one resource."""
    for s in await broker.get_stats():
        if s["resource"] == resource:
            return s
    raise AssertionError(f"no stats for {resource}")


@pytest.fixture(params=["memory", "redis", "cluster"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs once per backend."""
    kind: str = request.param
    if kind == "redis" and REDIS_URL is None:
        _missing("PRESSURE_TEST_REDIS_URL")
    if kind == "cluster" and CLUSTER_URL is None:
        _missing("PRESSURE_TEST_REDIS_CLUSTER_URL")
    return kind

