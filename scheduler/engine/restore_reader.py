"""Rebuild newly assigned partitions' stores from their compacted changelogs, all of them at once, a slice at a time.

One `read_committed` consumer, made once per process, reads the changelogs of every partition being restored;
their log bounds come from one ListOffsets request per bound for all of them. So a takeover of four partitions
begins the four restores together, instead of one after another with a consumer and two requests each, and a
partition's share of each fetch goes into one RocksDB `WriteBatch` of its own (scheduler/engine/partition_restore.py
says what it writes and when it is checkpointed). Records of transactions that never committed (a crashed or
fenced owner) are never applied. `RestoreReader.step` works until a deadline and returns, so the main loop
restores between the turns of the partitions it owns.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from scheduler.engine.partition_restore import (
    Bounds,
    PartitionRestore,
    RestoreStalled,
    WaitReport,
)
from scheduler.engine.partition_store import PartitionStore
from scheduler.kafka.clients import settled
from scheduler.wire.codec import RecordCodec

__all__ = ["RestoreReader", "RestoreStalled", "restore_partition"]

log = logging.getLogger(__name__)

BATCH = 50_000  # records per consume call
# The longest one consume call waits. A changelog usually ends in a transaction marker, which read_committed
# never returns, so the last call of a replay waits it out: keep it short.
WAIT_S = 0.05
FETCH_CONF = {"fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
              "queued.min.messages": 200_000, "fetch.wait.max.ms": 10}


class RestoreReader:
    """The restores under way in this process, over one consumer; each partition finishes on its own."""

    def __init__(self, consumer_conf: dict[str, Any], changelogs: dict[str, str], codec: RecordCodec,
                 timeout_s: float = 120.0, on_wait: WaitReport | None = None) -> None:
        self.conf, self.changelogs, self.codec, self.timeout_s, self.on_wait = (consumer_conf, changelogs, codec,
                                                                                timeout_s, on_wait)
        self.restores: dict[int, PartitionRestore] = {}
        self._assigned: dict[int, list[TopicPartition]] = {}
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None

    def connect(self) -> None:
        """The reader's clients, connected before a takeover needs them (scheduler.kafka.clients.settled); their
        own, so no other request of the process (the fencing's) shares their queue."""
        if self._consumer is None:
            self._admin = settled(AdminClient(self.conf))
            self._consumer = settled(Consumer({**self.conf, **FETCH_CONF, "group.id": "restore",
                                               "enable.auto.commit": False, "isolation.level": "read_committed",
                                               "enable.partition.eof": True}))

    def _renew_admin(self) -> AdminClient:
        """A new admin client, whose first metadata has the partitions' current leader epochs."""
        self._admin = settled(AdminClient(self.conf))
        return self._admin

    def begin(self, stores: Mapping[int, PartitionStore]) -> dict[int, PartitionRestore]:
        """Start restoring each partition into its store; all their bounds in one request per bound."""
        began = time.monotonic()
        self.connect()
        assert self._admin is not None and self._consumer is not None
        bounds = log_bounds(self._admin, list(self.changelogs.values()), sorted(stores), self.timeout_s,
                            self._renew_admin)
        bounded = time.monotonic()
        started = {p: PartitionRestore(store, self.changelogs, p, self.codec, bounds[p], self.timeout_s, self.on_wait)
                   for p, store in stores.items()}
        self.restores.update(started)
        sources = {p: restore.sources() for p, restore in started.items()}
        fresh = [tp for tps in sources.values() for tp in tps]
        if fresh:
            self._consumer.incremental_assign(fresh)
            self._assigned.update((p, tps) for p, tps in sources.items() if tps)
        log.info("restores of partitions %s begun in %.3f s (log bounds %.3f s): %s", sorted(stores),
                 time.monotonic() - began, bounded - began,
                 ", ".join(f"p{p} {r.remaining} offsets" for p, r in sorted(started.items())))
        return started

    def drop(self, partition: int) -> PartitionRestore | None:
        """Revoked mid-restore: stop reading it; what was written is checkpointed, nothing else is claimed."""
        restore = self.restores.pop(partition, None)
        self._unassign(partition)
        if restore is not None:
            restore.checkpoint()
        return restore

    def step(self, until: float) -> list[int]:
        """Read and apply until every restore is done or `until` (monotonic) has passed; returns the partitions
        whose restore finished (checkpointed, no longer here). A fetch that brings nothing returns at once,
        leaving the rest of the slice to the turns."""
        finished = self._finished()
        consumer = self._consumer
        while self.restores and consumer is not None:
            now = time.monotonic()
            if now >= until:
                break
            messages = consumer.consume(BATCH, timeout=max(0.0, min(WAIT_S, until - now)))
            waited = time.monotonic() - now
            reached: dict[int, dict[str, int]] = {}
            for tp in consumer.position([tp for tps in self._assigned.values() for tp in tps]):
                if tp.offset >= 0:
                    reached.setdefault(tp.partition, {})[tp.topic] = tp.offset
            # A fetch's records come in runs of one changelog partition: grouped by C-level accessors, not a
            # Python call per record.
            # A consumed record always has its partition and topic; the stub types the accessors for any Message.
            runs: dict[int, list[tuple[str, list[Message]]]] = {}
            for partition, records in itertools.groupby(messages, key=Message.partition):
                runs.setdefault(partition, []).extend(  # type: ignore[arg-type]
                    (topic, list(run)) for topic, run in itertools.groupby(records, key=Message.topic))  # type: ignore[misc]
            for partition, restore in list(self.restores.items()):
                restore.advance(runs.get(partition, []), reached.get(partition, {}), waited)
            finished += self._finished()
            if not messages:
                break
        return finished

    def _finished(self) -> list[int]:
        done = [p for p, restore in self.restores.items() if restore.done]
        for partition in done:
            self.restores.pop(partition).finish()
            self._unassign(partition)
        return done

    def _unassign(self, partition: int) -> None:
        tps = self._assigned.pop(partition, None)
        if tps and self._consumer is not None:
            self._consumer.incremental_unassign(tps)

    def close(self) -> None:
        """Closing the consumer can take a while on a loaded machine: done once, when the process stops."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = self._admin = None


def restore_partition(store: PartitionStore, consumer_conf: dict[str, Any], changelogs: dict[str, str],
                      partition: int, codec: RecordCodec, timeout_s: float = 120.0,
                      on_wait: WaitReport | None = None) -> dict[str, int]:
    """Catch one partition's stores up with its changelogs in one go; returns the records applied per store."""
    reader = RestoreReader(consumer_conf, changelogs, codec, timeout_s=timeout_s, on_wait=on_wait)
    try:
        restore = reader.begin({partition: store})[partition]
        while reader.restores:
            reader.step(time.monotonic() + 1.0)
    finally:
        reader.close()
    return restore.applied


# The client's leader epochs are older or newer than the broker's, as after a broker of a cluster restarted and
# leadership moved. librdkafka's admin client does not refresh its metadata on them (bench/gameday.py saw one retry
# for two minutes, stalling the loop, then the process die): a new client is made for the retry.
_STALE_EPOCH = frozenset({KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH})
_TRANSIENT = _STALE_EPOCH | frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
                        KafkaError._TRANSPORT})


def log_bounds(admin: AdminClient, topics: list[str], partitions: list[int], timeout_s: float,
               renew: Callable[[], AdminClient] | None = None) -> dict[int, Bounds]:
    """partition -> changelog topic -> (first offset, high watermark), in one request per bound for all: the
    high watermark as a read_uncommitted reader sees it, past every record, committed, aborted or still open.
    Retried while the error is transient: right after topic creation or a broker restart the partition may
    have no leader yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = {p: {topic: [0, 0] for topic in topics} for p in partitions}
            requests = [admin.list_offsets({TopicPartition(t, p): spec for t in topics for p in partitions},
                                           isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=10)
                        # confluent_kafka's stub leaves OffsetSpec's factories unannotated.
                        for spec in (OffsetSpec.earliest(), OffsetSpec.latest())]  # type: ignore[no-untyped-call]
            for index, futures in enumerate(requests):
                for tp, future in futures.items():
                    found[tp.partition][tp.topic][index] = future.result().offset
            return {p: {topic: (low, high) for topic, (low, high) in bounds.items()} for p, bounds in found.items()}
        except KafkaException as exc:
            error = exc.args[0]
            transient = error.retriable() or error.code() in _TRANSIENT
            if not transient or time.monotonic() > deadline:
                raise
            log.info("log bounds of %s%s not available yet (%s); retrying", topics, partitions, error)
            if error.code() in _STALE_EPOCH and renew is not None:
                admin = renew()
            time.sleep(0.5)
