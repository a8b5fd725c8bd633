"""Which occurrences of a schedule to put in the timeline now: pure, no Kafka, no clock.

The horizon bounds the work: only fires up to ``now + horizon`` are materialized,
so at due time dispatch only sends prepared bytes. Fires already in the past are
late (downtime, or a schedule created just after its instant): those within
``max_lateness`` go to the dispatch lane as if on time; older ones are decided
by the misfire policy and, when released, go to the catch-up lane. Fires an
RRULE's EXDATE took out are listed too, over the same span, so each is recorded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from scheduler.timing.fires import Fire, excluded_between, next_fires
from scheduler.timing.instants import to_datetime, to_ms
from scheduler.timing.jitter import available_at
from scheduler.timing.misfire import MisfireDecision, resolve_misfire
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.timing.spec import ScheduleSpec
from scheduler.wire.records import ScheduleSpec as SpecRecord

MAX_FIRES_PER_PASS = 1000
# Fires computed per step, growing: most passes (a new schedule, a wake-up) plan a fire or two before the
# horizon, and a bulk load of cron schedules paid for 64 each.
FIRST_BATCH, MAX_BATCH = 2, 64


@dataclass(frozen=True, slots=True)
class PlannedOccurrence:
    occurrence_id: str
    scheduled_for_ms: int
    available_at_ms: int
    dst_rule: str | None
    catch_up: bool


@dataclass(frozen=True, slots=True)
class ExcludedOccurrence:
    """A fire the schedule's calendar (an RRULE EXDATE) took out: recorded, never sent."""

    occurrence_id: str
    scheduled_for_ms: int


@dataclass
class Plan:
    occurrences: list[PlannedOccurrence] = field(default_factory=list)
    misfire: MisfireDecision | None = None
    next_fire_ms: int | None = None
    fired_count: int = 0
    excluded: list[ExcludedOccurrence] = field(default_factory=list)


def plan(spec: ScheduleSpec, spec_record: SpecRecord, schedule_id: str, version: int, cursor_ms: int,
         fired_count: int, now_ms: int, horizon_ms: int, recorded_until_ms: int | None = None) -> Plan:
    """Plan fires strictly after `cursor_ms` up to `now_ms + horizon_ms`.

    `next_fire_ms` of the result is where the next pass starts (None: the
    schedule has no fires left), so a schedule is never materialized twice.
    EXDATE'd fires up to `recorded_until_ms` were recorded by an earlier pass
    (a re-plan goes over that span again) and are not listed again.
    """
    result = _plan_fires(spec, spec_record, schedule_id, version, cursor_ms, fired_count, now_ms, horizon_ms)
    recorded = cursor_ms if recorded_until_ms is None else max(cursor_ms, recorded_until_ms)
    _add_excluded(result, spec, schedule_id, version, recorded, now_ms + horizon_ms)
    return result


def _add_excluded(result: Plan, spec: ScheduleSpec, schedule_id: str, version: int, cursor_ms: int,
                  limit_ms: int) -> None:
    """EXDATE'd fires after `cursor_ms` in the span this pass decided: up to the next pass's start,
    or to the last fire when max_fires ended the schedule (nothing after it would have fired)."""
    if result.next_fire_ms is not None:
        end_ms = result.next_fire_ms - 1
    elif spec.max_fires is not None and result.fired_count >= spec.max_fires:
        end_ms = max((o.scheduled_for_ms for o in result.occurrences), default=cursor_ms)
    else:
        end_ms = limit_ms
    if end_ms <= cursor_ms:
        return
    for fire in excluded_between(spec, to_datetime(cursor_ms), to_datetime(end_ms)):
        result.excluded.append(ExcludedOccurrence(
            occurrence_id(schedule_id, version, fire.scheduled_for), to_ms(fire.scheduled_for)))


def _plan_fires(spec: ScheduleSpec, spec_record: SpecRecord, schedule_id: str, version: int, cursor_ms: int,
                fired_count: int, now_ms: int, horizon_ms: int) -> Plan:
    result = Plan(fired_count=fired_count)
    window_ms = spec_record["flexible_window_ms"]
    max_lateness_ms = spec_record["max_lateness_ms"]
    cursor = to_datetime(cursor_ms)
    late_fires: list[Fire] = []
    if cursor_ms < now_ms:
        decision = resolve_misfire(
            spec, cursor, to_datetime(now_ms), timedelta(milliseconds=max_lateness_ms),
            spec_record["misfire_policy"], spec_record["catch_up_limit"],
            fired_before=fired_count,
        )
        if decision.missed_count:
            result.misfire = decision
            result.fired_count += decision.missed_count  # max_fires counts missed fires too
        late_fires = decision.fire
        cursor = decision.cursor
    for fire in late_fires:
        catch_up = now_ms - to_ms(fire.scheduled_for) > max_lateness_ms
        _add(result, schedule_id, version, fire, window_ms, catch_up)
    limit_ms = now_ms + horizon_ms
    size = FIRST_BATCH
    while True:
        batch = next_fires(spec, cursor, size, result.fired_count)
        for fire in batch:
            at_ms = to_ms(fire.scheduled_for)
            if at_ms > limit_ms or len(result.occurrences) >= MAX_FIRES_PER_PASS:
                result.next_fire_ms = at_ms
                return result
            _add(result, schedule_id, version, fire, window_ms, False)
        if len(batch) < size:
            return result
        cursor = batch[-1].scheduled_for
        size = min(MAX_BATCH, size * 4)


def _add(result: Plan, schedule_id: str, version: int, fire: Fire, window_ms: int, catch_up: bool) -> None:
    oid = occurrence_id(schedule_id, version, fire.scheduled_for)
    at = available_at(oid, fire.scheduled_for, timedelta(milliseconds=window_ms))
    result.occurrences.append(
        PlannedOccurrence(oid, to_ms(fire.scheduled_for), to_ms(at), fire.dst_rule, catch_up))
    result.fired_count += 1
