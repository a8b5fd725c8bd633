"""What a schedule command does to a schedule: pure decisions, no Kafka, no clock.

Every state-changing command bumps the schedule version, so occurrences of the
old version can be told apart (and skipped by workers) once the change is
accepted. The task applies the returned ``Decision``: it stores the new state,
drops the old version's pending timeline entries and materializes new ones.

A new schedule is PENDING until its tenant's admission task grants it a slot of
the max-active-schedules quota; only then is the CREATE answered. ACTIVE and
PAUSED schedules hold a slot; CANCELED and COMPLETED ones have given it back.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from scheduler.timing.fires import next_fires, require_fire
from scheduler.timing.instants import to_datetime, to_ms
from scheduler.timing.spec import ScheduleSpec, SpecError
from scheduler.timing.spec_record import compile_spec
from scheduler.wire.limits import MAX_NOTE_LENGTH, PREVIEW_COUNT
from scheduler.wire.records import (
    Command,
    CommandResult,
    CommandStatus,
    OccurrenceEventKind,
    RejectReason,
    ScheduleState,
    ScheduleStatus,
)
from scheduler.wire.records import ScheduleSpec as SpecRecord
from scheduler.wire.topology import InvalidNameError, validate_name_part

MAX_SCHEDULE_ID_LENGTH = 200

HOLDS_SLOT: frozenset[ScheduleStatus] = frozenset({"ACTIVE", "PAUSED"})


@dataclass(frozen=True)
class Decision:
    result: CommandResult | None           # None: answered later (a CREATE waiting for admission)
    state: ScheduleState | None = None     # the new ScheduleState; None when nothing changes
    drop_pending_as: OccurrenceEventKind | None = None  # OccurrenceEvent kind for the old version's pending entries
    first_fire_after_ms: int | None = None  # reschedule: next fire strictly after this instant
    skipped_while_paused_from_ms: int | None = None  # RESUME: fires from here to now were skipped
    reserve: bool = False                  # ask the tenant's admission task for a quota slot
    release: bool = False                  # give the schedule's quota slot back


class Rejection(Exception):
    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def result_record(command: Mapping[str, Any], status: CommandStatus, now_ms: int, *, version: int | None = None,
                  next_fires_ms: list[int] | None = None, reason: RejectReason | None = None,
                  message: str | None = None, source: str | None = None) -> CommandResult:
    """`command`: a decoded Command, or as much of one as is known (a record that did not decode)."""
    return {
        "command_id": command.get("command_id") or "",
        "schedule_id": command.get("schedule_id") or "",
        "tenant": command.get("tenant") or "",
        "command_type": command.get("type") or "UNKNOWN",
        "status": status,
        "version": version,
        "next_fires_ms": next_fires_ms or [],
        "reason": reason,
        "message": message,
        "source": source,
        "processed_at_ms": now_ms,
    }


def preview_ms(spec: ScheduleSpec, after_ms: int, fired_before: int = 0) -> list[int]:
    return [to_ms(f.scheduled_for) for f in next_fires(spec, to_datetime(after_ms), PREVIEW_COUNT, fired_before)]


def first_cursor_ms(spec_record: Mapping[str, Any], now_ms: int) -> int:
    """Where a new schedule starts looking for fires (`spec_record`: a ScheduleSpec, or the ledger's copy).

    A one-shot whose instant has just passed (within its max lateness) still
    fires, late; a cron or rate schedule starts with its next fire after now.
    """
    if spec_record["kind"] == "ONCE":
        max_lateness_ms: int = spec_record["max_lateness_ms"]
        return now_ms - max_lateness_ms - 1
    return now_ms


def _required_spec(command: Command) -> SpecRecord:
    spec_record = command.get("spec")
    if spec_record is None:
        raise Rejection("INVALID_SPEC", "spec: a spec is required")
    return spec_record


def _checked_spec(spec_record: SpecRecord, now_ms: int) -> ScheduleSpec:
    """The spec of a CREATE or UPDATE, compiled, and with a fire within the time core's search horizon:
    a spec that never fires would have every planning pass walk the horizon for nothing."""
    try:
        spec = compile_spec(spec_record)
        require_fire(spec, to_datetime(now_ms))
        return spec
    except SpecError as exc:
        reason: RejectReason = "UNKNOWN_ZONE" if exc.field == "time_zone" else "INVALID_SPEC"
        raise Rejection(reason, f"{exc.field}: {exc.message}") from exc


def _check_names(command: Command) -> None:
    """Tenants name topics and schedule ids build store keys: both are checked before anything is stored."""
    sid = command["schedule_id"]
    if not sid or len(sid) > MAX_SCHEDULE_ID_LENGTH or not sid.isprintable():
        raise Rejection("MALFORMED_RECORD",
                        f"schedule_id: 1 to {MAX_SCHEDULE_ID_LENGTH} printable characters required")
    try:
        validate_name_part("tenant", command["tenant"])
    except InvalidNameError as exc:
        raise Rejection("MALFORMED_RECORD", f"tenant: {exc}") from exc


def _existing(command: Command, current: ScheduleState | None) -> ScheduleState:
    # Another tenant's schedule is reported as unknown, so its existence does not leak.
    if current is None or current["tenant"] != command["tenant"]:
        raise Rejection("UNKNOWN_SCHEDULE", f"schedule {command['schedule_id']!r} does not exist")
    expected = command.get("expected_version")
    if expected is not None and expected != current["version"]:
        raise Rejection("VERSION_CONFLICT",
                        f"expected version {expected}, current version is {current['version']}")
    return current


def _changed(current: ScheduleState, now_ms: int, **fields: Any) -> ScheduleState:
    # `fields` are ScheduleState fields; mypy cannot type a dict built from keyword arguments.
    return cast(ScheduleState, {**current, **fields, "version": current["version"] + 1, "updated_at_ms": now_ms})


def decide(command: Command, current: ScheduleState | None, now_ms: int) -> Decision:
    try:
        return _decide(command, current, now_ms)
    except Rejection as exc:
        return Decision(result_record(command, "REJECTED", now_ms, reason=exc.reason, message=exc.message))


def _accepted(command: Command, state: ScheduleState, now_ms: int, fires: list[int]) -> CommandResult:
    return result_record(command, "ACCEPTED", now_ms, version=state["version"], next_fires_ms=fires)


def _decide(command: Command, current: ScheduleState | None, now_ms: int) -> Decision:
    kind = command.get("type")
    if kind == "CREATE":
        return _create(command, current, now_ms)
    if kind not in ("UPDATE", "PAUSE", "RESUME", "CANCEL"):
        raise Rejection("MALFORMED_RECORD", f"type: unsupported command type {kind!r}")
    state = _existing(command, current)
    if state["state"] == "PENDING":
        raise Rejection("INVALID_STATE", f"schedule {state['schedule_id']!r} is still being created; retry")
    if state["state"] == "CANCELED":
        if kind == "CANCEL":
            return Decision(_accepted(command, state, now_ms, []))
        raise Rejection("INVALID_STATE", f"schedule {state['schedule_id']!r} is canceled")
    if state["state"] == "COMPLETED" and kind != "CANCEL":
        raise Rejection("INVALID_STATE", f"schedule {state['schedule_id']!r} has completed: it has no fires left")
    if kind == "UPDATE":
        spec_record = _required_spec(command)
        spec = _checked_spec(spec_record, now_ms)
        new = _changed(state, now_ms, spec=spec_record, pending=[])
        fires = preview_ms(spec, now_ms) if state["state"] == "ACTIVE" else []
        return Decision(_accepted(command, new, now_ms, fires), new, "INVALIDATED",
                        now_ms if state["state"] == "ACTIVE" else None)
    if kind == "PAUSE":
        return _pause(command, state, now_ms)
    if kind == "RESUME":
        spec = compile_spec(state["spec"])
        if state["state"] == "ACTIVE":
            return Decision(_accepted(command, state, now_ms, preview_ms(spec, now_ms, state["fired_count"])))
        new = _changed(state, now_ms, state="ACTIVE", pause_note=None)
        return Decision(_accepted(command, new, now_ms, preview_ms(spec, now_ms, state["fired_count"])),
                        new, None, now_ms, state.get("next_fire_ms"))
    new = _changed(state, now_ms, state="CANCELED", pending=[], next_fire_ms=None, pause_note=None)
    return Decision(_accepted(command, new, now_ms, []), new, "CANCELED", release=state["state"] in HOLDS_SLOT)


def _pause(command: Command, state: ScheduleState, now_ms: int) -> Decision:
    """A PAUSE keeps its note on the schedule while it stays PAUSED (RESUME and CANCEL clear it).

    A PAUSE of a PAUSED schedule changes nothing (a retry is harmless), except that one with a new note
    replaces the old one: an operator correcting the reason expects to see it. A PAUSE without a note
    keeps the note there is, so a plain repeated pause does not erase why the schedule was stopped.
    """
    note = command.get("note")
    if note is not None and len(note) > MAX_NOTE_LENGTH:
        raise Rejection("INVALID_SPEC", f"note: at most {MAX_NOTE_LENGTH} characters")
    if state["state"] == "PAUSED":
        if note is None or note == state.get("pause_note"):
            return Decision(_accepted(command, state, now_ms, []))
        noted = _changed(state, now_ms, pause_note=note)
        return Decision(_accepted(command, noted, now_ms, []), noted)
    new = _changed(state, now_ms, state="PAUSED", pending=[], pause_note=note)
    return Decision(_accepted(command, new, now_ms, []), new, "SKIPPED_PAUSED")


def _create(command: Command, current: ScheduleState | None, now_ms: int) -> Decision:
    if current is not None:
        key = command.get("idempotency_key")
        if key is not None and current["tenant"] == command["tenant"] and current.get("idempotency_key") == key:
            if current["state"] == "PENDING":
                waiters = [*current["admission_waiters"], command.get("command_id") or ""]
                return Decision(None, {**current, "admission_waiters": waiters})
            first = result_record(command, "ACCEPTED", current["created_at_ms"], version=1,
                                  next_fires_ms=current.get("first_next_fires_ms") or [])
            return Decision(first)
        if current["tenant"] != command["tenant"]:
            raise Rejection("ALREADY_EXISTS", "schedule id is taken; choose another")
        raise Rejection("ALREADY_EXISTS", f"schedule {command['schedule_id']!r} already exists")
    _check_names(command)
    spec_record = _required_spec(command)
    _checked_spec(spec_record, now_ms)
    state: ScheduleState = {
        "schedule_id": command["schedule_id"],
        "tenant": command["tenant"],
        "version": 1,
        "state": "PENDING",
        "spec": spec_record,
        "idempotency_key": command.get("idempotency_key"),
        "create_command_id": command.get("command_id") or "",
        "created_at_ms": now_ms,
        "updated_at_ms": now_ms,
        "next_fire_ms": None,
        "fired_count": 0,
        "pending": [],
        "running": [],
        "admission_waiters": [command.get("command_id") or ""],
        "first_next_fires_ms": [],
        "lost_attempts": [],
        "pause_note": None,
    }
    return Decision(None, state, reserve=True)


def admitted(state: ScheduleState, now_ms: int) -> tuple[ScheduleState, int]:
    """The PENDING schedule got its slot: it becomes ACTIVE; returns it and where its fires start."""
    cursor = first_cursor_ms(state["spec"], now_ms)
    fires = preview_ms(compile_spec(state["spec"]), cursor)
    return {**state, "state": "ACTIVE", "created_at_ms": now_ms, "updated_at_ms": now_ms,
            "first_next_fires_ms": fires, "admission_waiters": []}, cursor
