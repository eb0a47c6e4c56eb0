"""Type stubs of the pressure package (the native module plus RateLimitedError)."""

from types import TracebackType
from typing import Any, Awaitable, Callable, Generator, Literal, Mapping, Optional, Sequence, TypeVar, Union

T = TypeVar("T")

Priority = Literal["interactive", "batch"]

LimitsDict = Mapping[str, Union[int, str]]
"""camelCase keys as in the gateway config: requestsPerSecond, requestsPerMinute,
tokensPerMinute, inputTokensPerMinute, outputTokensPerMinute,
maxConcurrentRequests, algorithm ("window" | "gcra"), burst, leaseTtlMs."""

QueueDict = Mapping[str, Union[int, float]]
"""camelCase keys: maxQueued, maxWaitMs, interactiveBurst, batchHeadroom,
maxRateLimitRetries."""

class PressureError(Exception): ...
class ConfigError(PressureError): ...
class UnknownResourceError(PressureError): ...
class DemandTooLargeError(PressureError): ...
class QueueError(PressureError): ...
class QueueFullError(QueueError): ...
class QueueTimeoutError(QueueError): ...
class BackendError(PressureError): ...

class RateLimitedError(PressureError):
    retry_after_ms: Optional[float]
    def __init__(self, retry_after_ms: Optional[float] = None, message: Optional[str] = None) -> None: ...

class Acquisition:
    @property
    def allowed(self) -> bool: ...
    @property
    def wait_time_ms(self) -> int: ...
    @property
    def dimension(self) -> Optional[str]: ...
    @property
    def cause(self) -> Optional[Literal["exhausted", "unavailable"]]: ...
    def release(self) -> Awaitable[None]: ...
    def reconcile(
        self,
        input_tokens: Optional[int] = None,
        output_tokens: Optional[int] = None,
        cost_micro_usd: Optional[int] = None,
    ) -> Awaitable[None]: ...
    def __bool__(self) -> bool: ...

class AcquireCall:
    def __await__(self) -> Generator[Any, None, Acquisition]: ...
    async def __aenter__(self) -> Acquisition: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Response:
    @property
    def result(self) -> Any: ...
    @property
    def wait_time_ms(self) -> float: ...
    @property
    def attempts(self) -> int: ...

class ResourceBroker:
    def __init__(self) -> None: ...
    @staticmethod
    async def connect(
        redis: Optional[str] = None,
        *,
        cluster: Optional[Sequence[str]] = None,
        options: Optional[Mapping[str, Any]] = None,
    ) -> ResourceBroker: ...
    @property
    def backend(self) -> Literal["memory", "redis"]: ...
    def register(self, resource: str, limits: LimitsDict, queue: Optional[QueueDict] = None) -> None: ...
    def register_limit(self, resource: str, limits: LimitsDict) -> None: ...
    def try_acquire(
        self,
        resource: str,
        requests: int = 1,
        tokens: Optional[int] = None,
        input_tokens: Optional[int] = None,
        output_tokens: Optional[int] = None,
        priority: Priority = "interactive",
        cost_micro_usd: int = 0,
    ) -> AcquireCall: ...
    async def enqueue(
        self,
        resource: str,
        execute: Union[Callable[[], Awaitable[Any]], Callable[[int], Awaitable[Any]]],
        *,
        tokens: Optional[int] = None,
        input_tokens: Optional[int] = None,
        output_tokens: Optional[int] = None,
        priority: Priority = "interactive",
        max_wait_ms: Optional[int] = None,
        cost_micro_usd: int = 0,
    ) -> Response: ...
    async def get_stats(self) -> list[dict[str, Any]]: ...
