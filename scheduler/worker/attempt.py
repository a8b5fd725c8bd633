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
from scheduler.worker.heartbeat import Heartbeat
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
    record_now: Callable[[Event], None],
) -> Event | None:
    """Run `handler` unless the view says the occurrence is stale; return the outcome event to write.

    STARTED is written (durably, by `record_now`) before the handler runs, so the scheduler
    knows of a running attempt even if the worker then dies; HEARTBEATs (scheduler.worker.heartbeat)
    are written the same way while it runs, from another thread. None, with nothing written: a
    redelivery of an attempt the scheduler already recorded LOST and retries under a new attempt.
    """
    if view.is_lost(occurrence):
        log.info("skipping occurrence %s attempt %d: its lease was lost and it is retried",
                 occurrence.occurrence_id, occurrence.attempt)
        return None
    reason = view.staleness(occurrence)
    if reason is not None:
        log.info("skipping stale occurrence %s: %s", occurrence.occurrence_id, reason)
        return attempt_event(occurrence, "SKIPPED_STALE", ctx.attempt_token, worker_id, clock_ms(), reason=reason)
    record_now(attempt_event(occurrence, "STARTED", ctx.attempt_token, worker_id, clock_ms()))
    view.watch(occurrence.schedule_id, ctx)
    try:
        with Heartbeat(occurrence, ctx, worker_id, clock_ms, record_now):
            handler(occurrence, ctx)
    except Exception as error:  # the handler's failure is the attempt's outcome, whatever its type
        failure = classify(error)
        log.info("occurrence %s attempt %d failed (%s): %s", occurrence.occurrence_id, occurrence.attempt,
                 "retryable" if failure.retryable else "permanent", failure.error_message)
        return attempt_event(occurrence, "FAILED", ctx.attempt_token, worker_id, clock_ms(), failure=failure)
    finally:
        view.unwatch(occurrence.schedule_id, ctx)
    if ctx.lease_lost.is_set():
        log.warning("occurrence %s attempt %d finished after losing its lease: the scheduler refuses its result",
                    occurrence.occurrence_id, occurrence.attempt)
    return attempt_event(occurrence, "SUCCEEDED", ctx.attempt_token, worker_id, clock_ms())
