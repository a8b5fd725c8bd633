"""AttemptEvent records, as the worker writes them to `<prefix>.attempts` (keyed by schedule_id)."""
from __future__ import annotations

from typing import Any

from scheduler.worker.errors import Failure
from scheduler.worker.occurrence import Occurrence, to_ms

# error_class of SKIPPED_STALE events; error_message carries the reason.
STALE_CLASS = "StaleOccurrence"


def attempt_event(
    occurrence: Occurrence,
    kind: str,
    attempt_token: str,
    worker_id: str,
    at_ms: int,
    failure: Failure | None = None,
    reason: str | None = None,
    progress: str | None = None,
) -> dict[str, Any]:
    """One step of an attempt. `failure` goes with FAILED, `reason` with SKIPPED_STALE, `progress` with HEARTBEAT."""
    if (kind == "FAILED") != (failure is not None):
        raise ValueError("a FAILED event needs a failure, and only a FAILED event has one")
    if (kind == "SKIPPED_STALE") != (reason is not None):
        raise ValueError("a SKIPPED_STALE event needs a reason, and only a SKIPPED_STALE event has one")
    if progress is not None and kind != "HEARTBEAT":
        raise ValueError("only a HEARTBEAT event carries progress")
    error_class = failure.error_class if failure else (STALE_CLASS if reason else None)
    error_message = failure.error_message if failure else reason
    return {
        "occurrence_id": occurrence.occurrence_id,
        "schedule_id": occurrence.schedule_id,
        "tenant": occurrence.tenant,
        "schedule_version": occurrence.schedule_version,
        "scheduled_for_ms": to_ms(occurrence.scheduled_for),
        "attempt": occurrence.attempt,
        "attempt_token": attempt_token,
        "kind": kind,
        "retryable": bool(failure and failure.retryable),
        "error_class": error_class,
        "error_message": error_message,
        "worker_id": worker_id,
        "at_ms": at_ms,
        "progress": progress,
    }
