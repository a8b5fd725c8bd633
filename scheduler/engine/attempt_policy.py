"""What an attempt event does to its occurrence: pure decisions, no Kafka, no clock.

The attempt token fences the scheduler's own state: a result carrying a token
that is not the occurrence's current one (a timed-out, superseded attempt) is
ignored. It cannot undo a side effect the stale worker already made; that is
what idempotent handlers keyed by occurrence_id are for.

A STARTED attempt holds a lease of its schedule's `lease_ms`, renewed by every
HEARTBEAT. An attempt whose lease expires is recorded LOST (an event the
scheduler makes, see scheduler.engine.leases) and retried like a retryable
failure; a newer STARTED of the same attempt (a redelivery to another worker)
takes the lease over. Either way the attempt that lost its lease is named in
`AttemptOutcome.lost`, for the tenant's view, so its worker learns of it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, cast

from scheduler.timing.instants import to_datetime, to_ms
from scheduler.timing.jitter import available_at
from scheduler.wire import vocabulary
from scheduler.wire.records import (
    AttemptEvent,
    LostAttempt,
    OccurrenceState,
    OccurrenceStatus,
    ScheduleState,
)

HISTORY_LIMIT = 20
MAX_BACKOFF_MS = 3_600_000
FINISHED: frozenset[OccurrenceState] = frozenset({"SUCCEEDED", "DEAD", "CANCELED", "MISSED", "SKIPPED_OVERLAP"})
DEFAULT_LEASE_MS: int = vocabulary.field_defaults("ScheduleSpec")["lease_ms"]


@dataclass(frozen=True)
class AttemptOutcome:
    status: OccurrenceStatus | None       # the new OccurrenceStatus; None: the event changes nothing
    retry_at_ms: int | None = None        # dispatch attempt + 1 at this instant
    dead_reason: str | None = None        # send to the dead letters with this reason
    finished: bool = False                # the occurrence no longer runs (overlap policies)
    ignored_reason: str | None = None
    lost: LostAttempt | None = None       # a LostAttempt: the attempt that no longer holds the lease


def new_status(event: AttemptEvent, now_ms: int) -> OccurrenceStatus:
    return {
        "occurrence_id": event["occurrence_id"], "schedule_id": event["schedule_id"], "tenant": event["tenant"],
        "schedule_version": event["schedule_version"], "scheduled_for_ms": event["scheduled_for_ms"],
        "state": "ENQUEUED", "attempt": event["attempt"], "attempt_token": None, "next_attempt_at_ms": None,
        "attempts": [], "updated_at_ms": now_ms, "lease_expires_at_ms": None, "progress": None,
    }


def lease_ms(schedule: ScheduleState | None) -> int:
    return schedule["spec"].get("lease_ms", DEFAULT_LEASE_MS) if schedule is not None else DEFAULT_LEASE_MS


def lost_attempt(status: OccurrenceStatus) -> LostAttempt:
    return {"occurrence_id": status["occurrence_id"], "attempt": status["attempt"],
            "attempt_token": status["attempt_token"] or ""}  # a RUNNING attempt's token is never None


def _was_lost(status: OccurrenceStatus, attempt: int) -> bool:
    return any(e["kind"] == "LOST" and e["attempt"] == attempt for e in status["attempts"])


def retry_at_ms(occurrence_id: str, attempt: int, base_ms: int, now_ms: int) -> int:
    """Exponential backoff with full jitter, from a stable hash so every replica computes the same instant."""
    window = min(MAX_BACKOFF_MS, base_ms * 2 ** max(0, attempt - 1))
    return to_ms(available_at(f"{occurrence_id}/{attempt}", to_datetime(now_ms), timedelta(milliseconds=window)))


def _with(status: OccurrenceStatus, event: AttemptEvent, now_ms: int, **fields: Any) -> OccurrenceStatus:
    """The status after `event`; the lease ends with it unless `fields` renew it."""
    history = [*status["attempts"], event][-HISTORY_LIMIT:]
    # `fields` are OccurrenceStatus fields; mypy cannot type a dict built from keyword arguments.
    return cast(OccurrenceStatus, {**status, "lease_expires_at_ms": None, "progress": None, **fields,
                                   "attempts": history, "updated_at_ms": now_ms})


def apply_attempt(event: AttemptEvent, status: OccurrenceStatus | None, schedule: ScheduleState | None, now_ms: int,
                  retry_budget_left: bool) -> AttemptOutcome:
    status = status or new_status(event, now_ms)
    kind = event["kind"]
    token = event["attempt_token"]
    if event["attempt"] < status["attempt"]:
        return AttemptOutcome(None, ignored_reason=f"attempt {event['attempt']} superseded by {status['attempt']}")
    running = status["state"] == "RUNNING"
    if kind == "STARTED":
        same_attempt = event["attempt"] == status["attempt"]
        if status["state"] in FINISHED and same_attempt:
            return AttemptOutcome(None, ignored_reason=f"occurrence already {status['state']}")
        if _was_lost(status, event["attempt"]):
            return AttemptOutcome(None, ignored_reason=f"attempt {event['attempt']} lost its lease; its retry runs")
        taken_over = running and same_attempt and status["attempt_token"] not in (None, token)
        return AttemptOutcome(_with(status, event, now_ms, state="RUNNING", attempt=event["attempt"],
                                    attempt_token=token, next_attempt_at_ms=None,
                                    lease_expires_at_ms=now_ms + lease_ms(schedule)),
                              lost=lost_attempt(status) if taken_over else None)
    if kind in ("HEARTBEAT", "LOST") and (not running or token != status["attempt_token"]):
        return AttemptOutcome(None, ignored_reason=f"{kind} of an attempt that does not hold the lease")
    if kind == "HEARTBEAT":
        return AttemptOutcome({**status, "updated_at_ms": now_ms, "lease_expires_at_ms": now_ms + lease_ms(schedule),
                               "progress": event.get("progress")})
    if kind == "LOST":
        return replace(_failed(event, status, schedule, now_ms, retry_budget_left), lost=lost_attempt(status))
    if kind == "SKIPPED_STALE":
        return AttemptOutcome(_with(status, event, now_ms, state="CANCELED"), finished=True)
    if kind not in ("SUCCEEDED", "FAILED"):
        return AttemptOutcome(None, ignored_reason=f"unknown attempt event kind {kind!r}")
    if token != status["attempt_token"]:
        return AttemptOutcome(None, ignored_reason="result of a superseded attempt")
    if kind == "SUCCEEDED":
        return AttemptOutcome(_with(status, event, now_ms, state="SUCCEEDED"), finished=True)
    return _failed(event, status, schedule, now_ms, retry_budget_left)


def _failed(event: AttemptEvent, status: OccurrenceStatus, schedule: ScheduleState | None, now_ms: int,
            retry_budget_left: bool) -> AttemptOutcome:
    def dead(reason: str) -> AttemptOutcome:
        return AttemptOutcome(_with(status, event, now_ms, state="DEAD"), dead_reason=reason, finished=True)

    if not event["retryable"]:
        return dead(f"permanent error: {event['error_class']}: {event['error_message']}")
    if schedule is None or schedule["version"] != event["schedule_version"] \
            or schedule["state"] not in ("ACTIVE", "COMPLETED"):
        return AttemptOutcome(_with(status, event, now_ms, state="CANCELED"), finished=True,
                              ignored_reason="no retry: the schedule changed since this occurrence")
    spec = schedule["spec"]
    if event["attempt"] >= spec["max_attempts"]:
        return dead(f"attempts exhausted ({event['attempt']} of {spec['max_attempts']}): {event['error_class']}")
    at_ms = retry_at_ms(event["occurrence_id"], event["attempt"], spec["retry_backoff_ms"], now_ms)
    if at_ms > event["scheduled_for_ms"] + spec["occurrence_deadline_ms"]:
        return dead("occurrence deadline passed")
    if not retry_budget_left:
        return dead("tenant retry budget exhausted")
    return AttemptOutcome(_with(status, event, now_ms, state="RETRY_WAIT", attempt_token=None,
                                next_attempt_at_ms=at_ms), retry_at_ms=at_ms, finished=True)
