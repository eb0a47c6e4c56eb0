"""Check+reject: try_acquire counts, waits, release and async with, on every backend."""

from __future__ import annotations

import gc

import pytest

import pressure
from conftest import eventually, make_broker, run, stats_of, unique


def test_allowed_and_denied_counts_with_wait_time(backend: str) -> None:
    async def body() -> None:
        broker = await make_broker(backend)
        r = unique("counts")
        broker.register_limit(r, {"requestsPerMinute": 5})
        results = [await broker.try_acquire(r) for _ in range(8)]
        allowed = [a for a in results if a.allowed]
        denied = [a for a in results if not a.allowed]
        assert len(allowed) == 5
        assert len(denied) == 3
        for a in allowed:
            assert a.wait_time_ms == 0
            assert a.dimension is None
            assert a.cause is None
            assert bool(a)
        for d in denied:
            # The next slot frees when the first grant's sub-window (2 s of
            # the 30 per minute) leaves the window.
            assert 0 < d.wait_time_ms <= 62_000
            assert d.dimension == "requestsPerMinute"
            assert d.cause == "exhausted"
            assert not d
        s = await stats_of(broker, r)
        assert s["kind"] == "limit"
        assert s["allowed"] == 5
        assert s["denied"] == 3
        assert s["usage"]["requestsPerMinute"] == 5
        # A limit resource has no queue: None, never zero.
        assert s["queued"] is None
        assert s["waitTimeMs"] is None
        assert s["limits"] == {"requestsPerMinute": 5, "algorithm": "window"}

    run(body())


def test_release_is_idempotent_and_a_no_op_after_denial(backend: str) -> None:
    async def body() -> None:
        broker = await make_broker(backend)
        r = unique("release")
        broker.register_limit(r, {"maxConcurrentRequests": 1})
        a = await broker.try_acquire(r)
        assert a.allowed
        b = await broker.try_acquire(r)
        assert not b.allowed
        await b.release()  # denied: nothing to give back
        await b.release()
        assert not (await broker.try_acquire(r)).allowed, "a denial's release frees nothing"
        await a.release()
        await a.release()  # twice: still one slot, not two
        c = await broker.try_acquire(r)
        assert c.allowed
        d = await broker.try_acquire(r)
        assert not d.allowed, "the double release gave back one slot only"
        await c.release()
        assert (await stats_of(broker, r))["active"] == 0

    run(body())


def test_concurrency_slots_freed_by_release_and_async_with(backend: str) -> None:
    async def body() -> None:
        broker = await make_broker(backend)
        r = unique("slots")
        broker.register_limit(r, {"maxConcurrentRequests": 2})
        async with broker.try_acquire(r) as x, broker.try_acquire(r) as y:
            assert x.allowed and y.allowed
            assert (await stats_of(broker, r))["active"] == 2
            z = await broker.try_acquire(r)
            assert not z.allowed
            assert z.dimension == "maxConcurrentRequests"
            assert z.wait_time_ms > 0
        assert (await stats_of(broker, r))["active"] == 0
        # The block's exception propagates, and the slot comes back.
        with pytest.raises(KeyError):
            async with broker.try_acquire(r) as a:
                assert a.allowed
                raise KeyError("inside")
        assert (await stats_of(broker, r))["active"] == 0
        # A denied acquisition in `async with` is fine too.
        one = await broker.try_acquire(r)
        two = await broker.try_acquire(r)
        async with broker.try_acquire(r) as three:
            assert not three.allowed
        await one.release()
        four = await broker.try_acquire(r)
        assert four.allowed
        await two.release()
        await four.release()
        assert (await stats_of(broker, r))["usage"]["maxConcurrentRequests"] == 0

    run(body())


def test_a_collected_permit_is_released(backend: str) -> None:
    async def body() -> None:
        broker = await make_broker(backend)
        r = unique("gc")
        broker.register_limit(r, {"maxConcurrentRequests": 1})
        a = await broker.try_acquire(r)
        assert a.allowed
        assert not (await broker.try_acquire(r)).allowed
        del a
        gc.collect()

        async def free() -> bool:
            s = await stats_of(broker, r)
            return s["active"] == 0 and s["usage"]["maxConcurrentRequests"] == 0

        # On Redis the dropped permit's release is sent in the background.
        await eventually(free, "the dropped permit's lease is released")
        b = await broker.try_acquire(r)
        assert b.allowed
        await b.release()

    run(body())


def test_tokens_reserve_and_reconcile(backend: str) -> None:
    async def body() -> None:
        broker = await make_broker(backend)
        r = unique("tokens")
        broker.register_limit(r, {"tokensPerMinute": 1000})
        a = await broker.try_acquire(r, input_tokens=300, output_tokens=500)
        assert a.allowed
        assert not (await broker.try_acquire(r, tokens=300)).allowed
        # The call used far less than its estimate: the window gives it back.
        await a.reconcile(input_tokens=300, output_tokens=50)
        assert (await stats_of(broker, r))["usage"]["tokensPerMinute"] == 350
        b = await broker.try_acquire(r, tokens=300)
        assert b.allowed
        assert (await stats_of(broker, r))["usage"]["tokensPerMinute"] == 650
        denied = await broker.try_acquire(r, tokens=400)
        assert not denied.allowed
        await denied.reconcile(input_tokens=1)  # no-op on a denial
        assert (await stats_of(broker, r))["usage"]["tokensPerMinute"] == 650

    run(body())


def test_cost_spends_a_daily_budget_and_reconciles(backend: str) -> None:
    async def body() -> None:
        broker = await make_broker(backend)
        r = unique("spend")
        broker.register_limit(r, {"costMicroUsdPerDay": 1000})
        a = await broker.try_acquire(r, cost_micro_usd=600)
        assert a.allowed
        refused = await broker.try_acquire(r, cost_micro_usd=600)
        assert not refused.allowed
        assert refused.dimension == "costMicroUsdPerDay"
        assert 0 < refused.wait_time_ms <= 86_400_000
        # Tokens only: the reserved money stands.
        await a.reconcile(input_tokens=0)
        assert (await stats_of(broker, r))["usage"]["costMicroUsdPerDay"] == 600
        await a.reconcile(cost_micro_usd=150)
        assert (await stats_of(broker, r))["usage"]["costMicroUsdPerDay"] == 150
        assert (await broker.try_acquire(r, cost_micro_usd=600)).allowed
        assert (await stats_of(broker, r))["usage"]["costMicroUsdPerDay"] == 750

        q = unique("qspend")
        broker.register(q, {"costMicroUsdPerDay": 1000})
        seen = []

        async def task() -> str:
            seen.append((await stats_of(broker, q))["usage"]["costMicroUsdPerDay"])
            return "done"

        out = await broker.enqueue(q, task, cost_micro_usd=400)
        assert out.result == "done"
        assert seen == [400]

    run(body())


def test_batch_priority_is_kept_below_the_headroom() -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("headroom")
        broker.register(r, {"requestsPerMinute": 10}, {"batchHeadroom": 0.5})
        batch = [await broker.try_acquire(r, priority="batch") for _ in range(10)]
        assert sum(a.allowed for a in batch) == 5
        inter = [await broker.try_acquire(r) for _ in range(10)]
        assert sum(a.allowed for a in inter) == 5

    run(body())


def test_unknown_resource_and_demand_errors() -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        with pytest.raises(pressure.UnknownResourceError, match="nope"):
            await broker.try_acquire("nope")
        r = unique("demand")
        broker.register_limit(r, {"requestsPerSecond": 2})
        with pytest.raises(pressure.DemandTooLargeError):
            await broker.try_acquire(r, requests=3)
        with pytest.raises(pressure.ConfigError, match="priority"):
            broker.try_acquire(r, priority="urgent")
        with pytest.raises(pressure.ConfigError, match="not both"):
            broker.try_acquire(r, tokens=1, input_tokens=1)
        assert issubclass(pressure.UnknownResourceError, pressure.PressureError)

    run(body())
