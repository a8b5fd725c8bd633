"""Warm copies of partitions this process does not own, so a takeover replays only the changelogs' tail.

A standby partition is an ordinary local store (same directory, same checkpoints as an active one)
that a thread of its own keeps up to date by tailing the partition's changelogs `read_committed`,
with the restore's own record conversion. When the partition is assigned, the active path calls
`release` (the standby's store is handed over open: RocksDB allows one handle per directory) and
restores from the standby's checkpoint; when it is revoked, `adopt` lets the standby take the store over.

The thread has its own consumer, so tailing never waits on (or delays) a turn's poll; it shares
the GIL with the turns, and takes its records in bounded batches so a turn waits at most one batch.
This module holds the threads, the lock and the group placement; `standby_copies.StandbyCopies` holds
the copies and the steps that keep them.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import Consumer, ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.standby_copies import StandbyCopies, TailingConsumer
from scheduler.engine.standby_placement import standby_partitions
from scheduler.wire.codec import RecordCodec

log = logging.getLogger(__name__)

BATCH = 2_000         # records applied per lock hold: what a release (or a turn, through the GIL) waits at most
POLL_S = 0.2
PLACEMENT_EVERY_S = 2.0  # how often the group's assignment is read again
REPORT_EVERY_S = 1.0     # lag gauges and position checkpoints
DESCRIBE_TIMEOUT_S = 5.0
STUCK_S = 30.0  # behind, and nothing applied for this long: the consumer is pointed at the checkpoints again


class GroupDescriber(Protocol):
    """What placement asks of an admin client (a confluent_kafka.admin.AdminClient)."""

    def describe_consumer_groups(self, group_ids: list[str], **kwargs: Any) -> Mapping[str, Future[Any]]: ...


class FetchingConsumer(TailingConsumer, Protocol):
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Any]: ...


def owners_of(description: Any, commands_topic: str) -> dict[str, set[int]] | None:
    """Member id -> its commands partitions, from a group description; None for a group mid-rebalance (its
    assignment is about to change, so the last placement stays)."""
    if description.state != ConsumerGroupState.STABLE:
        return None
    return {member.member_id: {tp.partition for tp in member.assignment.topic_partitions
                               if tp.topic == commands_topic}
            for member in description.members}


class Standbys:
    def __init__(self, state_root: Path, common: dict[str, Any], changelogs: dict[str, str], group: str,
                 commands_topic: str, partitions: int, codec: RecordCodec, replicas: int,
                 member_id: Callable[[], str | None], metrics: EngineMetrics) -> None:
        self.changelogs = changelogs
        self.group = group
        self.commands_topic = commands_topic
        self.partitions = partitions
        self.replicas = replicas
        self.member_id = member_id
        self.copies = StandbyCopies(state_root, changelogs, codec, metrics)
        self._common = common
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the active path's two hooks ----------------------------------------------

    def release(self, partitions: list[int]) -> dict[int, PartitionStore]:
        """These partitions become active here: their standby copies' stores, handed over open (closing and
        opening one again took ~0.1 s a partition, on the takeover's path); the others are for the active path
        to open. The copies' checkpoints say where the active restore goes on."""
        with self._lock:
            return self.copies.release(partitions)

    def adopt(self, partition: int) -> None:
        """After the active path closed `partition`'s store: a standby may keep it warm from here."""
        with self._lock:
            self.copies.adopt(partition)

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
            self.copies.close_all()

    def _run(self) -> None:
        placement = threading.Thread(target=self._follow_placement, name="standby-placement", daemon=True)
        placement.start()
        consumer = Consumer({**self._common, "group.id": f"{self.group}.standbys", "enable.auto.commit": False,
                             "isolation.level": "read_committed", "enable.partition.eof": True})
        reported_at = progressed_at = time.monotonic()
        try:
            while not self._stop.is_set():
                if self.tail_once(consumer, POLL_S):
                    progressed_at = time.monotonic()
                if time.monotonic() - reported_at >= REPORT_EVERY_S:
                    reported_at = time.monotonic()
                    # Under the lock: the active path's release changes the copies from the main thread.
                    with self._lock:
                        behind = self.copies.report(consumer)
                        if behind > 4 * len(self.copies.kept) and time.monotonic() - progressed_at > STUCK_S:
                            log.warning("standby copies %d records behind and nothing applied for %.0f s: "
                                        "resuming from their checkpoints", behind, STUCK_S)
                            self.copies.resume_from_checkpoints()
                            progressed_at = time.monotonic()
        except Exception:  # the active path never depends on a standby: log, stop keeping copies
            log.exception("standby tailing stopped; takeovers restore from the last standby checkpoints")
        finally:
            consumer.close()

    def _follow_placement(self) -> None:
        """On a thread of its own: a group description that never answers must not stop the tailing."""
        admin = AdminClient(self._common)
        while not self._stop.wait(PLACEMENT_EVERY_S):
            if not self.place(admin):
                admin = AdminClient(self._common)

    # -- the tailing thread's steps ---------------------------------------------------

    def place(self, admin: GroupDescriber) -> bool:
        """Read the group's assignment once; a group mid-rebalance keeps the last placement. False: the admin
        client did not answer and should be replaced."""
        me = self.member_id()
        if not me:
            return True
        with self._lock:
            if self.copies.active_count >= self.partitions:  # alone: nobody to keep copies for, no request to risk
                self.copies.place(set())
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
        owners = owners_of(description, self.commands_topic)
        if owners is None or me not in owners:
            return True
        target = standby_partitions(owners, me, self.replicas)
        with self._lock:
            if self.copies.place(target):
                log.info("standby partitions %s (group of %d)", sorted(target), len(owners))
        return True

    def tail_once(self, consumer: FetchingConsumer, timeout_s: float) -> bool:
        """One round: reconcile the copies with the placement, fetch a batch, apply it. True: records applied.
        With nothing assigned it waits `timeout_s` (or until closed) instead of fetching."""
        with self._lock:
            self.copies.reconcile(consumer)
            assigned = self.copies.assigned
        if not assigned:
            self._stop.wait(timeout_s)
            return False
        messages = consumer.consume(BATCH, timeout=timeout_s)
        with self._lock:
            return self.copies.apply(messages)

    def report(self, consumer: TailingConsumer) -> int:
        """Each copy's lag to the gauges, positions past markers checkpointed; returns the total behind."""
        with self._lock:
            return self.copies.report(consumer)

