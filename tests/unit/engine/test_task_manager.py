"""The task manager drives every task through the turn's lifecycle in one order, with no broker.

Proves what scheduler/engine/task_manager.py promises: each input record reaches its own partition's task and
only it, a record of a partition still restoring is noted for its resume and neither handled nor committed, the
records past a spent input slice are left to be read again; expiries come before dispatch and leases expire
only in a drained turn; planning starts from a rotating partition; a committed turn writes each task with its
own changelog offsets and sums their counts; an aborted one resets them all. The tasks are scripted (they record
the calls made to them); the real task's turn is tests/unit/engine/test_runtime.py's subject.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Message
from prometheus_client import CollectorRegistry

from scheduler.engine.active_tasks import ActiveTasks
from scheduler.engine.config import EngineConfig
from scheduler.engine.fairness import RateLimits
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.task_manager import TakenInputs, TaskManager

NOW = 1_800_000_000_000


@dataclass
class Scan:
    due_ms: int | None = None

    def next_due_ms(self, lane: bytes) -> int | None:
        return self.due_ms


class Dispatcher:
    def offers(self, lane: bytes, now_ms: int, share: int) -> list[Any]:
        return []


@dataclass
class Context:
    event_counts: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    tenants_used: set[str] = field(default_factory=set)


@dataclass
class Slots:
    blocked: Counter[str] = field(default_factory=Counter)


class ScriptedTask:
    """Records every lifecycle call into the log it shares with the other tasks."""

    def __init__(self, partition: int, log: list[tuple[Any, ...]], upkeep: bool = False) -> None:
        self.partition, self.log, self.upkeep = partition, log, upkeep
        self.scan, self.dispatcher, self.ctx, self.slots = Scan(), Dispatcher(), Context(), Slots()
        self.store = self

    def take(self, topic: str, key: bytes | None, value: bytes | None, offset: int, now_ms: int) -> None:
        self.log.append(("take", self.partition, topic, offset))

    def expire(self, now_ms: int, drained: bool) -> None:
        self.log.append(("expire", self.partition, drained))

    def plan(self, now_ms: int, budget: int, until: float, deletes: int, local_counter: Any) -> None:
        self.log.append(("plan", self.partition))

    def has_upkeep_due(self, now_ms: int) -> bool:
        return self.upkeep

    def committed(self, offsets: dict[str, int]) -> None:
        self.log.append(("committed", self.partition, offsets))

    def reset(self) -> None:
        self.log.append(("reset", self.partition))

    def close(self, collect: bool = True) -> None:
        pass


@dataclass
class ScriptedAssignment:
    unowned_seen: list[tuple[str, int, int]] = field(default_factory=list)
    restoring: bool = False

    def unowned(self, topic: str, partition: int, offset: int) -> None:
        self.unowned_seen.append((topic, partition, offset))

    def step(self, until: float) -> None:
        pass


class ScriptedStages:
    filling = under_way = False

    def step(self, now_ms: int) -> None:
        pass

    def contradicted(self) -> bool:
        return False


@dataclass
class Rig:
    manager: TaskManager
    log: list[tuple[Any, ...]]
    assignment: ScriptedAssignment
    tasks: dict[int, ScriptedTask]
    registry: CollectorRegistry


def rig(*partitions: int, input_slice_ms: int = 60_000, upkeep: bool = False) -> Rig:
    log: list[tuple[Any, ...]] = []
    active = ActiveTasks()
    tasks = {p: ScriptedTask(p, log, upkeep) for p in partitions}
    for p, task in tasks.items():
        active.start(p, task)  # type: ignore[arg-type]
    assignment, registry = ScriptedAssignment(), CollectorRegistry()
    config = EngineConfig("unused:9092", "pfx", Path("/nonexistent"), "i-1",
                          input_slice_ms=input_slice_ms)
    limits = (RateLimits(lambda tenant: 1e9), RateLimits(lambda tenant: 1e9))
    manager = TaskManager(config, active, assignment, ScriptedStages(), limits,  # type: ignore[arg-type]
                          EngineMetrics(registry), 12)
    return Rig(manager, log, assignment, tasks, registry)


def record(topic: str, partition: int, offset: int) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, key=b"k", value=b"v", error=None)


def test_each_record_reaches_its_partitions_task_and_the_offsets_to_commit_are_the_next_ones() -> None:
    r = rig(0, 1)
    taken = TakenInputs()
    r.manager.take_inputs([record("commands", 1, 7), record("attempts", 0, 3), record("commands", 1, 8)], NOW, taken)
    assert r.log == [("take", 1, "commands", 7), ("take", 0, "attempts", 3), ("take", 1, "commands", 8)]
    assert taken.next_offsets == {("commands", 1): 9, ("attempts", 0): 4}
    assert taken.first_offsets == {("commands", 1): 7, ("attempts", 0): 3}
    assert taken.left == []


def test_a_record_of_a_restoring_partition_is_noted_for_its_resume_and_neither_handled_nor_committed() -> None:
    r = rig(0)
    taken = TakenInputs()
    r.manager.take_inputs([record("commands", 5, 40), record("commands", 0, 1)], NOW, taken)
    assert r.assignment.unowned_seen == [("commands", 5, 40)]
    assert r.log == [("take", 0, "commands", 1)] and ("commands", 5) not in taken.next_offsets


def test_records_past_a_spent_slice_are_left_unhandled_and_uncommitted_and_counted() -> None:
    r = rig(0, input_slice_ms=-1)  # spent before the second record, whatever the machine's speed
    taken = TakenInputs()
    r.manager.take_inputs([record("commands", 0, 1), record("commands", 0, 2), record("commands", 4, 9)], NOW, taken)
    assert r.log == [("take", 0, "commands", 1)]
    assert taken.next_offsets == {("commands", 0): 2}
    assert [(m.partition(), m.offset()) for m in taken.left] == [(0, 2)]
    assert r.assignment.unowned_seen == [("commands", 4, 9)]
    assert r.registry.get_sample_value("scheduler_inputs_deferred_total") == 2


def test_expiries_come_before_planning_and_leases_expire_only_in_a_drained_turn() -> None:
    r = rig(0, 1)
    r.manager.due_work(NOW, drained=False, phases=[])
    expiries = [call for call in r.log if call[0] == "expire"]
    assert expiries == [("expire", 0, False), ("expire", 1, False)]
    assert r.log.index(expiries[-1]) < min(r.log.index(call) for call in r.log if call[0] == "plan")
    r.log.clear()
    r.manager.due_work(NOW, drained=True, phases=[])
    assert [call for call in r.log if call[0] == "expire"] == [("expire", 0, True), ("expire", 1, True)]


def test_planning_starts_from_a_rotating_partition_so_a_short_slice_is_shared_over_turns() -> None:
    r = rig(0, 1, 2)
    firsts = []
    for _ in range(3):
        r.log.clear()
        r.manager.due_work(NOW, drained=True, phases=[])
        plans = [call[1] for call in r.log if call[0] == "plan"]
        assert sorted(plans) == [0, 1, 2]
        firsts.append(plans[0])
    assert sorted(firsts) == [0, 1, 2]


def test_a_turn_has_work_only_when_an_entry_is_due_or_a_task_has_upkeep() -> None:
    idle = rig(0)
    assert not idle.manager.has_work(NOW)
    idle.tasks[0].scan.due_ms = NOW + 1
    assert not idle.manager.has_work(NOW)
    idle.tasks[0].scan.due_ms = NOW
    assert idle.manager.has_work(NOW)
    assert rig(0, upkeep=True).manager.has_work(NOW)


def test_a_committed_turn_writes_each_task_with_its_own_offsets_and_sums_their_counts() -> None:
    r = rig(0, 1)
    r.tasks[0].ctx.event_counts.update({"DISPATCHED": 2})
    r.tasks[1].ctx.event_counts.update({"DISPATCHED": 3})
    r.tasks[1].ctx.dead_letters.update({"acme": 1})
    counts = r.manager.committed({1: {"timeline": 12}})
    assert counts.events == Counter({"DISPATCHED": 5}) and counts.dead_letters == Counter({"acme": 1})
    assert r.log == [("committed", 0, {}), ("committed", 1, {"timeline": 12})]


def test_an_aborted_turn_resets_every_task() -> None:
    r = rig(0, 1, 2)
    r.manager.abandoned()
    assert r.log == [("reset", 0), ("reset", 1), ("reset", 2)]


def test_the_tenants_used_are_those_of_every_task() -> None:
    r = rig(0, 1)
    r.tasks[0].ctx.tenants_used.add("acme")
    r.tasks[1].ctx.tenants_used.update({"acme", "globex"})
    assert r.manager.tenants_used() == {"acme", "globex"}
