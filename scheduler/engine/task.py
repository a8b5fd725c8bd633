"""The stream task of one input partition: the handlers of its four inputs and of its due work, over one
`TaskContext` (the open store transaction and the outbox).

Which module owns what: commands `command_handler` (manual ones `manual_commands`), the admission counts and
running slots `admission_handler`, attempts and dead letters `attempt_handler`, the timeline's planning and
enqueueing `occurrence_timeline`, the due scans and staged entries `lane_scan`, the partition's side of dispatch
`dispatch_handler`. This class wires them and draws the transaction's boundaries.
"""
from __future__ import annotations

from collections.abc import Callable

from scheduler.engine.admission_handler import Admissions, LocalCounter
from scheduler.engine.attempt_handler import Attempts
from scheduler.engine.command_handler import Commands
from scheduler.engine.dispatch_handler import Dispatcher
from scheduler.engine.lane_scan import DueScan
from scheduler.engine.occurrence_timeline import Timeline
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.running_slots import RunningSlots
from scheduler.engine.task_context import TaskContext, TaskTopics, TenantPolicy
from scheduler.engine.timeline_keys import END, WAKE, lane_of
from scheduler.wire.codec import Codec

Handler = Callable[[bytes | None, bytes | None, int, int], None]  # (key, value, offset, now_ms)
ChangelogRecord = tuple[str, bytes, bytes | None]  # topic, key, value


class SchedulerTask:
    def __init__(self, partition: int, store: PartitionStore, topics: TaskTopics, codec: Codec,
                 tenants: TenantPolicy, horizon_ms: int, partitions: int) -> None:
        self.partition = partition
        self.store = store
        self.ctx = TaskContext(partition, store, topics, codec, tenants)
        self.slots = RunningSlots(tenants.max_concurrency)
        self.scan = DueScan(self.ctx)
        self.timeline = Timeline(self.ctx, horizon_ms, self.scan.floor)
        self.commands = Commands(self.timeline, partitions)
        self.admissions = Admissions(self.ctx, self.timeline, self.slots, partitions)
        self.attempts = Attempts(self.ctx, self.timeline, self.slots)
        self.dispatcher = Dispatcher(self.timeline, self.scan, self.slots)
        self.handlers: dict[str, Handler] = {  # input topic -> the handler of its records
            topics.commands: self.commands.on_command, topics.attempts: self.attempts.on_attempt,
            topics.admissions: self.admissions.on_admission_request,
            topics.admission_results: self.admissions.on_admission_result}

    # -- the turn's lifecycle, in the order the task manager calls it (scheduler/engine/task_manager.py) -----

    def take(self, topic: str, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        """One input record, handled by its topic's handler inside the open transaction."""
        self.handlers[topic](key, value, offset, now_ms)

    def expire(self, now_ms: int, drained: bool) -> None:
        """Running slots past their hold expire; leases too, but only in a turn that drained its inputs (a
        backlog of heartbeats is not silence)."""
        self.slots.expire(self.ctx.txn, now_ms)
        if drained:
            self.attempts.expire_leases(now_ms)

    def plan(self, now_ms: int, budget: int, until: float, deletes: int, local_counter: LocalCounter) -> None:
        """The partition's share of planning, after dispatch: admission requests, the running slots settled,
        fires planned within `budget` and before `until` (perf_counter), and up to `deletes` of a committed
        stage's local deletes."""
        self.admissions.send_reservations(now_ms, local_counter)
        self.admissions.settle_running_slots(now_ms)
        self.timeline.materialize_due(now_ms, budget, until)
        self.scan.delete_staged(deletes)

    def has_upkeep_due(self, now_ms: int) -> bool:
        """Work besides due entries: fires due to plan, a committed stage's local deletes, leases expired."""
        return (self.timeline.has_wake_due(now_ms) or self.scan.has_staged_to_delete()
                or self.attempts.has_expired_lease(now_ms))

    def changelog_records(self) -> dict[str, list[ChangelogRecord]]:
        """store -> (topic, key, value) of every change of this transaction; wake-ups are derived, not logged."""
        ctx = self.ctx
        records: dict[str, list[ChangelogRecord]] = {}
        for store, changes in ctx.txn.changes.items():
            topic = ctx.topics.changelogs[store]
            if store != "timeline":
                found = [(topic, key, value) for key, value in changes.items()]
            else:
                found = [(topic, key, None if value is None else ctx.timeline_changelog[key])
                         for key, value in changes.items() if lane_of(key) not in (WAKE, END)]
            if found:
                records[store] = found
        return records

    def committed(self, offsets: dict[str, int]) -> None:
        """The turn's Kafka transaction committed: now the store is written, with the changelog offsets."""
        changes = self.ctx.txn.changes
        self.scan.committed(changes["timeline"])
        self.store.write(changes, offsets)
        self.scan.after_write()
        self.reset()

    def reset(self) -> None:
        """Forget the open transaction's work (after its commit, or on abort)."""
        self.ctx.reset()
        self.scan.reset()
        self.slots.new_turn()
