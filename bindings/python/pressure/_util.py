"""Helpers of the native module: the rate-limit exception and how to call a task."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

from ._pressure import PressureError


class RateLimitedError(PressureError):
    """Raise it from an ``enqueue`` task when downstream said "too much"
    (e.g. HTTP 429): the broker pauses the resource for ``retry_after_ms``
    (or its own backoff when ``None``) and runs the task again, up to the
    resource's ``maxRateLimitRetries``; after that ``enqueue`` raises the
    last one."""

    def __init__(self, retry_after_ms: Optional[float] = None, message: Optional[str] = None) -> None:
        self.retry_after_ms = retry_after_ms
        if message is None:
            message = "rate limited" if retry_after_ms is None else f"rate limited, retry after {retry_after_ms} ms"
        super().__init__(message)


def wants_attempt(execute: Callable[..., Any]) -> bool:
    """Whether ``execute`` takes a positional argument (the attempt number)."""
    try:
        params = inspect.signature(execute).parameters.values()
    except (TypeError, ValueError):
        return False
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL):
            return True
    return False


def check_awaitable(value: Any) -> None:
    """Raises TypeError unless ``value`` (what ``execute`` returned) is awaitable."""
    if not inspect.isawaitable(value):
        raise TypeError(
            f"enqueue: execute must be an async callable (returning an awaitable), it returned {type(value).__name__}"
        )
