"""Occurrences that are not sent (missed, skipped, invalidated, canceled) are reported, never dropped silently:
one `OccurrenceEvent` each, or one per range when a misfire covers many, and the occurrence's state is kept
so that it can be looked up by id."""
from __future__ import annotations

from typing import cast

from scheduler.engine.task_context import TaskContext
from scheduler.timing.instants import to_ms
from scheduler.timing.misfire import MisfireDecision
from scheduler.timing.occurrence_id import occurrence_id as occurrence_id_of
from scheduler.wire.records import (
    OccurrenceEventKind,
    OccurrenceState,
    OccurrenceStatus,
    ScheduleState,
)

# The occurrence state an event about one occurrence leaves it in.
EVENT_STATES: dict[OccurrenceEventKind, OccurrenceState] = {
    "MISSED": "MISSED", "SKIPPED_PAUSED": "CANCELED", "INVALIDATED": "CANCELED", "CANCELED": "CANCELED",
    "SKIPPED_OVERLAP": "SKIPPED_OVERLAP", "EXCLUDED": "CANCELED"}


def record_event(ctx: TaskContext, state: ScheduleState, kind: OccurrenceEventKind, reason: str, now_ms: int, *,
                 occurrence_id: str | None = None, scheduled_for_ms: int | None = None,
                 range_first_ms: int | None = None, range_last_ms: int | None = None, count: int = 1) -> None:
    ctx.emit(ctx.topics.occurrence_events, "OccurrenceEvent", state["schedule_id"].encode(), {
        "occurrence_id": occurrence_id, "schedule_id": state["schedule_id"], "tenant": state["tenant"],
        "schedule_version": state["version"], "scheduled_for_ms": scheduled_for_ms, "kind": kind,
        "reason": reason, "range_first_ms": range_first_ms, "range_last_ms": range_last_ms,
        "count": count, "recorded_at_ms": now_ms,
    })
    ctx.event_counts[kind] += count
    if occurrence_id is not None and scheduled_for_ms is not None:
        # The stored status (or a first one) with these fields replaced: a whole OccurrenceStatus.
        ctx.put_status(cast(OccurrenceStatus, {**(ctx.status(occurrence_id) or {"attempt": 1, "attempts": []}),
                        "occurrence_id": occurrence_id, "schedule_id": state["schedule_id"],
                        "tenant": state["tenant"], "schedule_version": state["version"],
                        "scheduled_for_ms": scheduled_for_ms, "state": EVENT_STATES[kind],
                        "attempt_token": None, "next_attempt_at_ms": None, "updated_at_ms": now_ms}))


def record_missed(ctx: TaskContext, state: ScheduleState, decision: MisfireDecision, kind: OccurrenceEventKind,
                  reason: str, now_ms: int) -> None:
    """The fires a misfire decision gave up: each named one, then the rest as one range."""
    sid, version = state["schedule_id"], state["version"]
    for fire in decision.missed:
        record_event(ctx, state, kind, reason, now_ms, occurrence_id=occurrence_id_of(sid, version, fire.scheduled_for),
                     scheduled_for_ms=to_ms(fire.scheduled_for))
    rest = decision.missed_count - len(decision.missed)
    if rest > 0 and decision.missed_first is not None:
        last_ms = (to_ms(decision.missed[0].scheduled_for) - 1 if decision.missed
                   else to_ms(decision.missed_last or decision.missed_first))
        record_event(ctx, state, kind, reason, now_ms, range_first_ms=to_ms(decision.missed_first),
                     range_last_ms=last_ms, count=rest)
