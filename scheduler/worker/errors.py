"""How a handler says whether its failure is worth another attempt.

The worker never retries by itself: it records the failure, and the scheduler decides on a
retry (same occurrence_id, attempt + 1, after backoff) or on the dead letters.
"""
from __future__ import annotations

from dataclasses import dataclass


class RetryableError(Exception):
    """A transient failure (network, throttling, a 5xx): a later attempt may succeed."""


class PermanentError(Exception):
    """A failure that no retry can fix (bad parameters, a rejected request): the occurrence is dead."""


@dataclass(frozen=True)
class Failure:
    """What an AttemptEvent FAILED says about an exception."""

    retryable: bool
    error_class: str
    error_message: str


def classify(error: BaseException) -> Failure:
    """PermanentError is permanent; anything else, RetryableError or an unexpected exception, may be retried.

    Unknown exceptions count as retryable because the scheduler's max_attempts bounds them anyway,
    while treating them as permanent would send a merely unlucky occurrence to the dead letters.
    """
    cls = type(error)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return Failure(retryable=not isinstance(error, PermanentError), error_class=name, error_message=str(error))
