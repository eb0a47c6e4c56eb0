"""A Redis that goes away: the failure mode answers, and says so."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import pressure
from conftest import REQUIRED, run, unique


def own_redis() -> "tuple[subprocess.Popen, str, str]":
    """A redis-server of this test's own, to kill."""
    exe = shutil.which("redis-server")
    if exe is None:
        if REQUIRED:
            pytest.fail("redis-server is not on PATH (PRESSURE_REQUIRE_PYTHON_BINDING=1)")
        pytest.skip("redis-server is not on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="pressure-pytest-redis-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):  # up to ~10 s
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"redis://127.0.0.1:{port}", workdir
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail("redis-server did not start")


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_an_outage_follows_the_failure_mode(mode: str) -> None:
    proc, url, workdir = own_redis()

    async def body() -> None:
        broker = await pressure.ResourceBroker.connect(
            url, options={"failureMode": mode, "timeoutMs": 300, "connectTimeoutMs": 300}
        )
        r = unique("outage")
        broker.register_limit(r, {"requestsPerMinute": 100})
        assert (await broker.try_acquire(r)).allowed
        proc.kill()
        proc.wait()
        a = await broker.try_acquire(r)
        if mode == "closed":
            assert not a.allowed
            assert a.cause == "unavailable"
            assert a.wait_time_ms > 0
        else:
            assert a.allowed
        s = [x for x in await broker.get_stats() if x["resource"] == r][0]
        assert s["backendErrors"] >= 1

    try:
        run(body())
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
