"""The standby copies of one process: which partitions it keeps warm, their open stores and where each
changelog's next record is, and the steps that keep them so (reconcile, apply, report).

Not thread-safe: `scheduler.engine.standbys.Standbys` holds its lock around every call, and drives the steps
from its tailing thread; a test drives them one at a time on its own thread.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.partition_restore import record_writes
from scheduler.engine.partition_store import PartitionStore
from scheduler.wire.codec import RecordCodec

log = logging.getLogger(__name__)


class TailingConsumer(Protocol):
    """What the copies ask of the tailing consumer (a confluent_kafka.Consumer)."""

    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...
    def incremental_unassign(self, partitions: list[TopicPartition]) -> None: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = ...,
                              cached: bool = ...) -> tuple[int, int]: ...


@dataclass
class _Warm:
    """One standby partition: its store and, per changelog, the next offset to apply."""

    store: PartitionStore
    next: dict[str, int]
    at_end: set[str] = field(default_factory=set)  # changelogs read to their end since the store was opened
    applied: int = 0
    caught_up: bool = False


class StandbyCopies:
    def __init__(self, state_root: Path, changelogs: dict[str, str], codec: RecordCodec,
                 metrics: EngineMetrics) -> None:
        self.state_root = state_root
        self.changelogs = changelogs
        self.names = {topic: name for name, topic in changelogs.items()}
        self.codec = codec
        self.metrics = metrics
        self._active: set[int] = set()   # opened by the active path: never touched here
        self._target: set[int] = set()   # where the placement says this process keeps copies
        self._warm: dict[int, _Warm] = {}
        self._assigned: set[int] = set()  # partitions the tailing consumer is assigned
        self._reopened: set[int] = set()  # closed since the last reconcile: the consumer must seek anew

    @property
    def target(self) -> frozenset[int]:
        return frozenset(self._target)

    @property
    def kept(self) -> frozenset[int]:
        """The partitions whose copies are open now."""
        return frozenset(self._warm)

    @property
    def assigned(self) -> bool:
        """Whether the tailing consumer has anything to read."""
        return bool(self._assigned)

    @property
    def active_count(self) -> int:
        return len(self._active)

    def caught_up(self, partition: int) -> bool:
        """Whether the copy of `partition` has read every changelog to its end since it was opened."""
        warm = self._warm.get(partition)
        return warm is not None and warm.caught_up

    def place(self, target: Iterable[int]) -> bool:
        """The partitions the placement says to keep copies of here (the active ones are left out by the
        next reconcile). True: the placement changed."""
        target = set(target)
        changed = target != self._target
        self._target = target
        return changed

    def release(self, partitions: Iterable[int]) -> dict[int, PartitionStore]:
        """These partitions become active here: their open stores, handed over; see Standbys.release."""
        partitions = list(partitions)
        self._active.update(partitions)
        handed = {p: self._warm.pop(p).store for p in partitions if p in self._warm}
        self._reopened.update(handed)
        for partition in handed:
            self.metrics.standby_dropped(partition)
        return handed

    def adopt(self, partition: int) -> None:
        self._active.discard(partition)

    def resume_from_checkpoints(self) -> None:
        """Point the consumer at every copy's checkpoint again at the next reconcile."""
        self._reopened.update(self._warm)

    def close_all(self) -> None:
        for partition in list(self._warm):
            self._close(partition)

    def reconcile(self, consumer: TailingConsumer) -> None:
        """Open the wanted copies, close the unwanted, and point the consumer at what is open."""
        wanted = self._target - self._active
        for partition in set(self._warm) - wanted:
            self._close(partition)
        for partition in wanted - set(self._warm):
            self._open(partition)
        stale = self._assigned - (set(self._warm) - self._reopened)
        self._reopened.clear()
        if stale:
            consumer.incremental_unassign([TopicPartition(t, p) for p in stale for t in self.changelogs.values()])
            self._assigned -= stale
        fresh = set(self._warm) - self._assigned
        if fresh:
            consumer.incremental_assign([TopicPartition(topic, p, self._warm[p].next[name])
                                         for p in fresh for name, topic in self.changelogs.items()])
            self._assigned |= fresh

    def _open(self, partition: int) -> None:
        store = PartitionStore(self.state_root / f"p{partition}")
        self._warm[partition] = _Warm(
            store,
            {name: store.changelog_offset(name) for name in self.changelogs})
        self.metrics.standby_opened(partition)

    def _close(self, partition: int) -> None:
        """The consumer is unassigned by the next reconcile; until then its records for the partition are
        dropped (the checkpoint says where to resume)."""
        warm = self._warm.pop(partition, None)
        if warm is not None:
            warm.store.close()
            self._reopened.add(partition)
            self.metrics.standby_dropped(partition)

    def apply(self, messages: list[Any]) -> bool:
        """Write the fetched records into their copies' stores with the next offsets. True: some applied.
        Raises KafkaException on a fetch error other than a partition's end."""
        applied = 0
        changes: dict[int, dict[str, dict[bytes, bytes | None]]] = {}
        touched: dict[int, set[str]] = {}
        for msg in messages:
            warm = self._warm.get(msg.partition())
            name = self.names.get(msg.topic())
            if warm is None or name is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                warm.at_end.add(name)
                warm.next[name] = max(warm.next[name], msg.offset())
                touched.setdefault(msg.partition(), set()).add(name)
                continue
            if msg.offset() < warm.next[name]:
                continue  # fetched before a seek back to the checkpoint
            writes = record_writes(name, msg, self.codec)
            target = changes.setdefault(msg.partition(), {})
            for store_name, found in writes.items():
                target.setdefault(store_name, {}).update(found)
            warm.next[name] = msg.offset() + 1
            warm.applied += 1
            applied += 1
            touched.setdefault(msg.partition(), set()).add(name)
        for partition, names in touched.items():
            warm = self._warm[partition]
            warm.store.write(changes.get(partition, {}), {name: warm.next[name] for name in names})
            if not warm.caught_up and warm.at_end >= set(self.changelogs):
                warm.caught_up = True
                log.info("standby of partition %d caught up (%d changelog records applied)", partition, warm.applied)
        self.metrics.standby_applied(applied)
        return applied > 0

    def report(self, consumer: TailingConsumer) -> int:
        """Lag per partition: offsets between the applied position and the changelogs' ends (a transaction's
        marker counts one), from the watermarks the fetches brought, and the position checkpointed. Returns the
        total behind."""
        total = 0
        for partition, warm in self._warm.items():
            tps = [TopicPartition(topic, partition) for topic in self.changelogs.values()]
            positions = {tp.topic: tp.offset for tp in consumer.position(tps)}
            behind: int | None = 0
            moved = {}
            for name, topic in self.changelogs.items():
                if positions.get(topic, -1) > warm.next[name]:
                    warm.next[name] = moved[name] = positions[topic]
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
                behind = None if behind is None or high < 0 else behind + max(0, high - warm.next[name])
            if moved:
                warm.store.write({}, moved)
            if behind is not None:  # unknown until a fetch has brought every changelog's end
                self.metrics.standby_lag(partition, behind)
                total += behind
        return total
