"""The process's tasks driven through one lifecycle a turn, as Kafka Streams' TaskManager drives its StreamTasks.

The runtime (scheduler/engine/runtime.py) keeps the Kafka I/O: it polls, opens the turn's transaction,
produces, sends the offsets and commits. Everything between is asked of this class, in this order:

1. `step` - the restores of newly assigned partitions advance and restored ones start their tasks
   (scheduler/engine/assignment.py), then the stage hook (scheduler/engine/stage_runner.py);
2. `take_inputs` - each record to its partition's task, within the input slice;
3. `due_work` - expiries, dispatch of what is due (both lanes, under their budgets and rate limits), then
   planning and a committed stage's local deletes, partition by partition from a rotating start;
4. `committed` or `abandoned` - the store written after the commit, or the turn's work forgotten.

It owns the registry the others read: the active tasks (`ActiveTasks`), the restoring partitions (through the
assignment) and the standby copies (handed over by the assignment). No part of the engine other than the
assignment changes the registry, and nothing outside this class reaches into a task's handlers.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Message

from scheduler.engine import dispatch_lane, due_work
from scheduler.engine.active_tasks import ActiveTasks
from scheduler.engine.admission_handler import Admissions
from scheduler.engine.assignment import Assignment
from scheduler.engine.config import EngineConfig
from scheduler.engine.fairness import RateLimits
from scheduler.engine.metrics import EngineMetrics, PartitionReading
from scheduler.engine.stage_runner import StageRunner
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import CATCH_UP, DISPATCH
from scheduler.wire.partitioning import partition_for

Source = tuple[str, int]  # input topic, partition


@dataclass
class TakenInputs:
    """What a turn's inputs leave for the transaction: the offsets to commit, where to rewind should the
    turn abort, and the records past the input slice, to be read again next turn."""

    next_offsets: dict[Source, int] = field(default_factory=dict)
    first_offsets: dict[Source, int] = field(default_factory=dict)
    left: list[Message] = field(default_factory=list)


@dataclass(frozen=True)
class TurnCounts:
    """What the committed turn's tasks did, for the metrics."""

    events: Counter[str]
    dead_letters: Counter[str]
    concurrency_held: Counter[str]


class TaskManager:
    def __init__(self, config: EngineConfig, tasks: ActiveTasks, assignment: Assignment, stages: StageRunner,
                 limits: tuple[RateLimits, RateLimits], metrics: EngineMetrics, schedule_partitions: int) -> None:
        self.config = config
        self.tasks = tasks
        self.assignment = assignment
        self.stages = stages
        self.trigger_limits, self.catch_up_limits = limits
        self.metrics = metrics
        self.schedule_partitions = schedule_partitions
        self.held_up = False  # the last turn had due work and could send none of it
        self._plan_from = 0  # the partition (by position) that plans first in the next turn

    # -- before the transaction -----------------------------------------------------------

    def step(self, now_ms: int, restore_until: float) -> None:
        """Restores advance until `restore_until` (monotonic), restored partitions start; the stage's step."""
        self.assignment.step(restore_until)
        self.stages.step(now_ms)

    def has_work(self, now_ms: int) -> bool:
        """Entries due, fires due to plan, a committed stage's local deletes, or leases expired."""
        tasks = list(self.tasks.values())
        return due_work.has_due_entries(tasks, now_ms) or any(task.has_upkeep_due(now_ms) for task in tasks)

    def poll_timeout_s(self, now_ms: int, turn_began_ms: int) -> float:
        pace = due_work.Pace(self.assignment.restoring, self.held_up, self.stages.filling, self.stages.under_way,
                             turn_began_ms, self.config.idle_poll_ms, self.config.turn_interval_ms)
        return due_work.poll_timeout_s(now_ms, lambda: due_work.next_due_ms(self.tasks.values()), pace)

    # -- inside the transaction ------------------------------------------------------------

    def take_inputs(self, inputs: list[Message], now_ms: int, taken: TakenInputs) -> None:
        """Hand each record to its partition's task, for at most the input slice (a CreateBatch is hundreds of
        creates); a record of a partition still restoring is noted for its resume, not handled. `taken` is
        filled as the records are handled, so a turn that fails half way still knows where to rewind."""
        deadline = time.perf_counter() + self.config.input_slice_ms / 1000
        for index, msg in enumerate(inputs):
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            assert topic is not None and partition is not None and offset is not None
            task = self.tasks.get(partition)
            if task is None:
                self.assignment.unowned(topic, partition, offset)
                continue
            if index and time.perf_counter() > deadline:
                taken.left = self._left(inputs[index:])
                self.metrics.inputs_deferred.inc(len(inputs) - index)
                return
            taken.first_offsets.setdefault((topic, partition), offset)
            taken.next_offsets[(topic, partition)] = offset + 1
            task.take(topic, msg.key(), msg.value(), offset, now_ms)

    def _left(self, inputs: list[Message]) -> list[Message]:
        """The records past the slice the process owns; the others are noted for their partition's resume."""
        left = []
        for msg in inputs:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            assert topic is not None and partition is not None and offset is not None
            if partition in self.tasks:
                left.append(msg)
            else:
                self.assignment.unowned(topic, partition, offset)
        return left

    def due_work(self, now_ms: int, drained: bool, phases: list[float]) -> None:
        """Expiries, dispatch, then planning; `phases` gets the instant dispatch ended and planning ended."""
        for task in self.tasks.values():
            task.expire(now_ms, drained)
        backlog = self._dispatch(now_ms)
        phases.append(time.perf_counter())
        # Due work first: while a burst is still being sent, planning ahead gets a tenth of its share.
        budget = self.config.materialize_budget // (10 if backlog else 1)
        # A committed stage's local deletes, stage_chunk a turn over all partitions: a turn right after the
        # instant stays short for the occurrences due just after it (issue 16).
        deletes = max(1, self.config.stage_chunk // max(1, len(self.tasks)))
        plan_until = time.perf_counter() + self.config.plan_slice_ms / 1000
        tasks = list(self.tasks.values())
        self._plan_from = (self._plan_from + 1) % max(1, len(tasks))  # who plans first when the slice runs out
        for task in tasks[self._plan_from:] + tasks[:self._plan_from]:
            task.plan(now_ms, budget, plan_until, deletes, self._local_counter)
        if self.stages.contradicted():
            self.stages.drop("a change was accepted for an occurrence it holds")
        phases.append(time.perf_counter())

    def _dispatch(self, now_ms: int) -> bool:
        """Send what is due; True when the strict lane had more than one turn's budget."""
        tasks = self.tasks.values()
        strict = dispatch_lane.dispatch(tasks, DISPATCH, now_ms, self.config.dispatch_budget, self.trigger_limits,
                                        self.metrics)
        if strict < self.config.dispatch_budget:
            catch_up = dispatch_lane.dispatch(tasks, CATCH_UP, now_ms, self.config.catch_up_budget,
                                              self.catch_up_limits, self.metrics)
            self.held_up = strict + catch_up == 0 and due_work.has_due_entries(tasks, now_ms)
            return False
        self.held_up = False
        return True

    def _local_counter(self, tenant: str) -> Admissions | None:
        """The admission side of the partition counting `tenant`, when this process owns it."""
        task = self.tasks.get(partition_for(tenant.encode(), self.schedule_partitions))
        return None if task is None else task.admissions

    def tenants_used(self) -> set[str]:
        """The tenants whose topics this turn's outputs go to."""
        return set().union(*(task.ctx.tenants_used for task in self.tasks.values()))

    def outputs(self) -> Iterable[SchedulerTask]:
        return self.tasks.values()

    # -- after the transaction ---------------------------------------------------------------

    def committed(self, changelog_offsets: dict[int, dict[str, int]]) -> TurnCounts:
        """The turn committed: its counts read, then each task's store written with its changelog offsets."""
        counts = TurnCounts(Counter(), Counter(), Counter())
        for task in self.tasks.values():
            counts.events.update(task.ctx.event_counts)
            counts.dead_letters.update(task.ctx.dead_letters)
            counts.concurrency_held.update(task.slots.blocked)
        for partition, task in self.tasks.items():
            task.committed(changelog_offsets.get(partition, {}))
        return counts

    def abandoned(self) -> None:
        """The turn aborted: every task forgets its work (the inputs are read again)."""
        for task in self.tasks.values():
            task.reset()

    def readings(self, now_ms: int) -> list[PartitionReading]:
        return due_work.partition_readings(self.tasks, now_ms)


def rewind(seek: Callable[[str, int, int], None], offsets: dict[Source, int]) -> None:
    """Point the consumer back at `offsets`: an aborted turn's first records, or a slice's leftovers."""
    for (topic, partition), offset in offsets.items():
        seek(topic, partition, offset)


def first_offsets(messages: Iterable[Message]) -> dict[Source, int]:
    first: dict[Source, int] = {}
    for msg in messages:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        first.setdefault((topic, partition), offset)
    return first
