"""Queue+execute: priority order, transparent retry, errors, bounds."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

import pressure
from conftest import eventually, make_broker, run, stats_of, unique


def test_interactive_runs_before_batch_on_a_saturated_resource(backend: str) -> None:
    async def body() -> None:
        broker = await make_broker(backend)
        r = unique("prio")
        broker.register(r, {"maxConcurrentRequests": 1})
        order: List[str] = []
        hold = await broker.try_acquire(r)  # saturate the resource
        assert hold.allowed

        def job(name: str):
            async def execute() -> str:
                order.append(name)
                return name

            return execute

        tasks = []
        for name, prio in [("b1", "batch"), ("b2", "batch"), ("i1", "interactive"), ("i2", "interactive")]:
            tasks.append(asyncio.ensure_future(broker.enqueue(r, job(name), priority=prio)))
            # One at a time into the queue: each enqueue starts on the
            # runtime's threads, so two started together may swap places.
            waiting = len(tasks)

            async def queued() -> bool:
                return (await stats_of(broker, r))["queued"] == waiting

            await eventually(queued, f"{waiting} requests waiting")
        assert order == []
        await hold.release()
        results = await asyncio.gather(*tasks)
        assert [x.result for x in results] == ["b1", "b2", "i1", "i2"]
        assert order == ["i1", "i2", "b1", "b2"]
        for x in results:
            assert x.attempts == 1
            assert x.wait_time_ms > 0
        s = await stats_of(broker, r)
        assert s["kind"] == "queue"
        assert s["queued"] == 0
        assert s["waitTimeMs"] is not None

    run(body())


def test_rate_limited_error_is_retried_transparently(backend: str) -> None:
    async def body() -> None:
        broker = await make_broker(backend)
        r = unique("retry")
        broker.register(r, {"requestsPerSecond": 50}, {"maxRateLimitRetries": 3})
        seen: List[int] = []

        async def execute(attempt: int) -> str:
            seen.append(attempt)
            if attempt < 3:
                raise pressure.RateLimitedError(retry_after_ms=20)
            return "ok"

        out = await broker.enqueue(r, execute)
        assert out.result == "ok"
        assert out.attempts == 3
        assert seen == [1, 2, 3]

    run(body())


def test_retries_run_out_with_the_last_rate_limited_error() -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("retries-out")
        broker.register(r, {"requestsPerSecond": 50}, {"maxRateLimitRetries": 1})
        calls = 0

        async def execute() -> None:
            nonlocal calls
            calls += 1
            raise pressure.RateLimitedError(retry_after_ms=5, message=f"429 #{calls}")

        with pytest.raises(pressure.RateLimitedError, match="429 #2") as e:
            await broker.enqueue(r, execute)
        assert e.value.retry_after_ms == 5
        assert calls == 2

    run(body())


def test_other_exceptions_propagate_unchanged() -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("boom")
        broker.register(r, {"requestsPerSecond": 10})
        boom = ValueError("boom")

        async def execute() -> None:
            raise boom

        with pytest.raises(ValueError) as e:
            await broker.enqueue(r, execute)
        assert e.value is boom

        # A callable that returns no awaitable: its TypeError, once.
        with pytest.raises(TypeError):
            await broker.enqueue(r, lambda: 42)

    run(body())


def test_queue_full_and_timeout() -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("bounds")
        broker.register(r, {"maxConcurrentRequests": 1}, {"maxQueued": 1, "maxWaitMs": 300})
        hold = await broker.try_acquire(r)

        async def execute() -> str:
            return "ran"

        first = asyncio.ensure_future(broker.enqueue(r, execute))

        async def one_queued() -> bool:
            return (await stats_of(broker, r))["queued"] == 1

        await eventually(one_queued, "one request waiting")
        with pytest.raises(pressure.QueueFullError, match="full"):
            await broker.enqueue(r, execute)
        with pytest.raises(pressure.QueueTimeoutError):
            await first
        assert issubclass(pressure.QueueFullError, pressure.QueueError)
        await hold.release()
        # Capacity back: a request runs, with its own max wait.
        assert (await broker.enqueue(r, execute, max_wait_ms=1000)).result == "ran"

    run(body())


def test_a_cancelled_enqueue_leaves_nothing_queued() -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("cancel")
        broker.register(r, {"maxConcurrentRequests": 1})
        hold = await broker.try_acquire(r)

        async def execute() -> str:
            return "ran"

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(broker.enqueue(r, execute), 0.2)

        async def none_queued() -> bool:
            return (await stats_of(broker, r))["queued"] == 0

        await eventually(none_queued, "the cancelled request left the queue")
        await hold.release()
        assert (await broker.enqueue(r, execute)).result == "ran"
        assert (await stats_of(broker, r))["active"] == 0

    run(body())
