"""Commands of the partition's schedules: decoded and checked here, decided by the pure `commands.decide`,
applied to the timeline, answered with one result each (manual ones are `manual_commands`). A CreateBatch is
its CREATEs one after another, each taken as the same Command alone."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from scheduler.engine.command_policy import Decision, decide, result_record
from scheduler.engine.manual_commands import MANUAL
from scheduler.engine.occurrence_events import record_missed
from scheduler.engine.occurrence_timeline import Timeline
from scheduler.timing.instants import to_datetime
from scheduler.timing.misfire import resolve_misfire
from scheduler.timing.spec import SpecError
from scheduler.timing.spec_record import compile_spec
from scheduler.wire.codec import DecodeError
from scheduler.wire.partitioning import partition_for
from scheduler.wire.records import Command, CommandType, CreateBatch, ScheduleState

log = logging.getLogger(__name__)

# Commands that only stop work are still taken for a tenant no longer registered (deleted with --force),
# so its leftover schedules can be wound down; every other command of an unregistered tenant is refused.
STOPPING: frozenset[CommandType] = frozenset({"PAUSE", "CANCEL"})


class Commands:
    def __init__(self, timeline: Timeline, partitions: int) -> None:
        self.timeline = timeline
        self.ctx = timeline.ctx
        self.partitions = partitions  # of the commands topic, to check where a batch's schedules belong

    def on_command(self, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        """A Command keyed by its schedule, or a CreateBatch of many CREATEs of this partition's schedules."""
        ctx = self.ctx
        source = f"{ctx.topics.commands}/{ctx.partition}/{offset}"
        try:
            name, record = ctx.codec.decode_any(value or b"")
        except DecodeError as exc:
            self._reject_malformed(key, f"undecodable command: {exc}", source, now_ms)
            return
        if name == "CreateBatch":
            self._on_batch(record, source, now_ms)
        elif name != "Command":
            self._reject_malformed(key, f"expected a Command or a CreateBatch record, got a {name}", source, now_ms)
        elif key is None or key.decode(errors="replace") != record["schedule_id"]:
            self._reject_malformed(key, "record key must equal the command's schedule_id", source, now_ms, record)
        else:
            self._take(key, record, now_ms)

    def _on_batch(self, batch: CreateBatch, source: str, now_ms: int) -> None:
        """Each CREATE as if it came alone; what could not have come alone here is rejected by itself."""
        for command in batch["commands"]:
            key = command["schedule_id"].encode()
            home = partition_for(key, self.partitions)
            if command["type"] != "CREATE":
                self._reject_malformed(key, f"a CreateBatch holds only CREATE commands, not {command['type']}",
                                       source, now_ms, command)
            elif home != self.ctx.partition:
                self._reject_malformed(key, f"schedule_id belongs to partition {home}: a CreateBatch holds only "
                                       "schedules of the partition it is written to", source, now_ms, command)
            else:
                self._take(key, command, now_ms)

    def _take(self, key: bytes, command: Command, now_ms: int) -> None:
        ctx = self.ctx
        if command["type"] not in STOPPING and not ctx.tenants.registered(command["tenant"]):
            ctx.result(key, result_record(command, "REJECTED", now_ms, reason="UNKNOWN_TENANT",
                                          message=f"tenant {command['tenant']!r} is not registered"))
            return
        current = ctx.schedule(command["schedule_id"])
        manual = MANUAL.get(command["type"])
        if manual is not None:
            ctx.result(key, manual(self.timeline, command, current, now_ms))
            return
        decision = decide(command, current, now_ms)
        result = decision.result
        if result is None:  # a CREATE waiting for its slot: a Decision without a result has a state
            assert decision.state is not None
            ctx.save(decision.state)
            if decision.reserve:
                ctx.reserve(decision.state)
            return
        if decision.state is not None and result["status"] == "ACCEPTED":
            try:
                self._apply(current, decision, now_ms)
            except SpecError as exc:  # only a stored spec that no longer compiles (tzdata change)
                result = result_record(command, "REJECTED", now_ms, reason="INVALID_SPEC",
                                       message=f"{exc.field}: {exc.message}")
        ctx.result(key, result)

    def _reject_malformed(self, key: bytes | None, message: str, source: str, now_ms: int,
                          command: Command | None = None) -> None:
        base: Mapping[str, Any] = command or {"schedule_id": (key or b"").decode(errors="replace")}
        log.warning("rejected %s: %s", source, message)
        self.ctx.result(key, result_record(base, "REJECTED", now_ms, reason="MALFORMED_RECORD", message=message,
                                           source=source))

    def _apply(self, current: ScheduleState | None, decision: Decision, now_ms: int) -> None:
        ctx = self.ctx
        state = decision.state
        assert state is not None
        if current is not None:
            ctx.drop_wake(current)
            if decision.drop_pending_as:
                self.timeline.drop_pending(current, decision.drop_pending_as, now_ms)
        if decision.skipped_while_paused_from_ms is not None:
            skipped = resolve_misfire(compile_spec(state["spec"]),
                                      to_datetime(decision.skipped_while_paused_from_ms - 1),
                                      to_datetime(now_ms), timedelta(0), "SKIP", 0,
                                      fired_before=state["fired_count"])
            record_missed(ctx, state, skipped, "SKIPPED_PAUSED", "schedule was paused", now_ms)
        if decision.release:
            ctx.admission(state, "RELEASE", now_ms)
        if decision.first_fire_after_ms is not None:
            state = self.timeline.materialize(state, decision.first_fire_after_ms, now_ms)
        else:
            ctx.save(state)
        ctx.publish(state)
