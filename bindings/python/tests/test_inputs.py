"""Inputs an attack suite tried (defects 10-12): non-finite and out-of-range
numbers in limits, options and count arguments are a ConfigError (never a
limit dropped or a number truncated), a task's exception propagates as is,
and a resource id that is not a str is a TypeError on every entry point."""

from __future__ import annotations

import asyncio
from typing import Any, List

import pytest

import pressure
from conftest import run, stats_of, unique

NON_FINITE = [float("nan"), float("inf"), float("-inf")]
# Not a count: non-finite, negative, fractional (even integral floats),
# beyond u64, a bool, a string.
NOT_A_COUNT: List[Any] = [*NON_FINITE, -1, 1.5, 5.0, 2**64, 2**70, True, "5"]


@pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "inf", "-inf"])
def test_a_non_finite_limit_is_a_config_error_never_dropped(bad: float) -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("nan")
        with pytest.raises(pressure.ConfigError, match="requestsPerSecond"):
            broker.register_limit(r, {"requestsPerSecond": bad, "maxConcurrentRequests": 100})
        with pytest.raises(pressure.ConfigError, match="requestsPerSecond"):
            broker.register(r, {"requestsPerSecond": bad, "maxConcurrentRequests": 100})
        # Nothing registered: a burst is not admitted on the concurrency limit alone.
        admitted = 0
        for _ in range(50):
            try:
                if (await broker.try_acquire(r)).allowed:
                    admitted += 1
            except pressure.UnknownResourceError:
                pass
        assert admitted == 0

    run(body())


@pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "inf", "-inf"])
def test_a_non_finite_value_anywhere_in_the_settings_is_named(bad: float) -> None:
    broker = pressure.ResourceBroker()
    r = unique("nested")
    with pytest.raises(pressure.ConfigError, match="burst"):
        broker.register_limit(r, {"requestsPerSecond": 5, "algorithm": "gcra", "burst": bad})
    with pytest.raises(pressure.ConfigError, match=r"leasing\.maxShare"):
        broker.register_limit(r, {"requestsPerSecond": 5, "leasing": {"maxShare": bad, "ttlMs": 1000}})
    with pytest.raises(pressure.ConfigError, match="maxQueued"):
        broker.register(r, {"requestsPerSecond": 5}, {"maxQueued": bad})
    with pytest.raises(pressure.ConfigError, match="batchHeadroom"):
        broker.register(r, {"requestsPerSecond": 5}, {"batchHeadroom": bad})

    async def connect() -> None:
        with pytest.raises(pressure.ConfigError, match="timeoutMs"):
            await pressure.ResourceBroker.connect("redis://127.0.0.1:1", options={"timeoutMs": bad})

    run(connect())


@pytest.mark.parametrize("bad", [-1, 1.5, 2**53 + 1.0, 2**64, 2**70])
def test_other_bad_limit_numbers_are_config_errors(bad: Any) -> None:
    broker = pressure.ResourceBroker()
    with pytest.raises(pressure.ConfigError, match="requestsPerSecond"):
        broker.register_limit(unique("num"), {"requestsPerSecond": bad})


@pytest.mark.parametrize("bad", NOT_A_COUNT, ids=repr)
def test_try_acquire_counts_are_config_errors(bad: Any) -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("counts")
        broker.register_limit(
            r, {"requestsPerSecond": 1000, "tokensPerMinute": 1_000_000, "costMicroUsdPerDay": 1_000_000}
        )
        for name in ["requests", "tokens", "input_tokens", "output_tokens", "cost_micro_usd"]:
            with pytest.raises(pressure.ConfigError, match=name):
                broker.try_acquire(r, **{name: bad})
        s = await stats_of(broker, r)
        assert s["allowed"] == 0 and s["denied"] == 0

    run(body())


@pytest.mark.parametrize("bad", NOT_A_COUNT, ids=repr)
def test_reconcile_counts_are_config_errors(bad: Any) -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("reconcile")
        broker.register_limit(r, {"tokensPerMinute": 1000})
        acq = await broker.try_acquire(r, tokens=100)
        assert acq.allowed
        for name in ["input_tokens", "output_tokens", "cost_micro_usd"]:
            with pytest.raises(pressure.ConfigError, match=name):
                await acq.reconcile(**{name: bad})
        # The reservation stands: 900 tokens left.
        assert not (await broker.try_acquire(r, tokens=901)).allowed
        assert (await broker.try_acquire(r, tokens=900)).allowed

    run(body())


@pytest.mark.parametrize("bad", NOT_A_COUNT, ids=repr)
def test_enqueue_numbers_are_config_errors_and_the_task_never_runs(bad: Any) -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("enqueue")
        broker.register(r, {"tokensPerMinute": 1_000_000, "costMicroUsdPerDay": 1_000_000})
        runs = 0

        async def execute() -> None:
            nonlocal runs
            runs += 1

        for name in ["tokens", "input_tokens", "output_tokens", "cost_micro_usd", "max_wait_ms"]:
            with pytest.raises(pressure.ConfigError, match=name):
                await broker.enqueue(r, execute, **{name: bad})
        assert runs == 0

    run(body())


def test_valid_counts_still_work() -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("ok")
        broker.register(r, {"tokensPerMinute": 1000, "requestsPerSecond": 100})
        acq = await broker.try_acquire(r, requests=2, input_tokens=10, output_tokens=5, cost_micro_usd=0)
        assert acq.allowed
        await acq.reconcile(input_tokens=0, output_tokens=0)

        async def execute() -> str:
            return "done"

        out = await broker.enqueue(r, execute, tokens=10, max_wait_ms=1000)
        assert out.result == "done"

    run(body())


class Custom(Exception):
    def __init__(self, payload: Any) -> None:
        super().__init__()
        self.payload = payload


class NotAnException(BaseException):
    """Not an Exception subclass: still the task's, as is."""


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("boom"),
        Custom(None),
        Custom({"nested": [1, 2]}),
        KeyError(None),
        pressure.ConfigError("the task's own"),
        pressure.QueueTimeoutError("the task's own"),
        NotAnException("base"),
    ],
    ids=repr,
)
def test_a_task_exception_propagates_as_is(exc: BaseException) -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("raise")
        broker.register(r, {"requestsPerSecond": 100})

        async def execute() -> None:
            raise exc

        with pytest.raises(type(exc)) as e:
            await broker.enqueue(r, execute)
        assert e.value is exc

        # Raised after an await, from a plain callable that returns the coroutine.
        async def later() -> None:
            await asyncio.sleep(0)
            raise exc

        with pytest.raises(type(exc)) as e2:
            await broker.enqueue(r, lambda: later())
        assert e2.value is exc

    run(body())


@pytest.mark.parametrize("bad", [None, 42, 1.5, b"bytes", {}, []], ids=repr)
def test_a_resource_id_that_is_not_a_str_is_a_type_error_everywhere(bad: Any) -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()

        async def execute() -> int:
            return 1

        with pytest.raises(TypeError, match="resource"):
            broker.register(bad, {"requestsPerSecond": 1})
        with pytest.raises(TypeError, match="resource"):
            broker.register_limit(bad, {"requestsPerSecond": 1})
        with pytest.raises(TypeError, match="resource"):
            broker.try_acquire(bad)
        with pytest.raises(TypeError, match="resource"):
            await broker.enqueue(bad, execute)

    run(body())
