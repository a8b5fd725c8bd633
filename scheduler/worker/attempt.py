"""One attempt at an occurrence, the same in every mode: stale check, STARTED, handler, outcome.

The caller decides how events are made durable (a transaction with the offset, a share-group
acknowledgement after the write, a faust send); `run_attempt` only orders the steps.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from scheduler.worker.errors import classify
from scheduler.worker.events import attempt_event
from scheduler.worker.occurrence import AttemptContext, Occurrence
from scheduler.worker.view import ScheduleView

log = logging.getLogger(__name__)

Handler = Callable[[Occurrence, AttemptContext], object]
Event = dict[str, Any]


def run_attempt(
    occurrence: Occurrence,
    ctx: AttemptContext,
    handler: Handler,
    view: ScheduleView,
    worker_id: str,
    clock_ms: Callable[[], int],
    write_started: Callable[[Event], None],
) -> Event:
    """Run `handler` unless the view says the occurrence is stale; return the outcome event to write.

    STARTED is written (durably, by `write_started`) before the handler runs, so the scheduler
    knows of a running attempt even if the worker then dies.
    """
    reason = view.staleness(occurrence)
    if reason is not None:
        log.info("skipping stale occurrence %s: %s", occurrence.occurrence_id, reason)
        return attempt_event(occurrence, "SKIPPED_STALE", ctx.attempt_token, worker_id, clock_ms(), reason=reason)
    write_started(attempt_event(occurrence, "STARTED", ctx.attempt_token, worker_id, clock_ms()))
    view.watch(occurrence.schedule_id, ctx.cancelled)
    try:
        handler(occurrence, ctx)
    except Exception as error:  # the handler's failure is the attempt's outcome, whatever its type
        failure = classify(error)
        log.info("occurrence %s attempt %d failed (%s): %s", occurrence.occurrence_id, occurrence.attempt,
                 "retryable" if failure.retryable else "permanent", failure.error_message)
        return attempt_event(occurrence, "FAILED", ctx.attempt_token, worker_id, clock_ms(), failure=failure)
    finally:
        view.unwatch(occurrence.schedule_id, ctx.cancelled)
    return attempt_event(occurrence, "SUCCEEDED", ctx.attempt_token, worker_id, clock_ms())
