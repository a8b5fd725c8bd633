"""The stream task of one input partition: schedules and timeline state, commands in, records out.

A task never talks to Kafka. It reads its ``PartitionStore`` through the open
``StoreTransaction`` and appends what must be produced to ``outbox``; the
runtime produces the outbox and the changelog in one Kafka transaction and
only then writes the store.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from scheduler.codec import DecodeError
from scheduler.engine import materialize, timeline_keys
from scheduler.engine.commands import Decision, decide, result_record
from scheduler.engine.instants import to_datetime, to_ms
from scheduler.engine.partition_store import PartitionStore, StoreTransaction
from scheduler.engine.specs import compile_spec
from scheduler.engine.timeline_keys import CATCH_UP, DISPATCH, NO_DEADLINE, WAKE, LocalEntry
from scheduler.timing.misfire import MisfireDecision, resolve_misfire
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.timing.spec import SpecError

log = logging.getLogger(__name__)

Record = dict[str, Any]
Output = tuple[str, bytes | None, bytes | None, int | None]  # topic, key, value, partition


@dataclass(frozen=True)
class TaskTopics:
    commands: str
    command_results: str
    occurrence_events: str
    schedules: str
    timeline: str

    def changelog(self, store: str) -> str:
        return self.schedules if store == "schedules" else self.timeline


class SchedulerTask:
    def __init__(self, partition: int, store: PartitionStore, topics: TaskTopics, codec: Any,
                 tenant_topic: Any, horizon_ms: int, ensure_tenant: Any) -> None:
        self.partition = partition
        self.store = store
        self.topics = topics
        self.codec = codec
        self.tenant_topic = tenant_topic          # (key, tenant, priority | None) -> topic name
        self.horizon_ms = horizon_ms
        self.ensure_tenant = ensure_tenant        # called before a tenant's first occurrence is planned
        self.txn = StoreTransaction(store)
        self.outbox: list[Output] = []
        self.timeline_changelog: dict[bytes, bytes] = {}
        self._floor = {DISPATCH: DISPATCH, CATCH_UP: CATCH_UP}

    # -- transaction boundaries -------------------------------------------------

    def changelog_records(self) -> Iterator[tuple[str, str, bytes, bytes | None]]:
        """(store, topic, key, value) for every change of this transaction; wake-ups are derived, not logged."""
        for key, value in self.txn.changes["schedules"].items():
            yield "schedules", self.topics.schedules, key, value
        for key, value in self.txn.changes["timeline"].items():
            if key[:1] == WAKE:
                continue
            yield "timeline", self.topics.timeline, key, None if value is None else self.timeline_changelog[key]

    def committed(self, offsets: dict[str, int]) -> None:
        for lane in (DISPATCH, CATCH_UP):
            for key, value in self.txn.changes["timeline"].items():
                if value is not None and key[:1] == lane and key < self._floor[lane]:
                    self._floor[lane] = key
        self.store.write(self.txn.changes, offsets)
        self.reset()

    def reset(self) -> None:
        self.txn = StoreTransaction(self.store)
        self.outbox = []
        self.timeline_changelog = {}

    # -- commands ---------------------------------------------------------------

    def on_command(self, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        source = f"{self.topics.commands}/{self.partition}/{offset}"
        try:
            command = self.codec.decode("Command", value or b"")
        except DecodeError as exc:
            self._reject_malformed(key, f"undecodable command: {exc}", source, now_ms)
            return
        if key is None or key.decode(errors="replace") != command["schedule_id"]:
            self._reject_malformed(key, "record key must equal the command's schedule_id", source, now_ms,
                                   command)
            return
        current_raw = self.txn.get("schedules", key)
        current = self.codec.decode("ScheduleState", current_raw) if current_raw else None
        decision = decide(command, current, now_ms)
        if decision.state is not None and decision.result["status"] == "ACCEPTED":
            try:
                self._apply(current, decision, now_ms)
            except SpecError as exc:  # only a stored spec that no longer compiles (tzdata change)
                decision = Decision(result_record(command, "REJECTED", now_ms, reason="INVALID_SPEC",
                                                  message=f"{exc.field}: {exc.message}"))
        self._send_result(key, decision.result)

    def _reject_malformed(self, key: bytes | None, message: str, source: str, now_ms: int,
                          command: Record | None = None) -> None:
        sid = (key or b"").decode(errors="replace")
        base = command or {"schedule_id": sid}
        result = result_record(base, "REJECTED", now_ms, reason="MALFORMED_RECORD", message=message, source=source)
        log.warning("rejected %s: %s", source, message)
        self._send_result(key, result)

    def _send_result(self, key: bytes | None, result: Record) -> None:
        self.outbox.append((self.topics.command_results, key, self.codec.encode("CommandResult", result),
                            self.partition))

    def _apply(self, current: Record | None, decision: Decision, now_ms: int) -> None:
        state = decision.state
        assert state is not None
        if current is not None:
            self._drop_wake(current)
            if decision.drop_pending_as:
                self._drop_pending(current, decision.drop_pending_as, now_ms)
        if decision.skipped_while_paused_from_ms is not None:
            skipped = resolve_misfire(compile_spec(state["spec"]),
                                      to_datetime(decision.skipped_while_paused_from_ms - 1),
                                      to_datetime(now_ms), timedelta(0), "SKIP", 0,
                                      fired_before=state["fired_count"])
            self._emit_missed(state, skipped, "SKIPPED_PAUSED", "schedule was paused", now_ms)
        self.ensure_tenant(state["tenant"])
        if decision.first_fire_after_ms is not None:
            state = self._materialize(state, decision.first_fire_after_ms, now_ms)
        else:
            self._save(state)
        self.outbox.append((self.tenant_topic("schedule-view", state["tenant"], None),
                            state["schedule_id"].encode(), self.codec.encode("ScheduleState", state), None))

    # -- timeline ---------------------------------------------------------------

    def _save(self, state: Record) -> None:
        self.txn.put("schedules", state["schedule_id"].encode(), self.codec.encode("ScheduleState", state))

    def _drop_wake(self, state: Record) -> None:
        if state.get("next_fire_ms") is not None:
            self.txn.delete("timeline", timeline_keys.wake_key(state["next_fire_ms"], state["schedule_id"]))

    def _drop_pending(self, state: Record, kind: str, now_ms: int) -> None:
        sid = state["schedule_id"]
        for ref in state.get("pending") or []:
            for lane in (DISPATCH, CATCH_UP):
                key = timeline_keys.occurrence_key(lane, ref["due_ms"], sid, ref["scheduled_for_ms"])
                if self.txn.get("timeline", key) is None:
                    continue
                self.txn.delete("timeline", key)
                oid = occurrence_id(sid, state["version"], to_datetime(ref["scheduled_for_ms"]))
                self._event(state, kind, f"version {state['version']} superseded", now_ms,
                            occurrence_id=oid, scheduled_for_ms=ref["scheduled_for_ms"])

    def _live_pending(self, state: Record) -> list[Record]:
        sid = state["schedule_id"]
        return [ref for ref in state.get("pending") or []
                if any(self.txn.get("timeline", timeline_keys.occurrence_key(
                    lane, ref["due_ms"], sid, ref["scheduled_for_ms"])) is not None
                    for lane in (DISPATCH, CATCH_UP))]

    def _materialize(self, state: Record, cursor_ms: int, now_ms: int) -> Record:
        spec = compile_spec(state["spec"])
        sid, version, spec_record = state["schedule_id"], state["version"], state["spec"]
        planned = materialize.plan(spec, spec_record, sid, version, cursor_ms, state["fired_count"],
                                   now_ms, self.horizon_ms)
        if planned.misfire is not None:
            self._emit_missed(state, planned.misfire, "MISSED", "later than max_lateness (misfire policy)", now_ms)
        pending = self._live_pending(state)
        priority = spec_record.get("priority", "NORMAL")
        topic = self.tenant_topic("occurrences", state["tenant"], priority.lower())
        max_lateness_ms = spec_record.get("max_lateness_ms", 0)
        for occ in planned.occurrences:
            lane = CATCH_UP if occ.catch_up else DISPATCH
            key = timeline_keys.occurrence_key(lane, occ.available_at_ms, sid, occ.scheduled_for_ms)
            body = self.codec.encode("Occurrence", {
                "occurrence_id": occ.occurrence_id, "schedule_id": sid, "tenant": state["tenant"],
                "schedule_version": version, "scheduled_for_ms": occ.scheduled_for_ms,
                "available_at_ms": occ.available_at_ms, "priority": priority,
                "payload": spec_record.get("payload", b""), "attempt": 1, "dst_rule": occ.dst_rule,
                "catch_up": occ.catch_up,
            })
            deadline = NO_DEADLINE if occ.catch_up else occ.available_at_ms + max_lateness_ms
            self.txn.put("timeline", key, LocalEntry(state["tenant"], sid, topic, body, deadline).pack())
            self.timeline_changelog[key] = self.codec.encode("TimelineEntry", {
                "schedule_id": sid, "tenant": state["tenant"], "schedule_version": version,
                "occurrence_id": occ.occurrence_id, "scheduled_for_ms": occ.scheduled_for_ms,
                "available_at_ms": occ.available_at_ms, "topic": topic,
                "deadline_ms": None if occ.catch_up else deadline,
                "lane": "CATCH_UP" if occ.catch_up else "STRICT", "occurrence": body,
            })
            pending.append({"due_ms": occ.available_at_ms, "scheduled_for_ms": occ.scheduled_for_ms})
        state = {**state, "pending": pending, "next_fire_ms": planned.next_fire_ms,
                 "fired_count": planned.fired_count}
        if planned.next_fire_ms is not None:
            self.txn.put("timeline", timeline_keys.wake_key(planned.next_fire_ms, sid), b"")
        self._save(state)
        return state

    def replan_late(self, schedule_id: str, now_ms: int) -> None:
        """A materialized entry missed its deadline (downtime, overload): its schedule's misfire policy decides.

        The schedule's pending entries are taken back and every fire from the
        oldest of them on is planned again; the occurrence ids are the same, so
        entries that are still on time come back unchanged.
        """
        raw = self.txn.get("schedules", schedule_id.encode())
        if raw is None:
            return
        state = self.codec.decode("ScheduleState", raw)
        pending = self._live_pending(state)
        if not pending:
            return
        for ref in pending:
            for lane in (DISPATCH, CATCH_UP):
                self.txn.delete("timeline", timeline_keys.occurrence_key(
                    lane, ref["due_ms"], schedule_id, ref["scheduled_for_ms"]))
        self._drop_wake(state)
        cursor_ms = min(ref["scheduled_for_ms"] for ref in pending) - 1
        state = {**state, "pending": [], "fired_count": state["fired_count"] - len(pending)}
        self._materialize(state, cursor_ms, now_ms)

    def _emit_missed(self, state: Record, decision: MisfireDecision, kind: str, reason: str, now_ms: int) -> None:
        sid, version = state["schedule_id"], state["version"]
        for fire in decision.missed:
            at_ms = to_ms(fire.scheduled_for)
            self._event(state, kind, reason, now_ms, occurrence_id=occurrence_id(sid, version, fire.scheduled_for),
                        scheduled_for_ms=at_ms)
        rest = decision.missed_count - len(decision.missed)
        if rest > 0 and decision.missed_first is not None:
            last_ms = (to_ms(decision.missed[0].scheduled_for) - 1 if decision.missed
                       else to_ms(decision.missed_last or decision.missed_first))
            self._event(state, kind, reason, now_ms, range_first_ms=to_ms(decision.missed_first),
                        range_last_ms=last_ms, count=rest)

    def _event(self, state: Record, kind: str, reason: str, now_ms: int, *, occurrence_id: str | None = None,
               scheduled_for_ms: int | None = None, range_first_ms: int | None = None,
               range_last_ms: int | None = None, count: int = 1) -> None:
        event = {
            "occurrence_id": occurrence_id, "schedule_id": state["schedule_id"], "tenant": state["tenant"],
            "schedule_version": state["version"], "scheduled_for_ms": scheduled_for_ms, "kind": kind,
            "reason": reason, "range_first_ms": range_first_ms, "range_last_ms": range_last_ms,
            "count": count, "recorded_at_ms": now_ms,
        }
        self.outbox.append((self.topics.occurrence_events, state["schedule_id"].encode(),
                            self.codec.encode("OccurrenceEvent", event), None))

    def materialize_due(self, now_ms: int, budget: int) -> int:
        """Plan the schedules whose next fire enters the horizon; returns how many were planned."""
        bound = timeline_keys.lane_bound(WAKE, now_ms + self.horizon_ms)
        due = []
        for key in self.store.keys_from("timeline", WAKE):
            if key >= bound or len(due) >= budget:
                break
            if not self.txn.is_deleted("timeline", key):
                due.append(key)
        for key in due:
            sid = timeline_keys.wake_schedule_id(key)
            raw = self.txn.get("schedules", sid.encode())
            self.txn.delete("timeline", key)
            if raw is None:
                continue
            state = self.codec.decode("ScheduleState", raw)
            if state["state"] != "ACTIVE" or state.get("next_fire_ms") != timeline_keys.due_ms_of(key):
                continue
            self.ensure_tenant(state["tenant"])
            self._materialize(state, state["next_fire_ms"] - 1, now_ms)
        return len(due)

    def due(self, lane: bytes, now_ms: int) -> Iterator[tuple[bytes, LocalEntry]]:
        """Entries of `lane` due by `now_ms`, in due order, skipping those dropped in this transaction."""
        bound = timeline_keys.lane_bound(lane, now_ms)
        first = True
        for key, value in self.store.items_from("timeline", self._floor[lane]):
            if key >= bound:
                break
            if first:
                self._floor[lane] = key
                first = False
            if self.txn.is_deleted("timeline", key):
                continue
            yield key, LocalEntry.unpack(value)

    def dispatched(self, key: bytes) -> None:
        self.txn.delete("timeline", key)

    def has_wake_due(self, limit_ms: int) -> bool:
        for key in self.store.keys_from("timeline", WAKE):
            return key[:1] == WAKE and timeline_keys.due_ms_of(key) <= limit_ms
        return False

    def next_due_ms(self, lane: bytes) -> int | None:
        for key in self.store.keys_from("timeline", self._floor[lane]):
            if key[:1] != lane:
                return None
            self._floor[lane] = key
            return timeline_keys.due_ms_of(key)
        return None
