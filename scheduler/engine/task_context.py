"""What every handler of one partition's task works through: the open store transaction, the outbox with its
one `emit`, and the schedule and occurrence state read and written in that transaction.

A handler never talks to Kafka: it emits records, and the runtime produces the outbox and the changelog in one
Kafka transaction and only then writes the store (quixstreams' order).
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from scheduler.engine import timeline_keys
from scheduler.engine.partition_store import PartitionStore, StoreTransaction
from scheduler.wire.codec import Codec, DecodeError
from scheduler.wire.records import (
    AdmissionKind,
    CommandResult,
    OccurrenceStatus,
    ScheduleState,
)

log = logging.getLogger(__name__)

Output = tuple[str, bytes | None, bytes | None, int | None]  # topic, key, value, partition
MAX_PENDING_REMEMBERED = 100_000  # about a window of bulk creates waiting for their tenant's answer


class ScheduleKey(TypedDict):
    """What names a schedule's quota slot: any ScheduleState, or just these two fields."""
    tenant: str
    schedule_id: str


@dataclass(frozen=True)
class TaskTopics:
    commands: str
    attempts: str
    admissions: str
    admission_results: str
    command_results: str
    occurrence_events: str
    changelogs: dict[str, str]  # store -> changelog topic


@dataclass(frozen=True)
class TenantPolicy:
    """The process's answers about tenants, which the tasks ask but do not own (quotas follow a topic)."""
    topic: Callable[[str, str, str | None], str]       # (topic key, tenant, priority | None) -> topic name
    registered: Callable[[str], bool]                   # in the registry (always True with --open-tenants)
    max_active_schedules: Callable[[str], int]
    max_concurrency: Callable[[str], int | None]        # None: unlimited
    retry_allowed: Callable[[str, int], bool]           # (tenant, now_ms) -> within its retry budget


class TaskContext:
    def __init__(self, partition: int, store: PartitionStore, topics: TaskTopics, codec: Codec,
                 tenants: TenantPolicy) -> None:
        self.partition = partition
        self.store = store
        self.topics = topics
        self.codec = codec
        self.tenants = tenants
        # PENDING states as saved, by key: the admission answer reads each back a turn later, and the bytes
        # still in the store prove the record is the one decoding them would give (kept across turns).
        self._pending_states: dict[bytes, tuple[bytes, ScheduleState]] = {}
        self._state_fields = {field["name"] for field in codec.schema("ScheduleState").schema["fields"]}
        self.reset()

    def reset(self) -> None:
        """Forget the open transaction's work (after its commit, or on abort)."""
        self.txn = StoreTransaction(self.store)
        self.outbox: list[Output] = []
        self.timeline_changelog: dict[bytes, bytes] = {}  # timeline key -> its changelog record (wire form)
        self.schedule_wakes: dict[bytes, bytes] = {}  # schedule key -> its wake-up key (b"": none), for restore
        self.tenants_used: set[str] = set()  # tenants whose topics this turn's records need
        self.event_counts: Counter[str] = Counter()  # occurrences not sent, per event kind (for metrics)
        self.dead_letters: Counter[str] = Counter()  # per tenant
        self.reservations: dict[str, list[str]] = {}  # tenant -> new schedules waiting for a slot, in command order
        # The state `save` encoded last, with its bytes, for `publish`.
        self._last_saved: tuple[ScheduleState | None, bytes] = (None, b"")

    # -- out --------------------------------------------------------------------------

    def emit(self, topic: str, schema: str, key: bytes | None, record: Mapping[str, Any],
             partition: int | None = None) -> None:
        self.outbox.append((topic, key, self.codec.encode(schema, record), partition))

    def emit_to_tenant(self, topic_key: str, tenant: str, schema: str, key: bytes, record: Mapping[str, Any]) -> None:
        """To one of the tenant's own topics, which the runtime makes sure exist before the turn produces."""
        self.tenants_used.add(tenant)
        self.emit(self.tenants.topic(topic_key, tenant, None), schema, key, record)

    def result(self, key: bytes | None, result: CommandResult) -> None:
        self.emit(self.topics.command_results, "CommandResult", key, result, self.partition)

    def publish(self, state: ScheduleState) -> None:
        """The tenant's own view of its schedules, which its workers follow (the bytes `save` just stored,
        when it stored this very state: a create or a change would otherwise encode it twice)."""
        saved, value = self._last_saved
        if saved is not state:
            self.emit_to_tenant("schedule-view", state["tenant"], "ScheduleState", state["schedule_id"].encode(), state)
            return
        self.tenants_used.add(state["tenant"])
        self.outbox.append((self.tenants.topic("schedule-view", state["tenant"], None), state["schedule_id"].encode(),
                            value, None))

    def reserve(self, state: ScheduleState) -> None:
        """Ask for a slot for a new schedule: the turn's asks of one tenant go out as one request at its end
        (`Admissions.send_reservations`), so a bulk load costs one round trip per tenant and turn, not per create."""
        self.reservations.setdefault(state["tenant"], []).append(state["schedule_id"])

    def admission(self, state: ScheduleKey, kind: AdmissionKind, now_ms: int) -> None:
        """Release (or reserve) one of the tenant's active-schedule slots (counted by the tenant's partition)."""
        self.emit(self.topics.admissions, "AdmissionRequest", state["tenant"].encode(), {
            "tenant": state["tenant"], "schedule_id": state["schedule_id"], "kind": kind, "requested_at_ms": now_ms})

    def decode_input(self, schema: str, topic: str, key: bytes | None, value: bytes | None, offset: int,
                     now_ms: int) -> Any:
        """An input record that cannot be decoded is reported with its position, and processing goes on."""
        try:
            return self.codec.decode(schema, value or b"")
        except DecodeError as exc:
            source = f"{topic}/{self.partition}/{offset}"
            log.warning("rejected %s: %s", source, exc)
            self.emit(self.topics.occurrence_events, "OccurrenceEvent", key, {
                "occurrence_id": None, "schedule_id": (key or b"").decode(errors="replace"), "tenant": "",
                "schedule_version": 0, "scheduled_for_ms": None, "kind": "REJECTED_INPUT",
                "reason": f"{source}: undecodable {schema}: {exc}", "range_first_ms": None, "range_last_ms": None,
                "count": 1, "recorded_at_ms": now_ms}, self.partition)
            self.event_counts["REJECTED_INPUT"] += 1
            return None

    # -- state --------------------------------------------------------------------------

    def schedule(self, schedule_id: str) -> ScheduleState | None:
        key = schedule_id.encode()
        raw = self.txn.get("schedules", key)
        if not raw:
            return None
        remembered = self._pending_states.pop(key, None)
        if remembered is not None and remembered[0] == raw:
            return remembered[1]
        state: ScheduleState = self.codec.decode("ScheduleState", raw)
        return state

    def save(self, state: ScheduleState) -> None:
        """Store the schedule and put its wake-up where `wake_key` says; a wake-up left behind by an
        earlier state no longer matches the schedule and is dropped when it falls due."""
        wake = timeline_keys.wake_key(state)
        if wake is not None:
            self.txn.put("timeline", wake, b"")
        key = state["schedule_id"].encode()
        value = self.codec.encode("ScheduleState", state)
        self.txn.put("schedules", key, value)
        self._last_saved = (state, value)
        if state["state"] == "PENDING" and state.keys() == self._state_fields:
            if len(self._pending_states) >= MAX_PENDING_REMEMBERED:
                self._pending_states.clear()
            self._pending_states[key] = (value, state)
        self.schedule_wakes[key] = wake or b""

    def drop_wake(self, state: ScheduleState) -> None:
        wake = timeline_keys.wake_key(state)
        if wake is not None:
            self.txn.delete("timeline", wake)

    def status(self, occurrence_id: str) -> OccurrenceStatus | None:
        raw = self.txn.get("occurrences", occurrence_id.encode())
        return self.codec.decode("OccurrenceStatus", raw) if raw else None

    def put_status(self, status: OccurrenceStatus) -> None:
        self.txn.put("occurrences", status["occurrence_id"].encode(), self.codec.encode("OccurrenceStatus", status))
