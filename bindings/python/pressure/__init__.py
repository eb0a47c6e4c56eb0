"""pressure: admission control for asyncio.

One ``ResourceBroker`` (the Rust core, in memory or on Redis) answers "is
there capacity on this resource now?" in two ways: ``try_acquire`` (check and
reject at once, with the wait) and ``enqueue`` (wait in a priority queue, run
the task, retry on ``RateLimitedError``).
"""

from ._pressure import (
    AcquireCall,
    Acquisition,
    BackendError,
    ConfigError,
    DemandTooLargeError,
    PressureError,
    QueueError,
    QueueFullError,
    QueueTimeoutError,
    ResourceBroker,
    Response,
    UnknownResourceError,
)
from ._util import RateLimitedError

__all__ = [
    "AcquireCall",
    "Acquisition",
    "BackendError",
    "ConfigError",
    "DemandTooLargeError",
    "PressureError",
    "QueueError",
    "QueueFullError",
    "QueueTimeoutError",
    "RateLimitedError",
    "ResourceBroker",
    "Response",
    "UnknownResourceError",
]
