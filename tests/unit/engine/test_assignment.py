"""Assignment: which partitions this process owns, and how a newly assigned one gets from paused to dispatching.

Proves, without a broker, what scheduler/engine/assignment.py promises: a partition is a task only once all
its inputs are assigned; it stays paused until both its restore and its stage producers are done; a record
seen while it restored is read again (sought) on resume; a revoke closes its store before a standby may adopt
it, drops a restore under way and forgets its stage producers, even those still being opened. The group
consumer, the stage runner, the restore reader and the standbys are scripted plain classes; the stores are
real RocksDB stores under tmp_path.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry
from task_builder import CODEC, TOPICS, tenant_policy

from scheduler.engine.active_tasks import ActiveTasks
from scheduler.engine.assignment import Assignment
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.partition_restore import PartitionRestore
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.task import SchedulerTask

INPUTS = [TOPICS.commands, TOPICS.attempts, TOPICS.admissions, TOPICS.admission_results]
CHANGELOGS = dict(TOPICS.changelogs)


class RecordingStore(PartitionStore):
    """A real store that notes in `events` when it is closed."""

    def __init__(self, path: Path, events: list[str]) -> None:
        super().__init__(path)
        self.events, self.closed = events, False

    def close(self, collect: bool = True) -> None:
        self.events.append(f"close p{self.path.name[1:]}")
        self.closed = True
        super().close(collect)


@dataclass
class GroupConsumer:
    """The calls Assignment makes on the group's consumer, recorded."""

    assigned: list[tuple[str, int]] = field(default_factory=list)
    paused: set[tuple[str, int]] = field(default_factory=set)
    resumed: list[tuple[str, int]] = field(default_factory=list)
    seeks: list[tuple[str, int, int]] = field(default_factory=list)

    def memberid(self) -> str:
        return "member-1"

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.assigned += [(tp.topic, tp.partition) for tp in tps]

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in tps}
        self.resumed += [(tp.topic, tp.partition) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))


class GatedStages:
    """Opens stage producers only once `gate` is set (the broker's InitProducerId, on the opener thread)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.opened: list[list[int]] = []
        self.forgotten: list[list[int]] = []
        self.stagers: dict[int, str] = {}

    def open(self, partitions: list[int]) -> None:
        assert self.gate.wait(10), "the test never opened the gate"
        self.opened.append(list(partitions))
        self.stagers.update({p: f"stager-{p}" for p in partitions})

    def forget(self, partitions: list[int]) -> None:
        self.forgotten.append(list(partitions))
        self.close_producers(partitions)

    def close_producers(self, partitions: list[int]) -> None:
        for partition in partitions:
            self.stagers.pop(partition, None)


class ScriptedRestores:
    """Real PartitionRestores (10 offsets to go per changelog); `finish` says which are done at the next step."""

    def __init__(self) -> None:
        self.begun: list[list[int]] = []
        self.dropped: list[int] = []
        self.ready: set[int] = set()
        self.closed = False

    def begin(self, stores: Mapping[int, PartitionStore]) -> dict[int, PartitionRestore]:
        self.begun.append(sorted(stores))
        bounds = {topic: (0, 10) for topic in CHANGELOGS.values()}
        return {p: PartitionRestore(store, CHANGELOGS, p, CODEC, bounds) for p, store in stores.items()}

    def finish(self, *partitions: int) -> None:
        self.ready.update(partitions)

    def step(self, until: float) -> list[int]:
        done, self.ready = sorted(self.ready), set()
        return done

    def drop(self, partition: int) -> None:
        self.dropped.append(partition)

    def close(self) -> None:
        self.closed = True


class RecordingStandbys:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.warm: dict[int, PartitionStore] = {}

    def release(self, partitions: list[int]) -> dict[int, PartitionStore]:
        return {p: self.warm.pop(p) for p in partitions if p in self.warm}

    def adopt(self, partition: int) -> None:
        self.events.append(f"adopt p{partition}")


@dataclass
class Rig:
    assignment: Assignment
    consumer: GroupConsumer
    stages: GatedStages
    restores: ScriptedRestores
    standbys: RecordingStandbys
    registry: CollectorRegistry
    events: list[str]
    opened: list[int]
    fenced: list[list[int]]
    tmp: Path

    def assign(self, partitions: list[int], topics: list[str] = INPUTS) -> None:
        self.assignment.on_assign(self.consumer, [TopicPartition(t, p) for p in partitions for t in topics])  # type: ignore[arg-type]

    def revoke(self, partitions: list[int], topics: list[str] = INPUTS) -> None:
        self.assignment.on_revoke(self.consumer, [TopicPartition(t, p) for p in partitions for t in topics])  # type: ignore[arg-type]

    def step(self) -> None:
        self.assignment.step(time.monotonic())  # a slice already spent: no waiting in the step

    def opening_done(self, partition: int) -> None:
        opening = self.assignment.pending[partition].opening
        assert opening is not None
        opening.result(timeout=10)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    events: list[str] = []
    opened: list[int] = []
    fenced: list[list[int]] = []
    registry = CollectorRegistry()
    stages, restores, standbys = GatedStages(), ScriptedRestores(), RecordingStandbys(events)

    def open_store(partition: int) -> PartitionStore:
        opened.append(partition)
        return RecordingStore(tmp_path / f"p{partition}", events)

    def make_task(partition: int, store: PartitionStore) -> SchedulerTask:
        return SchedulerTask(partition, store, TOPICS, CODEC, tenant_policy(), 120_000, 8)

    assignment = Assignment(INPUTS, ActiveTasks(), stages, open_store, restores, make_task,  # type: ignore[arg-type]
                            EngineMetrics(registry), standbys, fence=fenced.append)  # type: ignore[arg-type]
    test_rig = Rig(assignment, GroupConsumer(), stages, restores, standbys, registry, events, opened, fenced, tmp_path)
    yield test_rig
    stages.gate.set()
    assignment.close()
    for task in assignment.tasks.values():
        task.store.close()
    for store in standbys.warm.values():
        store.close()


def test_a_partition_is_owned_and_restoring_only_once_all_its_inputs_are_assigned(rig: Rig) -> None:
    rig.assign([3], INPUTS[:3])
    assert rig.assignment.owned() == [] and not rig.assignment.restoring
    assert rig.consumer.paused == {(t, 3) for t in INPUTS[:3]}
    rig.assign([3], INPUTS[3:])
    assert rig.assignment.owned() == [3] and rig.assignment.restoring
    assert rig.consumer.assigned == [(t, 3) for t in INPUTS] and rig.consumer.paused == {(t, 3) for t in INPUTS}
    assert rig.registry.get_sample_value("scheduler_partitions_restoring") == 1


def test_a_step_opens_every_added_store_fences_and_begins_their_restores_together(rig: Rig) -> None:
    rig.assign([1, 2])
    rig.step()
    assert rig.opened == [1, 2] and rig.restores.begun == [[1, 2]]
    rig.opening_done(1)
    assert rig.stages.opened == [[1, 2]]
    rig.assignment.close()  # joins the opener thread: the fence has run
    assert rig.fenced == [[1, 2]]


def test_a_standby_copy_is_taken_over_instead_of_opening_the_store(rig: Rig) -> None:
    warm = RecordingStore(rig.tmp / "p5", rig.events)
    rig.standbys.warm[5] = warm
    rig.assign([5, 6])
    rig.step()
    assert rig.opened == [6]
    assert rig.assignment.pending[5].store is warm


def test_a_partition_resumes_only_when_both_its_restore_and_its_stage_producers_are_done(rig: Rig) -> None:
    rig.stages.gate.clear()
    rig.assign([0])
    rig.step()
    rig.restores.finish(0)
    rig.step()
    assert rig.assignment.pending[0].restored and 0 not in rig.assignment.tasks
    assert rig.consumer.resumed == [] and rig.consumer.paused == {(t, 0) for t in INPUTS}
    rig.stages.gate.set()
    rig.opening_done(0)
    rig.step()
    assert 0 in rig.assignment.tasks and not rig.assignment.restoring
    assert sorted(rig.consumer.resumed) == sorted((t, 0) for t in INPUTS) and rig.consumer.paused == set()
    assert rig.registry.get_sample_value("scheduler_assignment_to_dispatch_seconds_count") == 1


def test_an_unfinished_restore_keeps_its_partition_paused_while_another_starts(rig: Rig) -> None:
    rig.assign([0, 1])
    rig.step()
    rig.opening_done(0)
    rig.restores.finish(1)
    rig.step()
    assert sorted(rig.assignment.tasks) == [1] and sorted(rig.assignment.pending) == [0]
    assert rig.consumer.paused == {(t, 0) for t in INPUTS}
    assert rig.registry.get_sample_value("scheduler_restore_remaining_offsets", {"partition": "0"}) == 40


def test_records_fetched_while_restoring_are_sought_back_to_the_first_offset_seen(rig: Rig) -> None:
    rig.assign([2])
    rig.assignment.unowned(TOPICS.commands, 2, 17)
    rig.assignment.unowned(TOPICS.commands, 2, 18)
    rig.assignment.unowned(TOPICS.attempts, 2, 4)
    rig.assignment.unowned(TOPICS.commands, 9, 1)  # not restoring here: ignored
    rig.step()
    rig.opening_done(2)
    rig.restores.finish(2)
    rig.step()
    assert sorted(rig.consumer.seeks) == [(TOPICS.attempts, 2, 4), (TOPICS.commands, 2, 17)]


def test_a_partition_revoked_mid_restore_drops_it_closes_its_store_then_lets_a_standby_adopt_it(rig: Rig) -> None:
    rig.assign([0, 1])
    rig.step()
    rig.opening_done(0)
    rig.revoke([1])
    assert rig.restores.dropped == [1] and rig.stages.forgotten == [[1]]
    assert rig.events == ["close p1", "adopt p1"]
    assert rig.assignment.owned() == [0] and sorted(rig.assignment.pending) == [0]
    assert rig.registry.get_sample_value("scheduler_restores_cancelled_total") == 1
    PartitionStore(rig.tmp / "p1").close()  # closed and collected: a standby may open it at once


def test_revoking_one_input_of_a_dispatching_partition_ends_its_task(rig: Rig) -> None:
    rig.assign([4])
    rig.step()
    rig.opening_done(4)
    rig.restores.finish(4)
    rig.step()
    assert 4 in rig.assignment.tasks
    rig.revoke([4], [TOPICS.attempts])
    assert rig.assignment.tasks == {} and rig.assignment.owned() == []
    assert rig.events == ["close p4", "adopt p4"] and rig.restores.dropped == []
    assert rig.assignment.assigned == {4: set(INPUTS) - {TOPICS.attempts}}


def test_stage_producers_opened_for_a_partition_revoked_meanwhile_are_not_kept(rig: Rig) -> None:
    rig.stages.gate.clear()
    rig.assign([0, 1])
    rig.step()
    rig.revoke([1])
    rig.stages.gate.set()
    rig.opening_done(0)
    assert sorted(rig.stages.stagers) == [0]


def test_reassigning_a_dispatching_partition_does_not_restore_it_again(rig: Rig) -> None:
    rig.assign([0])
    rig.step()
    rig.opening_done(0)
    rig.restores.finish(0)
    rig.step()
    rig.assign([0])
    assert not rig.assignment.restoring and rig.restores.begun == [[0]]


def test_close_drops_the_restores_under_way_and_closes_their_stores(rig: Rig) -> None:
    rig.assign([0, 1])
    rig.step()
    rig.assignment.close()
    assert sorted(rig.restores.dropped) == [0, 1] and rig.restores.closed
    assert sorted(rig.events) == ["close p0", "close p1"] and not rig.assignment.restoring
