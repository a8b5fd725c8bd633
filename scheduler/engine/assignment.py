"""Which input partitions this process owns, and the restores of the newly assigned ones, off the rebalance path.

The group (KIP-848 `consumer` protocol, server-side `range` assignor: scheduler/engine/config.py) hands out
partitions incrementally: a join or a leave moves only what must move, and the callbacks name only the
partitions added or taken. Partition p of the four co-partitioned inputs is one unit here: it becomes a task
only once all four are assigned, and stops being one as soon as any of them is revoked.

A newly assigned partition is paused at once and the callback returns; the main loop then opens the stores of
all the partitions added and begins their restores together (one reader, scheduler/engine/restore_reader.py), a
time-boxed slice per turn (`EngineConfig.restore_slice_ms`), while the partitions already owned keep
dispatching. Beside the replay, on threads: their stage producers are opened (fencing a dead owner's open
stage, scheduler/engine/stage_runner.py) and a dead previous owner's open turn is aborted
(scheduler/engine/previous_owner.py). Both would otherwise hold the replay back at their first record until
the broker timed them out; the replay waits there, at most, until they are done. Each partition is resumed,
with its task, as soon as its own restore and its stage producers are done. A partition revoked mid-restore
drops its restore: what it wrote is flushed and checkpointed, and the store is closed.
"""
from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import Consumer, TopicPartition

from scheduler.engine.active_tasks import ActiveTasks
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.partition_restore import PartitionRestore
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.restore_reader import RestoreReader
from scheduler.engine.stage_runner import StageRunner
from scheduler.engine.task import SchedulerTask

log = logging.getLogger(__name__)

class Standbys(Protocol):
    """Warm copies of partitions this process does not own (issue 17, standby state)."""

    def release(self, partitions: list[int]) -> dict[int, PartitionStore]:
        """`partitions` are about to be active here: the stores of their standby copies, handed over open."""

    def adopt(self, partition: int) -> None:
        """`partition` was revoked (its active store is closed): it may be kept as a standby."""


class NoStandbys:
    def release(self, partitions: list[int]) -> dict[int, PartitionStore]:
        return {}

    def adopt(self, partition: int) -> None:
        pass


@dataclass
class _Pending:
    """A fully assigned partition on its way to dispatching."""

    assigned_at: float
    opening: Future[None] | None = None  # its stage producers being initialised, off the loop
    restored: bool = False
    store: PartitionStore | None = None
    restore: PartitionRestore | None = None
    skipped: dict[str, int] = field(default_factory=dict)  # input topic -> first offset seen while paused


class Assignment:
    def __init__(self, inputs: list[str], tasks: ActiveTasks, stages: StageRunner,
                 open_store: Callable[[int], PartitionStore], restores: RestoreReader,
                 make_task: Callable[[int, PartitionStore], SchedulerTask], metrics: EngineMetrics,
                 standbys: Standbys | None = None, fence: Callable[[list[int]], object] | None = None) -> None:
        self.inputs = inputs
        self.tasks = tasks  # the process's tasks: this class starts and revokes them, only restored ones are in it
        self.stages = stages
        self.open_store, self.restores, self.make_task = open_store, restores, make_task
        self.metrics = metrics
        self.standbys: Standbys = standbys if standbys is not None else NoStandbys()
        self.fence = fence  # aborts dead previous owners' open turns over the given partitions
        self.assigned: dict[int, set[str]] = {}  # partition -> its input topics assigned here
        self.pending: dict[int, _Pending] = {}
        self._consumer: Consumer | None = None
        # Read here, on the main thread, for the other threads: confluent-kafka 2.16 gates a Consumer to one
        # thread at a time, and a call from another thread waits (spinning) until the main loop's poll leaves
        # the gate, which a loop that polls back to back may not do for tens of seconds.
        self.member_id: str | None = None
        self._opener = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stage-open")

    @property
    def restoring(self) -> bool:
        return bool(self.pending)

    def owned(self) -> list[int]:
        return sorted(p for p, topics in self.assigned.items() if len(topics) == len(self.inputs))

    # -- the group's callbacks: bookkeeping only, nothing slow -------------------------------

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._consumer = consumer
        self.member_id = consumer.memberid()
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)  # until the partition's restore is done
        added = []
        for tp in partitions:
            topics = self.assigned.setdefault(tp.partition, set())
            topics.add(tp.topic)
            if len(topics) == len(self.inputs) and tp.partition not in self.tasks \
                    and tp.partition not in self.pending:
                self.pending[tp.partition] = _Pending(time.monotonic())
                added.append(tp.partition)
        owned = self.owned()
        self.metrics.assigned(added, len(owned))
        self.metrics.restoring.set(len(self.pending))
        if added:
            log.info("partitions %s added (owned now %s); restoring them while the others dispatch", sorted(added),
                     owned)

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        touched = sorted({tp.partition for tp in partitions})
        revoked = [p for p in touched if p in self.tasks or p in self.pending]
        self.stages.forget(revoked)
        for partition in revoked:
            self.tasks.revoke(partition)
            pending = self.pending.pop(partition, None)
            if pending is not None:
                self._drop(partition, pending)
        if revoked:
            gc.collect()  # once for all the stores closed: then a standby may open them again
        for partition in revoked:
            self.standbys.adopt(partition)
        for tp in partitions:
            topics = self.assigned.get(tp.partition)
            if topics is not None:
                topics.discard(tp.topic)
                if not topics:
                    del self.assigned[tp.partition]
        self.metrics.revoked(revoked, len(self.owned()))
        self.metrics.restoring.set(len(self.pending))
        log.info("revoked partitions %s", touched)

    def _drop(self, partition: int, pending: _Pending) -> None:
        """Revoked mid-restore: what was written so far is flushed and checkpointed, nothing else is claimed."""
        if pending.restore is not None:
            self.restores.drop(partition)
            self.metrics.restore_cancelled.inc()
            log.info("restore of partition %d dropped: revoked with %d changelog offsets to go", partition,
                     pending.restore.remaining)
        if pending.store is not None:
            pending.store.close(collect=False)
        self.metrics.restore_progress_done(partition)

    def unowned(self, topic: str, partition: int, offset: int) -> None:
        """A record of a partition still restoring (fetched before it was paused): read again on resume."""
        pending = self.pending.get(partition)
        if pending is not None:
            pending.skipped.setdefault(topic, offset)

    # -- the main loop ----------------------------------------------------------------

    def step(self, until: float) -> None:
        """Advance the restores until `until` (monotonic); start the tasks of those done."""
        if not self.pending:
            return
        fresh = [p for p, pending in self.pending.items() if pending.opening is None]
        if fresh:
            # The stage producers' initialisation and the fencing wait on the broker: threads do them, and the
            # replay starts at once beside them.
            if self.fence is not None:
                self._opener.submit(self.fence, fresh)
            opening = self._opener.submit(self._open_stages, fresh)
            self._begin(fresh, opening)
        for partition in self.restores.step(until):
            self.pending[partition].restored = True
        started = False
        for partition, pending in list(self.pending.items()):
            restore = pending.restore
            assert restore is not None and pending.opening is not None
            if not pending.restored:
                self.metrics.restore_progress(partition, restore.remaining, restore.eta_s())
            elif pending.opening.done():
                pending.opening.result()
                self._start(partition, pending)
                started = True
        if self.pending and all(pending.restored for pending in self.pending.values()):
            # Only stage producers left to wait for: wait for them rather than spin the loop.
            wait({pending.opening for pending in self.pending.values() if pending.opening is not None},
                 timeout=max(0.0, until - time.monotonic()), return_when=FIRST_COMPLETED)
        self.metrics.restoring.set(len(self.pending))
        if started:  # the partitions with a task, once their stores are open and restored
            log.info("assigned partitions %s", sorted(self.tasks))

    def _begin(self, fresh: list[int], opening: Future[None]) -> None:
        """The stores of every partition added, then their restores, begun together."""
        began = time.monotonic()
        stores = self.standbys.release(fresh)
        released = time.monotonic()
        for partition in fresh:
            pending = self.pending[partition]
            pending.opening = opening
            if partition not in stores:
                stores[partition] = self.open_store(partition)
            pending.store = stores[partition]
        opened = time.monotonic()
        for partition, restore in self.restores.begin(stores).items():
            self.pending[partition].restore = restore
        assigned = min(self.pending[p].assigned_at for p in fresh)
        log.info("restores of partitions %s begun %.2f s after their assignment: standby stores taken over in "
                 "%.3f s, other stores opened in %.3f s, restores begun in %.3f s", fresh, began - assigned,
                 released - began, opened - released, time.monotonic() - opened)

    def _open_stages(self, partitions: list[int]) -> None:
        began = time.monotonic()
        self.stages.open(partitions)
        log.info("stage producers of partitions %s opened in %.2f s", partitions, time.monotonic() - began)
        self.stages.close_producers([p for p in partitions if p not in self.pending])  # revoked meanwhile

    def _start(self, partition: int, pending: _Pending) -> None:
        restore, store = pending.restore, pending.store
        assert restore is not None and store is not None
        del self.pending[partition]
        self.tasks.start(partition, self.make_task(partition, store))
        tps = [TopicPartition(topic, partition) for topic in self.inputs]
        consumer = self._consumer
        assert consumer is not None
        for topic, offset in pending.skipped.items():
            consumer.seek(TopicPartition(topic, partition, offset))
        consumer.resume(tps)
        waited = time.monotonic() - pending.assigned_at
        self.metrics.partition_started(partition, restore.applied, time.monotonic() - restore.started, waited)
        log.info("partition %d dispatching %.2f s after its assignment", partition, waited)

    def close(self) -> None:
        self._opener.shutdown(wait=True)
        for partition, pending in self.pending.items():
            if pending.restore is not None:
                self.restores.drop(partition)
            if pending.store is not None:
                pending.store.close()
        self.pending.clear()
        self.restores.close()
