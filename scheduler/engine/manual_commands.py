"""RERUN, TRIGGER and BACKFILL: occurrences an operator asks for, outside the schedule's own times.
Each returns the command's result; what it enqueues goes through the timeline like any fire."""
from __future__ import annotations

from collections.abc import Callable

from scheduler.engine.attempt_policy import FINISHED
from scheduler.engine.command_policy import HOLDS_SLOT, result_record
from scheduler.engine.occurrence_timeline import Timeline
from scheduler.timing.fires import fires_between
from scheduler.timing.instants import to_datetime, to_ms
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.timing.spec_record import compile_spec
from scheduler.wire.limits import MAX_BACKFILL
from scheduler.wire.records import Command, CommandResult, ScheduleState


def rerun(timeline: Timeline, command: Command, schedule: ScheduleState | None, now_ms: int) -> CommandResult:
    """Dispatch a finished or dead occurrence again, with the same occurrence_id and the next attempt number."""
    ctx = timeline.ctx
    status = ctx.status(command.get("occurrence_id") or "")
    if schedule is None or status is None or status["schedule_id"] != command["schedule_id"] \
            or schedule["tenant"] != command["tenant"]:
        return result_record(command, "REJECTED", now_ms, reason="UNKNOWN_OCCURRENCE",
                             message=f"no finished occurrence {command.get('occurrence_id')!r} of this schedule")
    if status["state"] not in FINISHED:
        return result_record(command, "REJECTED", now_ms, reason="INVALID_STATE",
                             message=f"occurrence is {status['state']}: only finished or dead ones re-run")
    attempt = status["attempt"] + 1
    ref = timeline.enqueue(schedule, status["occurrence_id"], status["scheduled_for_ms"], now_ms, attempt=attempt,
                           dst_rule=None, catch_up=False, version=status["schedule_version"])
    ctx.save({**schedule, "pending": [*schedule["pending"], ref]})
    ctx.put_status({**status, "state": "ENQUEUED", "attempt": attempt, "attempt_token": None,
                    "updated_at_ms": now_ms})
    return result_record(command, "ACCEPTED", now_ms, version=schedule["version"], next_fires_ms=[now_ms])


def trigger(timeline: Timeline, command: Command, schedule: ScheduleState | None, now_ms: int) -> CommandResult:
    """Fire one occurrence now, outside the schedule's own times (its instant is the command's processing time),
    under the command's overlap_override when it has one (e.g. ALLOW: run now although one still runs)."""
    if schedule is None or schedule["tenant"] != command["tenant"] or schedule["state"] not in HOLDS_SLOT:
        return _no_schedule(command, schedule, now_ms)
    oid = occurrence_id(schedule["schedule_id"], schedule["version"], to_datetime(now_ms))
    ref = timeline.enqueue(_with_overlap(schedule, command), oid, now_ms, now_ms, attempt=1, dst_rule=None,
                           catch_up=False)
    timeline.ctx.save({**schedule, "pending": [*schedule["pending"], ref]})
    return result_record(command, "ACCEPTED", now_ms, version=schedule["version"], next_fires_ms=[now_ms])


def backfill(timeline: Timeline, command: Command, schedule: ScheduleState | None, now_ms: int) -> CommandResult:
    """Replay the fires a past range would have had, through the catch-up lane and its own capacity."""
    if schedule is None or schedule["tenant"] != command["tenant"] or schedule["state"] in ("PENDING",):
        return _no_schedule(command, schedule, now_ms)
    first, last = command.get("backfill_from_ms"), command.get("backfill_to_ms")
    if first is None or last is None or first > last or last > now_ms:
        return result_record(command, "REJECTED", now_ms, reason="INVALID_SPEC",
                             message="backfill: need backfill_from_ms <= backfill_to_ms <= now")
    fires = fires_between(compile_spec(schedule["spec"]), to_datetime(first - 1), to_datetime(last),
                          limit=MAX_BACKFILL + 1)
    if len(fires) > MAX_BACKFILL:
        return result_record(command, "REJECTED", now_ms, reason="INVALID_SPEC",
                             message=f"backfill: the range holds more than {MAX_BACKFILL} fires; split it")
    target = _with_overlap(schedule, command)
    refs = []
    for fire in fires:
        at_ms = to_ms(fire.scheduled_for)
        oid = occurrence_id(schedule["schedule_id"], schedule["version"], fire.scheduled_for)
        refs.append(timeline.enqueue(target, oid, at_ms, at_ms, attempt=1, dst_rule=fire.dst_rule, catch_up=True))
    timeline.ctx.save({**schedule, "pending": [*schedule["pending"], *refs]})
    return result_record(command, "ACCEPTED", now_ms, version=schedule["version"],
                         next_fires_ms=[ref["scheduled_for_ms"] for ref in refs])


def _with_overlap(schedule: ScheduleState, command: Command) -> ScheduleState:
    """The schedule as its manual occurrences see it: with the command's overlap_override, if it has one."""
    policy = command.get("overlap_override") or schedule["spec"]["overlap_policy"]
    return {**schedule, "spec": {**schedule["spec"], "overlap_policy": policy}}


def _no_schedule(command: Command, schedule: ScheduleState | None, now_ms: int) -> CommandResult:
    if schedule is None or schedule["tenant"] != command["tenant"]:
        return result_record(command, "REJECTED", now_ms, reason="UNKNOWN_SCHEDULE",
                             message=f"schedule {command['schedule_id']!r} does not exist")
    return result_record(command, "REJECTED", now_ms, reason="INVALID_STATE",
                         message=f"schedule {command['schedule_id']!r} is {schedule['state']}")


MANUAL: dict[str, Callable[[Timeline, Command, ScheduleState | None, int], CommandResult]] = {
    "RERUN": rerun, "TRIGGER": trigger, "BACKFILL": backfill}
