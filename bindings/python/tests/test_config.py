"""Bad limits and queue settings are a ConfigError that names the key."""

from __future__ import annotations

import pytest

import pressure
from conftest import run, unique


def test_an_unknown_limit_key_is_named() -> None:
    broker = pressure.ResourceBroker()
    with pytest.raises(pressure.ConfigError, match="requestsPerSecnd") as e:
        broker.register_limit(unique("typo"), {"requestsPerSecnd": 10})
    assert isinstance(e.value, pressure.PressureError)
    with pytest.raises(pressure.ConfigError, match="requests_per_second"):
        broker.register_limit(unique("snake"), {"requests_per_second": 10})


def test_a_bad_value_is_named() -> None:
    broker = pressure.ResourceBroker()
    with pytest.raises(pressure.ConfigError, match="requestsPerMinute"):
        broker.register_limit(unique("neg"), {"requestsPerMinute": -1})
    with pytest.raises(pressure.ConfigError, match="requestsPerSecond"):
        broker.register_limit(unique("str"), {"requestsPerSecond": "ten"})
    with pytest.raises(pressure.ConfigError, match="algorithm"):
        broker.register_limit(unique("algo"), {"requestsPerSecond": 1, "algorithm": "leaky"})
    with pytest.raises(pressure.ConfigError, match="requestsPerSecond"):
        broker.register_limit(unique("zero"), {"requestsPerSecond": 0})
    with pytest.raises(pressure.ConfigError, match="limits"):
        broker.register_limit(unique("notadict"), [1, 2])


def test_bad_queue_settings_are_named() -> None:
    broker = pressure.ResourceBroker()
    with pytest.raises(pressure.ConfigError, match="maxQueud"):
        broker.register(unique("q"), {"requestsPerSecond": 1}, {"maxQueud": 3})
    with pytest.raises(pressure.ConfigError, match="batchHeadroom"):
        broker.register(unique("q"), {"requestsPerSecond": 1}, {"batchHeadroom": 1.5})


def test_registering_twice_and_enqueue_on_a_limit_resource() -> None:
    async def body() -> None:
        broker = pressure.ResourceBroker()
        r = unique("twice")
        broker.register_limit(r, {"requestsPerSecond": 1})
        with pytest.raises(pressure.ConfigError, match="already registered"):
            broker.register_limit(r, {"requestsPerSecond": 1})

        async def task() -> int:
            return 1

        with pytest.raises(pressure.ConfigError, match="register"):
            await broker.enqueue(r, task)

    run(body())


def test_redis_options_are_checked() -> None:
    async def body() -> None:
        with pytest.raises(pressure.ConfigError, match="timeoutMz"):
            await pressure.ResourceBroker.connect("redis://127.0.0.1:1", options={"timeoutMz": 5})
        with pytest.raises(pressure.ConfigError, match="connect"):
            await pressure.ResourceBroker.connect()
        # Nothing listens on port 1: BackendError naming the address, at once.
        with pytest.raises(pressure.BackendError, match="127.0.0.1:1"):
            await pressure.ResourceBroker.connect("redis://127.0.0.1:1", options={"connectTimeoutMs": 500})

    run(body())
