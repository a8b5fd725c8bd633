"""Warm copies of partitions this process does not own, so a takeover replays only the changelogs' tail.

A standby partition is an ordinary local store (same directory, same checkpoints as an active one)
that a thread of its own keeps up to date by tailing the partition's changelogs `read_committed`,
with the restore's own record conversion. When the partition is assigned, the active path calls
`release` (the standby's RocksDB handle is closed: RocksDB allows one per directory) and restores
from the standby's checkpoint; when it is revoked, `adopt` lets the standby take the store over.

The thread has its own consumer, so tailing never waits on (or delays) a turn's poll; it shares
the GIL with the turns, and takes its records in bounded batches so a turn waits at most one batch.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.partition_restore import record_writes
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.standby_placement import standby_partitions
from scheduler.wire.codec import RecordCodec

log = logging.getLogger(__name__)

BATCH = 2_000         # records applied per lock hold: what a release (or a turn, through the GIL) waits at most
POLL_S = 0.2
PLACEMENT_EVERY_S = 2.0  # how often the group's assignment is read again
REPORT_EVERY_S = 1.0     # lag gauges and position checkpoints
DESCRIBE_TIMEOUT_S = 5.0
STUCK_S = 30.0  # behind, and nothing applied for this long: the consumer is pointed at the checkpoints again


@dataclass
class _Warm:
    """One standby partition: its store and, per changelog, the next offset to apply."""

    store: PartitionStore
    next: dict[str, int]
    at_end: set[str] = field(default_factory=set)  # changelogs read to their end since the store was opened
    applied: int = 0
    caught_up: bool = False


class Standbys:
    def __init__(self, state_root: Path, common: dict[str, Any], changelogs: dict[str, str], group: str,
                 commands_topic: str, partitions: int, codec: RecordCodec, replicas: int,
                 member_id: Callable[[], str | None], metrics: EngineMetrics) -> None:
        self.state_root = state_root
        self.changelogs = changelogs
        self.names = {topic: name for name, topic in changelogs.items()}
        self.group = group
        self.commands_topic = commands_topic
        self.partitions = partitions
        self.codec = codec
        self.replicas = replicas
        self.member_id = member_id
        self.metrics = metrics
        self._common = common
        self._lock = threading.Lock()
        self._active: set[int] = set()   # opened by the active path: never touched here
        self._target: set[int] = set()   # where the placement says this process keeps copies
        self._warm: dict[int, _Warm] = {}
        self._assigned: set[int] = set()  # partitions the tailing consumer is assigned
        self._reopened: set[int] = set()  # closed since the last reconcile: the consumer must seek anew
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the active path's two hooks ----------------------------------------------

    def release(self, partitions: list[int]) -> dict[int, PartitionStore]:
        """These partitions become active here: their standby copies' stores, handed over open (closing and
        opening one again took ~0.1 s a partition, on the takeover's path); the others are for the active path
        to open. The copies' checkpoints say where the active restore goes on."""
        with self._lock:
            self._active.update(partitions)
            handed = {p: self._warm.pop(p).store for p in partitions if p in self._warm}
            self._reopened.update(handed)
        for partition in handed:
            self.metrics.standby_dropped(partition)
        return handed

    def adopt(self, partition: int) -> None:
        """After the active path closed `partition`'s store: a standby may keep it warm from here."""
        with self._lock:
            self._active.discard(partition)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        if self.replicas > 0:
            self._thread = threading.Thread(target=self._run, name="standbys", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            for partition in list(self._warm):
                self._close(partition)

    def _run(self) -> None:
        placement = threading.Thread(target=self._follow_placement, name="standby-placement", daemon=True)
        placement.start()
        consumer = Consumer({**self._common, "group.id": f"{self.group}.standbys", "enable.auto.commit": False,
                             "isolation.level": "read_committed", "enable.partition.eof": True})
        reported_at = progressed_at = time.monotonic()
        try:
            while not self._stop.is_set():
                with self._lock:
                    self._reconcile(consumer)
                if not self._assigned:
                    self._stop.wait(POLL_S)
                    continue
                messages = consumer.consume(BATCH, timeout=POLL_S)
                with self._lock:
                    if self._apply(messages):
                        progressed_at = time.monotonic()
                if time.monotonic() - reported_at >= REPORT_EVERY_S:
                    reported_at = time.monotonic()
                    with self._lock:
                        behind = self._report(consumer)
                        if behind > 4 * len(self._warm) and time.monotonic() - progressed_at > STUCK_S:
                            log.warning("standby copies %d records behind and nothing applied for %.0f s: "
                                        "resuming from their checkpoints", behind, STUCK_S)
                            self._reopened.update(self._warm)
                            progressed_at = time.monotonic()
        except Exception:  # the active path never depends on a standby: log, stop keeping copies
            log.exception("standby tailing stopped; takeovers restore from the last standby checkpoints")
        finally:
            consumer.close()

    def _follow_placement(self) -> None:
        """On a thread of its own: a group description that never answers must not stop the tailing."""
        admin = AdminClient(self._common)
        while not self._stop.wait(PLACEMENT_EVERY_S):
            if not self._place(admin):
                admin = AdminClient(self._common)

    # -- placement ------------------------------------------------------------------

    def _place(self, admin: AdminClient) -> bool:
        """Read the group's assignment; a group mid-rebalance keeps the last placement. False: the admin
        client did not answer and should be replaced."""
        me = self.member_id()
        if not me:
            return True
        with self._lock:
            if len(self._active) >= self.partitions:  # alone: nobody to keep copies for, no group request to risk
                self._target = set()
                return True
        try:
            future = admin.describe_consumer_groups([self.group], request_timeout=DESCRIBE_TIMEOUT_S)[self.group]
            # Bounded here too: a future left unresolved (seen under heavy load) must not stop the tailing.
            description = future.result(timeout=DESCRIBE_TIMEOUT_S * 2)
        except TimeoutError:
            log.warning("group %s not described in %.0f s; standby placement unchanged, admin client renewed",
                        self.group, DESCRIBE_TIMEOUT_S * 2)
            return False
        except KafkaException as exc:
            log.info("group %s not described (%s); standby placement unchanged", self.group, exc)
            return True
        if description.state != ConsumerGroupState.STABLE:
            return True
        owners = {member.member_id: {tp.partition for tp in member.assignment.topic_partitions
                                     if tp.topic == self.commands_topic}
                  for member in description.members}
        if me not in owners:
            return True
        target = standby_partitions(owners, me, self.replicas)
        with self._lock:
            if target != self._target:
                log.info("standby partitions %s (group of %d)", sorted(target), len(owners))
            self._target = target
        return True

    def _reconcile(self, consumer: Consumer) -> None:
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

    def _close(self, partition: int) -> None:
        """Called with the lock held. The consumer is unassigned by the thread's next reconcile; until then
        its records for the partition are dropped (the checkpoint says where to resume)."""
        warm = self._warm.pop(partition, None)
        if warm is not None:
            warm.store.close()
            self._reopened.add(partition)
            self.metrics.standby_dropped(partition)

    # -- tailing ----------------------------------------------------------------------

    def _apply(self, messages: list[Any]) -> bool:
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

    def _report(self, consumer: Consumer) -> int:
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
