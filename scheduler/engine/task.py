"""The stream task of one input partition: schedule, timeline and occurrence state; commands and attempts in.

A task never talks to Kafka. It reads its ``PartitionStore`` through the open
``StoreTransaction`` and appends what must be produced to ``outbox``; the
runtime produces the outbox and the changelog in one Kafka transaction and
only then writes the store.
"""
from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from scheduler.codec import DecodeError
from scheduler.engine import leases, materialize, overlap, running_slots, timeline_keys
from scheduler.engine.attempts import FINISHED, apply_attempt, lease_ms
from scheduler.engine.commands import MAX_BACKFILL, HOLDS_SLOT, Decision, admitted, decide, result_record
from scheduler.engine.instants import to_datetime, to_ms
from scheduler.engine.partition_store import PartitionStore, StoreTransaction
from scheduler.engine.specs import compile_spec
from scheduler.engine.staging import StagedPartition
from scheduler.engine.timeline_keys import CATCH_UP, DISPATCH, END, NO_DEADLINE, WAKE, LocalEntry
from scheduler.timing.fires import fires_between
from scheduler.timing.misfire import MisfireDecision, resolve_misfire
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.timing.spec import SpecError

log = logging.getLogger(__name__)

Record = dict[str, Any]
Output = tuple[str, bytes | None, bytes | None, int | None]  # topic, key, value, partition
Due = tuple[bytes, LocalEntry]


@dataclass(frozen=True)
class TaskTopics:
    commands: str
    attempts: str
    admissions: str
    admission_results: str
    command_results: str
    occurrence_events: str
    changelogs: dict[str, str]  # store -> changelog topic


# The occurrence state an event about one occurrence leaves it in, so it can be looked up by id.
EVENT_STATES = {"MISSED": "MISSED", "SKIPPED_PAUSED": "CANCELED", "INVALIDATED": "CANCELED",
                "CANCELED": "CANCELED", "SKIPPED_OVERLAP": "SKIPPED_OVERLAP", "EXCLUDED": "CANCELED"}
RANKS_KEPT = 100_000
# Commands that only stop work are still taken for a tenant no longer registered (deleted with --force),
# so its leftover schedules can be wound down; every other command of an unregistered tenant is refused.
STOPPING = frozenset({"PAUSE", "CANCEL"})
LOST_KEPT = 20  # lost attempts a schedule's view names, for the workers that may still run them


class SchedulerTask:
    def __init__(self, partition: int, store: PartitionStore, topics: TaskTopics, codec: Any,
                 tenant_topic: Callable[[str, str, str | None], str], horizon_ms: int,
                 ensure_tenant: Callable[[str], None], retry_allowed: Callable[[str, int], bool],
                 max_active_schedules: Callable[[str], int], max_concurrency: Callable[[str], int | None],
                 partitions: int, tenant_registered: Callable[[str], bool] = lambda tenant: True) -> None:
        self.partition = partition
        self.store = store
        self.topics = topics
        self.codec = codec
        self.tenant_topic = tenant_topic      # (topic key, tenant, priority | None) -> topic name
        self.horizon_ms = horizon_ms
        self.ensure_tenant = ensure_tenant    # before a tenant's first record is produced
        self.retry_allowed = retry_allowed    # (tenant, now_ms) -> within the tenant's retry budget
        self.max_active_schedules = max_active_schedules  # tenant -> its quota
        self.max_concurrency = max_concurrency  # tenant -> its running-slot quota, None: unlimited
        self.partitions = partitions            # of the schedule topics, for the running-slot ledger
        self.tenant_registered = tenant_registered  # tenant -> in the registry (always True with --open-tenants)
        self.slots = running_slots.RunningSlots(max_concurrency)
        self._floor = {DISPATCH: DISPATCH, CATCH_UP: CATCH_UP}  # no entry of a lane sorts before its floor
        self._ranks: dict[tuple[bytes, int, str], int] = {}      # (lane, due, tenant) -> next rank given
        self._staged: StagedPartition | None = None  # this partition's part of the open stage, if any
        self._staged_puts: dict[bytes, bytes] = {}  # strict entries written into the staged instant since it began
        self._sent_staged: set[bytes] = set()  # timeline keys a stage's commit sent, not yet deleted here
        self._leases_from_ms: int | None = None  # this task's first lease check (scheduler.engine.leases)
        self.reset()

    # -- transaction boundaries -------------------------------------------------

    def changelog_records(self) -> dict[str, list[tuple[str, bytes, bytes | None]]]:
        """store -> (topic, key, value) of every change of this transaction; wake-ups are derived, not logged."""
        records: dict[str, list[tuple[str, bytes, bytes | None]]] = {}
        for store, changes in self.txn.changes.items():
            topic = self.topics.changelogs[store]
            if store != "timeline":
                found = [(topic, key, value) for key, value in changes.items()]
            else:
                found = [(topic, key, None if value is None else self.timeline_changelog[key])
                         for key, value in changes.items() if key[:1] not in (WAKE, END)]
            if found:
                records[store] = found
        return records

    def committed(self, offsets: dict[str, int]) -> None:
        changes = self.txn.changes["timeline"]
        for lane, scanned in self._scanned.items():
            if not scanned:
                continue
            # Move the scan start past what this turn dispatched, so later scans and seeks never walk
            # over the tombstones it leaves in RocksDB.
            live = next((key for key in scanned if changes.get(key, b"") is not None), None)
            self._floor[lane] = live if live is not None else scanned[-1] + b"\x00"
        for key, value in changes.items():
            lane = key[:1]
            if value is not None and lane in self._floor and key < self._floor[lane]:
                self._floor[lane] = key
            if lane == DISPATCH:
                staged = self._staged
                if value is not None and staged is not None and staged.start <= key < staged.end:
                    self._staged_puts[key] = value
                self._sent_staged.discard(key)  # deleted, or written anew: live, whatever a stage sent under it
        self.store.write(self.txn.changes, offsets)
        self.reset()

    def reset(self) -> None:
        """Forget the open transaction's work (after its commit, or on abort)."""
        self.txn = StoreTransaction(self.store)
        self.outbox: list[Output] = []
        self.timeline_changelog: dict[bytes, bytes] = {}
        self.schedule_wakes: dict[bytes, bytes] = {}  # schedule key -> its wake-up key (b"": none), for restore
        self._scanned: dict[bytes, list[bytes]] = {}  # keys each lane's scan met this turn
        self.event_counts: Counter[str] = Counter()  # occurrences not sent, per event kind (for metrics)
        self.dead_letters: Counter[str] = Counter()  # per tenant
        self.slots.new_turn()

    # -- records in ---------------------------------------------------------------

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
        if command["type"] not in STOPPING and not self.tenant_registered(command["tenant"]):
            self._send_result(key, result_record(command, "REJECTED", now_ms, reason="UNKNOWN_TENANT",
                                                 message=f"tenant {command['tenant']!r} is not registered"))
            return
        current = self._schedule(command["schedule_id"])
        manual = {"RERUN": self._rerun, "TRIGGER": self._trigger, "BACKFILL": self._backfill}.get(command["type"])
        if manual is not None:
            self._send_result(key, manual(command, current, now_ms))
            return
        decision = decide(command, current, now_ms)
        if decision.result is None:
            self._save(decision.state)
            if decision.reserve:
                self._admission(decision.state, "RESERVE", now_ms)
            return
        if decision.state is not None and decision.result["status"] == "ACCEPTED":
            try:
                self._apply(current, decision, now_ms)
            except SpecError as exc:  # only a stored spec that no longer compiles (tzdata change)
                decision = Decision(result_record(command, "REJECTED", now_ms, reason="INVALID_SPEC",
                                                  message=f"{exc.field}: {exc.message}"))
        self._send_result(key, decision.result)

    def on_admission_request(self, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        """This partition's share of tenants: count their active schedules and grant or refuse slots."""
        request = self._decode("AdmissionRequest", self.topics.admissions, key, value, offset, now_ms)
        if request is None:
            return
        if request["kind"] in ("WANT_RUNNING", "RETURN_RUNNING"):
            self._running_slot_request(request, now_ms)
            return
        tenant = request["tenant"].encode()
        raw = self.txn.get("admissions", tenant)
        count = int.from_bytes(raw, "big") if raw else 0
        if request["kind"] == "RELEASE":
            self.txn.put("admissions", tenant, max(0, count - 1).to_bytes(8, "big"))
            return
        quota = self.max_active_schedules(request["tenant"])
        granted = count < quota
        if granted:
            count += 1
            self.txn.put("admissions", tenant, count.to_bytes(8, "big"))
        self.outbox.append((self.topics.admission_results, request["schedule_id"].encode(),
                            self.codec.encode("AdmissionResult", {
                                "tenant": request["tenant"], "schedule_id": request["schedule_id"],
                                "granted": granted, "active_schedules": count, "max_active_schedules": quota,
                                "decided_at_ms": now_ms}), None))

    def on_admission_result(self, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        answer = self._decode("AdmissionResult", self.topics.admission_results, key, value, offset, now_ms)
        if answer is None:
            return
        if answer["running_slots"] is not None:
            self.slots.granted(self.txn, answer["tenant"], answer["running_slots"])
            return
        state = self._schedule(answer["schedule_id"])
        if state is None or state["state"] != "PENDING" or state["tenant"] != answer["tenant"]:
            if answer["granted"]:  # nobody waits for this slot any more: give it back so the count stays exact
                self._admission({"tenant": answer["tenant"], "schedule_id": answer["schedule_id"]}, "RELEASE", now_ms)
            return
        waiters = state["admission_waiters"]
        base = {"type": "CREATE", "schedule_id": state["schedule_id"], "tenant": state["tenant"]}
        if not answer["granted"]:
            self.txn.delete("schedules", state["schedule_id"].encode())
            message = (f"tenant {state['tenant']!r} has {answer['active_schedules']} active schedules, "
                       f"its quota is {answer['max_active_schedules']}")
            for command_id in waiters:
                self._send_result(key, result_record({**base, "command_id": command_id}, "REJECTED", now_ms,
                                                     reason="QUOTA", message=message))
            return
        state, cursor_ms = admitted(state, now_ms)
        self.ensure_tenant(state["tenant"])
        state = self._materialize(state, cursor_ms, now_ms)
        self._publish(state)
        for command_id in waiters:
            self._send_result(key, result_record({**base, "command_id": command_id}, "ACCEPTED", now_ms,
                                                 version=state["version"], next_fires_ms=state["first_next_fires_ms"]))

    def _running_slot_request(self, request: Record, now_ms: int) -> None:
        """The tenant's running-slot ledger: record the wish or the returned slots, send out what changes."""
        tenant, partition = request["tenant"], request["partition"]
        quota = self.max_concurrency(tenant)
        if partition is None or not 0 <= partition < self.partitions:
            log.warning("running-slot request of %s for partition %s ignored", tenant, partition)
            return
        changes = running_slots.ledger_change(self.txn, tenant, request["kind"], partition, request["count"],
                                              quota if quota is not None else 2**62, self.partitions)
        for receiver, slots in changes.items():
            self.outbox.append((self.topics.admission_results, tenant.encode(), self.codec.encode("AdmissionResult", {
                "tenant": tenant, "schedule_id": "", "granted": slots > 0, "active_schedules": 0,
                "max_active_schedules": 0, "decided_at_ms": now_ms, "running_slots": slots}), receiver))

    def settle_running_slots(self, now_ms: int) -> None:
        """After dispatch: give idle running slots back, ask for the ones that were missing."""
        for message in self.slots.settle(self.txn, now_ms):
            self.outbox.append((self.topics.admissions, message.tenant.encode(), self.codec.encode(
                "AdmissionRequest", {"tenant": message.tenant, "schedule_id": "", "kind": message.kind,
                                     "requested_at_ms": now_ms, "partition": self.partition,
                                     "count": message.count}), None))

    def _admission(self, state: Record, kind: str, now_ms: int) -> None:
        self.outbox.append((self.topics.admissions, state["tenant"].encode(), self.codec.encode("AdmissionRequest", {
            "tenant": state["tenant"], "schedule_id": state["schedule_id"], "kind": kind,
            "requested_at_ms": now_ms}), None))

    def _publish(self, state: Record) -> None:
        """The tenant's own view of its schedules, which its workers follow."""
        self.outbox.append((self.tenant_topic("schedule-view", state["tenant"], None),
                            state["schedule_id"].encode(), self.codec.encode("ScheduleState", state), None))

    def on_attempt(self, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        event = self._decode("AttemptEvent", self.topics.attempts, key, value, offset, now_ms)
        if event is None:
            return
        if event["kind"] == "LOST":  # the scheduler's own verdict, never a worker's
            log.warning("ignored a LOST attempt event from worker %s", event["worker_id"])
            return
        self._apply_attempt(event, self._status(event["occurrence_id"]), now_ms)

    def expire_leases(self, now_ms: int, budget: int = 1000) -> None:
        """Record LOST for the attempts whose lease expired, which retries them (scheduler.engine.leases)."""
        if self._leases_from_ms is None:
            self._leases_from_ms = now_ms
        for expires_ms, oid in leases.expired(self.txn, now_ms, budget):
            status = self._status(oid)
            if status is None or status["state"] != "RUNNING" or status.get("lease_expires_at_ms") != expires_ms:
                leases.move(self.txn, oid, expires_ms, None)  # left behind by a state this index missed
                continue
            schedule = self._schedule(status["schedule_id"])
            lease = lease_ms(schedule)
            if self._leases_from_ms + lease > now_ms:  # inherited: one full lease of this task's own first
                renewed = self._leases_from_ms + lease
                leases.move(self.txn, oid, expires_ms, renewed)
                self._put_status({**status, "lease_expires_at_ms": renewed})
                continue
            log.info("occurrence %s attempt %d lost its lease (%d ms without a heartbeat)", oid,
                     status["attempt"], lease)
            self._apply_attempt(leases.lost_event(status, now_ms, lease), status, now_ms)

    def has_expired_lease(self, now_ms: int) -> bool:
        return leases.has_expired(self.txn, now_ms)

    def _apply_attempt(self, event: Record, status: Record | None, now_ms: int) -> None:
        schedule = self._schedule(event["schedule_id"])
        if schedule is not None and schedule["tenant"] != event["tenant"]:
            schedule = None
        outcome = apply_attempt(event, status, schedule, now_ms,
                                retry_budget_left=self.retry_allowed(event["tenant"], now_ms))
        if outcome.status is None:
            log.debug("ignored attempt event for %s: %s", event["occurrence_id"], outcome.ignored_reason)
            return
        leases.move(self.txn, event["occurrence_id"], (status or {}).get("lease_expires_at_ms"),
                    outcome.status.get("lease_expires_at_ms"))
        self._put_status(outcome.status)
        if outcome.finished:
            self.slots.finished(self.txn, event["tenant"], event["occurrence_id"])
        elif schedule is not None and event["kind"] in ("STARTED", "HEARTBEAT"):
            self.slots.refreshed(self.txn, event["tenant"], event["occurrence_id"],
                                 now_ms + schedule["spec"]["run_timeout_ms"])
        if schedule is None:
            return
        before = schedule
        if outcome.finished or event["kind"] in ("STARTED", "HEARTBEAT"):
            schedule = self._track_running(schedule, event, outcome.finished, now_ms)
        if outcome.retry_at_ms is not None:
            self.ensure_tenant(schedule["tenant"])
            ref = self._enqueue(schedule, event["occurrence_id"], event["scheduled_for_ms"], outcome.retry_at_ms,
                                attempt=event["attempt"] + 1, dst_rule=None, catch_up=False)
            schedule = {**schedule, "pending": [*schedule["pending"], ref]}
        if outcome.dead_reason is not None:
            self._dead_letter(schedule, outcome.status, outcome.dead_reason, now_ms)
        if outcome.lost is not None:
            schedule = {**schedule, "lost_attempts": [*schedule.get("lost_attempts", []), outcome.lost][-LOST_KEPT:]}
            self._publish(schedule)  # the worker holding the attempt follows the tenant's view
        if schedule is not before:
            self._save(schedule)

    # -- commands -----------------------------------------------------------------

    def _reject_malformed(self, key: bytes | None, message: str, source: str, now_ms: int,
                          command: Record | None = None) -> None:
        base = command or {"schedule_id": (key or b"").decode(errors="replace")}
        log.warning("rejected %s: %s", source, message)
        self._send_result(key, result_record(base, "REJECTED", now_ms, reason="MALFORMED_RECORD", message=message,
                                             source=source))

    def _decode(self, schema: str, topic: str, key: bytes | None, value: bytes | None, offset: int,
                now_ms: int) -> Record | None:
        """An input record that cannot be decoded is reported with its position, and processing goes on."""
        try:
            return self.codec.decode(schema, value or b"")
        except DecodeError as exc:
            source = f"{topic}/{self.partition}/{offset}"
            log.warning("rejected %s: %s", source, exc)
            self.outbox.append((self.topics.occurrence_events, key, self.codec.encode("OccurrenceEvent", {
                "occurrence_id": None, "schedule_id": (key or b"").decode(errors="replace"), "tenant": "",
                "schedule_version": 0, "scheduled_for_ms": None, "kind": "REJECTED_INPUT",
                "reason": f"{source}: undecodable {schema}: {exc}", "range_first_ms": None, "range_last_ms": None,
                "count": 1, "recorded_at_ms": now_ms}), self.partition))
            self.event_counts["REJECTED_INPUT"] += 1
            return None

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
        if decision.release:
            self._admission(state, "RELEASE", now_ms)
        self.ensure_tenant(state["tenant"])
        if decision.first_fire_after_ms is not None:
            state = self._materialize(state, decision.first_fire_after_ms, now_ms)
        else:
            self._save(state)
        self._publish(state)

    def _rerun(self, command: Record, schedule: Record | None, now_ms: int) -> Record:
        """Dispatch a finished or dead occurrence again, with the same occurrence_id and the next attempt number."""
        status = self._status(command.get("occurrence_id") or "")
        if schedule is None or status is None or status["schedule_id"] != command["schedule_id"] \
                or schedule["tenant"] != command["tenant"]:
            return result_record(command, "REJECTED", now_ms, reason="UNKNOWN_OCCURRENCE",
                                 message=f"no finished occurrence {command.get('occurrence_id')!r} of this schedule")
        if status["state"] not in FINISHED:
            return result_record(command, "REJECTED", now_ms, reason="INVALID_STATE",
                                 message=f"occurrence is {status['state']}: only finished or dead ones re-run")
        attempt = status["attempt"] + 1
        self.ensure_tenant(schedule["tenant"])
        ref = self._enqueue(schedule, status["occurrence_id"], status["scheduled_for_ms"], now_ms, attempt=attempt,
                            dst_rule=None, catch_up=False, version=status["schedule_version"])
        self._save({**schedule, "pending": [*schedule["pending"], ref]})
        self._put_status({**status, "state": "ENQUEUED", "attempt": attempt, "attempt_token": None,
                          "updated_at_ms": now_ms})
        return result_record(command, "ACCEPTED", now_ms, version=schedule["version"], next_fires_ms=[now_ms])

    def _trigger(self, command: Record, schedule: Record | None, now_ms: int) -> Record:
        """Fire one occurrence now, outside the schedule's own times (its instant is the command's processing time)."""
        if schedule is None or schedule["tenant"] != command["tenant"] or schedule["state"] not in HOLDS_SLOT:
            return self._no_schedule(command, schedule, now_ms)
        self.ensure_tenant(schedule["tenant"])
        oid = occurrence_id(schedule["schedule_id"], schedule["version"], to_datetime(now_ms))
        ref = self._enqueue(schedule, oid, now_ms, now_ms, attempt=1, dst_rule=None, catch_up=False)
        self._save({**schedule, "pending": [*schedule["pending"], ref]})
        return result_record(command, "ACCEPTED", now_ms, version=schedule["version"], next_fires_ms=[now_ms])

    def _backfill(self, command: Record, schedule: Record | None, now_ms: int) -> Record:
        """Replay the fires a past range would have had, through the catch-up lane and its own capacity."""
        if schedule is None or schedule["tenant"] != command["tenant"] or schedule["state"] in ("PENDING",):
            return self._no_schedule(command, schedule, now_ms)
        first, last = command.get("backfill_from_ms"), command.get("backfill_to_ms")
        if first is None or last is None or first > last or last > now_ms:
            return result_record(command, "REJECTED", now_ms, reason="INVALID_SPEC",
                                 message="backfill: need backfill_from_ms <= backfill_to_ms <= now")
        fires = fires_between(compile_spec(schedule["spec"]), to_datetime(first - 1), to_datetime(last),
                              limit=MAX_BACKFILL + 1)
        if len(fires) > MAX_BACKFILL:
            return result_record(command, "REJECTED", now_ms, reason="INVALID_SPEC",
                                 message=f"backfill: the range holds more than {MAX_BACKFILL} fires; split it")
        self.ensure_tenant(schedule["tenant"])
        policy = command.get("overlap_override") or schedule["spec"]["overlap_policy"]
        target = {**schedule, "spec": {**schedule["spec"], "overlap_policy": policy}}
        refs = []
        for fire in fires:
            at_ms = to_ms(fire.scheduled_for)
            oid = occurrence_id(schedule["schedule_id"], schedule["version"], fire.scheduled_for)
            refs.append(self._enqueue(target, oid, at_ms, at_ms, attempt=1, dst_rule=fire.dst_rule, catch_up=True))
        self._save({**schedule, "pending": [*schedule["pending"], *refs]})
        return result_record(command, "ACCEPTED", now_ms, version=schedule["version"],
                             next_fires_ms=[ref["scheduled_for_ms"] for ref in refs])

    def _no_schedule(self, command: Record, schedule: Record | None, now_ms: int) -> Record:
        if schedule is None or schedule["tenant"] != command["tenant"]:
            return result_record(command, "REJECTED", now_ms, reason="UNKNOWN_SCHEDULE",
                                 message=f"schedule {command['schedule_id']!r} does not exist")
        return result_record(command, "REJECTED", now_ms, reason="INVALID_STATE",
                             message=f"schedule {command['schedule_id']!r} is {schedule['state']}")

    # -- state --------------------------------------------------------------------

    def _schedule(self, schedule_id: str) -> Record | None:
        raw = self.txn.get("schedules", schedule_id.encode())
        return self.codec.decode("ScheduleState", raw) if raw else None

    def _status(self, occurrence_id: str) -> Record | None:
        raw = self.txn.get("occurrences", occurrence_id.encode())
        return self.codec.decode("OccurrenceStatus", raw) if raw else None

    def _put_status(self, status: Record) -> None:
        self.txn.put("occurrences", status["occurrence_id"].encode(), self.codec.encode("OccurrenceStatus", status))

    def _track_running(self, schedule: Record, event: Record, finished: bool, now_ms: int) -> Record:
        if schedule["spec"]["overlap_policy"] == overlap.ALLOW:
            return schedule
        others = [r for r in schedule["running"] if r["occurrence_id"] != event["occurrence_id"]]
        if finished:
            return {**schedule, "running": others}
        mine = {"occurrence_id": event["occurrence_id"], "attempt_token": event["attempt_token"], "since_ms": now_ms}
        return {**schedule, "running": [*others, mine]}

    def _dead_letter(self, schedule: Record, status: Record, reason: str, now_ms: int) -> None:
        occurrence = self._occurrence_record(schedule, status["occurrence_id"], status["scheduled_for_ms"],
                                             status["scheduled_for_ms"], status["attempt"], None, False,
                                             status["schedule_version"])
        self.outbox.append((self.tenant_topic("dead-letters", schedule["tenant"], None),
                            schedule["schedule_id"].encode(), self.codec.encode("DeadLetter", {
                                "occurrence": occurrence, "history": status["attempts"], "reason": reason,
                                "dead_at_ms": now_ms}), None))
        self.dead_letters[schedule["tenant"]] += 1

    # -- timeline -----------------------------------------------------------------

    def _drop_wake(self, state: Record) -> None:
        wake = timeline_keys.wake_key(state)
        if wake is not None:
            self.txn.delete("timeline", wake)

    def _save(self, state: Record) -> None:
        """Store the schedule and put its wake-up where `wake_key` says; a wake-up left behind by an
        earlier state no longer matches the schedule and is dropped when it falls due."""
        wake = timeline_keys.wake_key(state)
        if wake is not None:
            self.txn.put("timeline", wake, b"")
        key = state["schedule_id"].encode()
        self.txn.put("schedules", key, self.codec.encode("ScheduleState", state))
        self.schedule_wakes[key] = wake or b""

    def _pending_keys(self, state: Record) -> Iterator[tuple[Record, bytes]]:
        sid = state["schedule_id"]
        for ref in state.get("pending") or []:
            for lane in (DISPATCH, CATCH_UP):
                key = timeline_keys.occurrence_key(lane, ref["due_ms"], sid, ref["scheduled_for_ms"], ref["rank"])
                if self.txn.get("timeline", key) is not None:
                    yield ref, key

    def _drop_pending(self, state: Record, kind: str, now_ms: int) -> None:
        """The change wins over the old version's occurrences not yet sent, even those already due (their
        partition was behind or failing over): each is reported, saying which it was."""
        for ref, key in list(self._pending_keys(state)):
            entry = LocalEntry.unpack(self.txn.get("timeline", key) or b"")
            self.txn.delete("timeline", key)
            overdue_ms = now_ms - ref["due_ms"]
            if overdue_ms >= 0:
                # SKIPPED_PAUSED is for fires due while paused; this one was due before the pause.
                reported = "INVALIDATED" if kind == "SKIPPED_PAUSED" else kind
                reason = (f"version {state['version']} superseded; due {overdue_ms} ms before the change was "
                          "accepted, not yet dispatched")
            else:
                reported, reason = kind, f"version {state['version']} superseded"
            self._event(state, reported, reason, now_ms, occurrence_id=entry.occurrence_id,
                        scheduled_for_ms=ref["scheduled_for_ms"])

    def _occurrence_record(self, state: Record, oid: str, scheduled_for_ms: int, available_at_ms: int,
                           attempt: int, dst_rule: str | None, catch_up: bool, version: int) -> Record:
        spec = state["spec"]
        return {"occurrence_id": oid, "schedule_id": state["schedule_id"], "tenant": state["tenant"],
                "schedule_version": version, "scheduled_for_ms": scheduled_for_ms,
                "available_at_ms": available_at_ms, "priority": spec["priority"], "payload": spec["payload"],
                "attempt": attempt, "dst_rule": dst_rule, "catch_up": catch_up, "lease_ms": lease_ms(state)}

    def _enqueue(self, state: Record, oid: str, scheduled_for_ms: int, available_at_ms: int, *, attempt: int,
                 dst_rule: str | None, catch_up: bool, version: int | None = None) -> Record:
        """Put one ready-to-send occurrence in the timeline; returns its ref for the schedule's pending list."""
        spec = state["spec"]
        version = state["version"] if version is None else version
        sid, tenant = state["schedule_id"], state["tenant"]
        topic = self.tenant_topic("occurrences", tenant, spec["priority"].lower())
        lane = CATCH_UP if catch_up else DISPATCH
        rank_of = (lane, available_at_ms, tenant)
        rank = self._ranks.get(rank_of, 0)
        self._ranks[rank_of] = rank + 1
        key = timeline_keys.occurrence_key(lane, available_at_ms, sid, scheduled_for_ms, rank)
        body = self.codec.encode("Occurrence", self._occurrence_record(
            state, oid, scheduled_for_ms, available_at_ms, attempt, dst_rule, catch_up, version))
        deadline = NO_DEADLINE if catch_up else available_at_ms + spec["max_lateness_ms"]
        policy = spec["overlap_policy"]
        self.txn.put("timeline", key, LocalEntry(tenant, sid, topic, oid, body, deadline, policy).pack())
        self.timeline_changelog[key] = self.codec.encode("TimelineEntry", {
            "schedule_id": sid, "tenant": tenant, "schedule_version": version, "occurrence_id": oid,
            "scheduled_for_ms": scheduled_for_ms, "available_at_ms": available_at_ms,
            "deadline_ms": None if catch_up else deadline, "overlap_policy": policy, "topic": topic,
            "lane": "CATCH_UP" if catch_up else "STRICT", "occurrence": body,
        })
        return {"due_ms": available_at_ms, "scheduled_for_ms": scheduled_for_ms, "rank": rank}

    def _materialize(self, state: Record, cursor_ms: int, now_ms: int, recorded_until_ms: int | None = None) -> Record:
        spec = compile_spec(state["spec"])
        planned = materialize.plan(spec, state["spec"], state["schedule_id"], state["version"], cursor_ms,
                                   state["fired_count"], now_ms, self.horizon_ms, recorded_until_ms)
        if planned.misfire is not None:
            self._emit_missed(state, planned.misfire, "MISSED", "later than max_lateness (misfire policy)", now_ms)
        for skipped in planned.excluded:
            self._event(state, "EXCLUDED", "an EXDATE of the schedule's recurrence rule", now_ms,
                        occurrence_id=skipped.occurrence_id, scheduled_for_ms=skipped.scheduled_for_ms)
        pending = [ref for ref, _ in self._pending_keys(state)]
        for occ in planned.occurrences:
            pending.append(self._enqueue(state, occ.occurrence_id, occ.scheduled_for_ms, occ.available_at_ms,
                                         attempt=1, dst_rule=occ.dst_rule, catch_up=occ.catch_up))
        state = {**state, "pending": pending, "next_fire_ms": planned.next_fire_ms,
                 "fired_count": planned.fired_count}
        self._save(state)
        return state

    def replan_late(self, schedule_id: str, now_ms: int) -> None:
        """A materialized entry missed its deadline (downtime, overload): its schedule's misfire policy decides.

        The schedule's pending entries are taken back and every fire from the
        oldest of them on is planned again; the occurrence ids are the same, so
        entries that are still on time come back unchanged.
        """
        state = self._schedule(schedule_id)
        if state is None:
            return
        pending = list(self._pending_keys(state))
        if not pending:
            return
        for _, key in pending:
            self.txn.delete("timeline", key)
        self._drop_wake(state)
        cursor_ms = min(ref["scheduled_for_ms"] for ref, _ in pending) - 1
        # The earlier pass recorded EXDATE'd fires up to where it stopped: not again.
        recorded_until_ms = (state["next_fire_ms"] - 1 if state.get("next_fire_ms") is not None
                             else max(ref["scheduled_for_ms"] for ref, _ in pending))
        state = {**state, "pending": [], "fired_count": state["fired_count"] - len(pending)}
        self._materialize(state, cursor_ms, now_ms, recorded_until_ms)

    def _emit_missed(self, state: Record, decision: MisfireDecision, kind: str, reason: str, now_ms: int) -> None:
        sid, version = state["schedule_id"], state["version"]
        for fire in decision.missed:
            self._event(state, kind, reason, now_ms, occurrence_id=occurrence_id(sid, version, fire.scheduled_for),
                        scheduled_for_ms=to_ms(fire.scheduled_for))
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
        self.event_counts[kind] += count
        if occurrence_id is not None and scheduled_for_ms is not None:
            self._put_status({**(self._status(occurrence_id) or {"attempt": 1, "attempts": []}),
                              "occurrence_id": occurrence_id, "schedule_id": state["schedule_id"],
                              "tenant": state["tenant"], "schedule_version": state["version"],
                              "scheduled_for_ms": scheduled_for_ms, "state": EVENT_STATES[kind],
                              "attempt_token": None, "next_attempt_at_ms": None, "updated_at_ms": now_ms})

    def _wakes_due(self, lane: bytes, until_ms: int, budget: int) -> list[bytes]:
        bound = timeline_keys.lane_bound(lane, until_ms)
        due = []
        for key in self.store.keys_from("timeline", lane, bound):
            if len(due) >= budget:
                break
            if not self.txn.is_deleted("timeline", key):
                due.append(key)
        return due

    def materialize_due(self, now_ms: int, budget: int) -> int:
        """Plan the schedules whose next fire enters the horizon, complete those with nothing left."""
        if len(self._ranks) > RANKS_KEPT:  # ranks only matter while their instant is ahead
            self._ranks = {k: v for k, v in self._ranks.items() if k[1] >= now_ms}
        due = self._wakes_due(WAKE, now_ms + self.horizon_ms, budget) + self._wakes_due(END, now_ms, budget)
        for key in due:
            self.txn.delete("timeline", key)
            state = self._schedule(timeline_keys.wake_schedule_id(key))
            if state is None or timeline_keys.wake_key(state) != key:
                continue
            if state["next_fire_ms"] is None:
                self._complete_if_done(state, now_ms)
                continue
            self.ensure_tenant(state["tenant"])
            self._materialize(state, state["next_fire_ms"] - 1, now_ms)
        return len(due)

    def _complete_if_done(self, state: Record, now_ms: int) -> None:
        """No fire left: once the last pending occurrence is gone the schedule is COMPLETED and frees its slot."""
        pending = [ref for ref, _ in self._pending_keys(state)]
        if pending:
            self._save({**state, "pending": pending, "updated_at_ms": now_ms})
            return
        done = {**state, "state": "COMPLETED", "pending": [], "updated_at_ms": now_ms}
        self._save(done)
        self._admission(done, "RELEASE", now_ms)
        self._publish(done)

    # -- dispatch -----------------------------------------------------------------

    def due(self, lane: bytes, now_ms: int) -> Iterator[tuple[bytes, bytes]]:
        """(key, packed entry) of `lane` due by `now_ms`, in due order, skipping those dropped in this transaction."""
        bound = timeline_keys.lane_bound(lane, now_ms)
        scanned = self._scanned.setdefault(lane, [])
        sent = self._sent_staged
        for key, value in self.store.items_from("timeline", self._floor[lane], bound):
            if key in sent:
                continue  # already visible through a stage, deleted here in a later turn
            scanned.append(key)
            if self.txn.is_deleted("timeline", key):
                continue
            yield key, value

    def admit_overlapping(self, schedule_id: str, due: list[Due], now_ms: int) -> list[Due]:
        """Apply the schedule's overlap policy to its due entries; returns those that may be sent now."""
        state = self._schedule(schedule_id)
        if state is None:
            return due
        spec = state["spec"]
        running = overlap.live_running(state["running"], spec["run_timeout_ms"], now_ms)
        if len(running) != len(state["running"]):
            state = {**state, "running": running}
            self._save(state)
        admission = overlap.admit(spec["overlap_policy"], bool(running), due)
        for key, entry in admission.skip:
            self.txn.delete("timeline", key)
            self._event(state, "SKIPPED_OVERLAP", "a previous occurrence was still running", now_ms,
                        occurrence_id=entry.occurrence_id, scheduled_for_ms=timeline_keys.scheduled_for_ms_of(key))
        return admission.send

    def dispatched(self, key: bytes, entry: LocalEntry, now_ms: int) -> None:
        self.txn.delete("timeline", key)
        limited = self.slots.is_limited(entry.tenant)
        if entry.overlap == overlap.ALLOW and not limited:
            return
        state = self._schedule(entry.schedule_id)
        if state is None:
            return
        if limited:
            self.slots.dispatched(self.txn, entry.tenant, entry.occurrence_id,
                                  now_ms + state["spec"]["run_timeout_ms"])
        if entry.overlap != overlap.ALLOW:
            mine = {"occurrence_id": entry.occurrence_id, "attempt_token": None, "since_ms": now_ms}
            self._save({**state, "running": [*state["running"], mine]})

    # -- staged bursts (scheduler/engine/staging.py) ---------------------------------------

    def stage(self, part: StagedPartition, share: int, accept: Callable[[str, str], bool]) -> list[LocalEntry]:
        """Up to `share` more entries of a staged instant, those `accept(overlap, tenant)` lets through;
        read from the committed store, which no turn changes while the runtime stages."""
        if self._staged is None:
            self._staged, self._staged_puts = part, {}
        taken: list[LocalEntry] = []
        for scanned, (key, raw) in enumerate(self.store.items_from("timeline", part.cursor, part.end)):
            if scanned == share:
                return taken
            part.cursor = key + b"\x00"
            _, overlap_policy, tenant = LocalEntry.head(raw)
            if accept(overlap_policy, tenant):
                part.sent.append(key)
                part.sent_keys.add(key)
                taken.append(LocalEntry.unpack(raw))
            elif part.first_skipped is None:
                part.first_skipped = key
        part.done = True
        return taken

    def staged_sent(self, part: StagedPartition) -> None:
        """The stage's commit made these entries visible. They are deleted here later, a chunk a turn
        (`delete_staged`: at the instant the CPU is better spent on the readers and the broker); until then
        scans skip them and start past them where nothing live lies in between."""
        written = self._staged_puts if self._staged is part else {}
        # Every sent entry is unchanged since staged: a change to one drops the stage (contradicts_stage).
        self._sent_staged.update(part.sent)
        low = min([part.resume_floor(), *written])
        if self._floor[DISPATCH] >= part.start:
            self._floor[DISPATCH] = max(self._floor[DISPATCH], low)
        self._staged, self._staged_puts = None, {}

    def delete_staged(self, budget: int) -> None:
        """Delete, in this turn's transaction, up to `budget` entries a stage sent (their changelog tombstones
        included: a stage carries none). An entry written anew since (an update's new version at the same
        key) is no longer among them: `committed` took it out, as it takes out those deleted here."""
        for key in itertools.islice(self._sent_staged, budget):
            if not self.txn.is_deleted("timeline", key):
                self.txn.delete("timeline", key)

    def has_staged_to_delete(self) -> bool:
        return bool(self._sent_staged)

    def contradicts_stage(self) -> bool:
        """Whether this turn changed an entry the open stage has already produced (a cancel, an update, a
        pause): committing the change while the stage still holds the old occurrence would let the stage
        send it after the change's ACCEPTED result."""
        staged = self._staged
        if staged is None or not staged.sent_keys:
            return False
        return any(key in staged.sent_keys for key in self.txn.changes["timeline"])

    def stage_dropped(self) -> None:
        self._staged, self._staged_puts = None, {}

    def has_wake_due(self, now_ms: int) -> bool:
        for lane, until_ms in ((WAKE, now_ms + self.horizon_ms), (END, now_ms)):
            for _ in self.store.keys_from("timeline", lane, timeline_keys.lane_bound(lane, until_ms)):
                return True
        return False

    def next_wake_ms(self) -> int | None:
        """The earliest fire not yet planned (how far behind the horizon planning is)."""
        for key in self.store.keys_from("timeline", WAKE, timeline_keys.lane_end(WAKE)):
            return timeline_keys.due_ms_of(key)
        return None

    def next_due_ms(self, lane: bytes) -> int | None:
        for key in self.store.keys_from("timeline", self._floor[lane], timeline_keys.lane_end(lane)):
            if key in self._sent_staged:
                continue
            self._floor[lane] = key
            return timeline_keys.due_ms_of(key)
        return None
