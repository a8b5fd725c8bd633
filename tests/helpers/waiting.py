"""The one way a test waits for something: poll a condition until it holds or a deadline passes."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str | Callable[[], str] = "the condition", *,
               interval: float = 0.1, ignoring: tuple[type[BaseException], ...] = ()) -> T:
    """Poll `condition` every `interval` seconds until it returns a truthy value, and return that value.

    At the deadline an AssertionError says what was awaited (`what`, or what it returns: a callable can
    add the state seen at the end, e.g. log tails). An exception of a type in `ignoring` counts as
    "not yet" (a broker still propagating metadata), any other fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        result: T | None = None  # an ignored error: not yet
        try:
            result = condition()
        except ignoring:
            pass
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)
