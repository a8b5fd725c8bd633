"""Rebuild a partition's stores from their compacted changelogs, from the local checkpoint on.

Reads with ``read_committed``, so records of transactions that never committed
(a crashed or fenced owner) are never applied. Wake-ups are not logged: they
are an index of the schedules store and are rebuilt beside it.

A restore reads to the end of the log, not to the end a ``read_committed``
reader is shown: that is the last stable offset, the start of the oldest open
transaction, and whatever was committed after it would be missing from the
restored state (cancels, updates, tombstones of occurrences already sent). So an
open transaction is waited for, with a log line and a metric saying so, until it
is committed or aborted; if that does not happen within the bound, the restore
fails loudly and the partition never dispatches on partial state.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from scheduler.engine import timeline_keys
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.timeline_keys import NO_DEADLINE, LocalEntry

log = logging.getLogger(__name__)

BATCH = 10_000
# A consume call returns after BATCH records or this wait. A changelog usually ends in a transaction
# marker, which read_committed never returns, so every replay's last call waits it out: keep it short,
# or a failover pays it per store and partition.
WAIT_S = 0.05


# Told how long a restore has been held at an open transaction: (changelog topic, partition, seconds).
WaitReport = Callable[[str, int, float], None]
STALL_REPORT_S = 1.0  # held this long at the last stable offset: logged and reported


class RestoreStalled(TimeoutError):
    """The committed end of a changelog was not reached in time: the partition must not start."""


def restore_partition(store: PartitionStore, consumer_conf: dict[str, Any], changelogs: dict[str, str],
                      partition: int, codec: Any, timeout_s: float = 120.0,
                      on_wait: WaitReport | None = None) -> dict[str, int]:
    """Catch each store up with its changelog; returns the number of records applied per store."""
    ends = _log_ends(consumer_conf, list(changelogs.values()), partition, timeout_s)
    applied = {}
    for name, topic in changelogs.items():
        convert = {"schedules": _schedule_changes(store, codec), "timeline": _timeline_changes(codec)}.get(
            name, _as_is(name))
        applied[name] = _replay(store, name, topic, partition, consumer_conf, convert, ends[topic], timeout_s,
                                on_wait or (lambda topic, partition, seconds: None))
    return applied


def _log_ends(consumer_conf: dict[str, Any], topics: list[str], partition: int, timeout_s: float) -> dict[str, int]:
    """The high watermark of each changelog partition: past every record, committed, aborted or still open."""
    consumer = Consumer({**consumer_conf, "group.id": "restore-ends", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    try:
        return {topic: _watermarks(consumer, TopicPartition(topic, partition), timeout_s)[1] for topic in topics}
    finally:
        consumer.close()


Converter = Callable[[bytes, bytes | None, dict[bytes, bytes | None]], dict[str, dict[bytes, bytes | None]]]


def changelog_converter(name: str, store: PartitionStore, codec: Any) -> Converter:
    """How a record of store `name`'s changelog becomes store writes: the standbys tail with the same."""
    if name == "schedules":
        return _schedule_changes(store, codec)
    return _timeline_changes(codec) if name == "timeline" else _as_is(name)


def _schedule_changes(store: PartitionStore, codec: Any) -> Converter:
    def convert(key: bytes, value: bytes | None, pending: dict[bytes, bytes | None]) -> dict:
        old_raw = pending[key] if key in pending else store.get("schedules", key)
        wakes: dict[bytes, bytes | None] = {}
        for raw, put in ((old_raw, False), (value, True)):
            if raw is None:
                continue
            wake = timeline_keys.wake_key(codec.decode("ScheduleState", raw))
            if wake is not None:
                wakes[wake] = b"" if put else None
        pending[key] = value
        return {"schedules": {key: value}, "timeline": wakes}
    return convert


def _as_is(name: str) -> Converter:
    def convert(key: bytes, value: bytes | None, pending: dict[bytes, bytes | None]) -> dict:
        return {name: {key: value}}
    return convert


def _timeline_changes(codec: Any) -> Converter:
    def convert(key: bytes, value: bytes | None, pending: dict[bytes, bytes | None]) -> dict:
        if value is None:
            return {"timeline": {key: None}}
        entry = codec.decode("TimelineEntry", value)
        deadline = entry["deadline_ms"] if entry["deadline_ms"] is not None else NO_DEADLINE
        local = LocalEntry(entry["tenant"], entry["schedule_id"], entry["topic"], entry["occurrence_id"],
                           entry["occurrence"], deadline, entry["overlap_policy"])
        return {"timeline": {key: local.pack()}}
    return convert


def _replay(store: PartitionStore, name: str, topic: str, partition: int, consumer_conf: dict[str, Any],
            convert: Converter, high: int, timeout_s: float, on_wait: WaitReport) -> int:
    """Apply the changelog from the checkpoint to `high`, the log end found before the restore began."""
    start = store.changelog_offset(name)
    conf = {**consumer_conf, "group.id": f"restore-{topic}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True}
    consumer = Consumer(conf)
    try:
        low, _ = _watermarks(consumer, TopicPartition(topic, partition, start), timeout_s)
        if start < low:
            start = low
        if start >= high:
            return 0
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        applied = 0
        changes: dict[str, dict[bytes, bytes | None]] = {}
        pending: dict[bytes, bytes | None] = {}
        position = start
        stalled = _Stall(topic, partition, high, on_wait)
        while position < high:
            if time.monotonic() > deadline:
                raise RestoreStalled(
                    f"restoring {topic}[{partition}] stopped at offset {position} of {high} for {timeout_s:.0f} s: "
                    "a transaction there was neither committed nor aborted; the partition is not started on "
                    "partial state")
            stalled.at(position)
            for msg in consumer.consume(BATCH, timeout=WAIT_S):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        position = max(position, msg.offset())
                        continue
                    raise RuntimeError(f"restoring {topic}[{partition}]: {msg.error()}")
                for store_name, writes in convert(msg.key(), msg.value(), pending).items():
                    changes.setdefault(store_name, {}).update(writes)
                applied += 1
                position = msg.offset() + 1
            if changes:
                store.write(changes, {name: position})
                changes, pending = {}, {}
            position = max(position, consumer.position([TopicPartition(topic, partition)])[0].offset)
        store.write({}, {name: position})
        stalled.at(position)
        log.info("restored %s[%d]: %d records, offsets %d..%d", topic, partition, applied, start, high)
        return applied
    finally:
        consumer.close()


class _Stall:
    """Notices a replay held at one offset short of the end: a read_committed reader cannot pass an open
    transaction, so the position stays at its first record until it is committed or aborted."""

    def __init__(self, topic: str, partition: int, high: int, on_wait: WaitReport) -> None:
        self.topic, self.partition, self.high, self.on_wait = topic, partition, high, on_wait
        self.position = -1
        self.since = time.monotonic()
        self.reported = False

    def at(self, position: int) -> None:
        now = time.monotonic()
        if position != self.position:
            if self.reported:
                log.info("restoring %s[%d]: the open transaction at %d ended after %.1f s", self.topic,
                         self.partition, self.position, now - self.since)
                self.on_wait(self.topic, self.partition, 0.0)
            self.position, self.since, self.reported = position, now, False
            return
        if now - self.since >= STALL_REPORT_S and not self.reported:
            self.reported = True
            log.warning("restoring %s[%d] waits at offset %d of %d: a transaction of a previous owner is still "
                        "open there; the partition starts once it is committed or aborted", self.topic,
                        self.partition, position, self.high)
        if self.reported:
            self.on_wait(self.topic, self.partition, now - self.since)


_TRANSIENT = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
                        KafkaError._TRANSPORT})


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """Retried while the error is transient: right after topic creation or a broker restart the
    partition may not have a leader yet (NOT_LEADER_FOR_PARTITION), which is no reason to die."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=10)
        except KafkaException as exc:
            error = exc.args[0]
            transient = error.retriable() or error.code() in _TRANSIENT
            if not transient or time.monotonic() > deadline:
                raise
            log.info("watermarks of %s[%d] not available yet (%s); retrying", tp.topic, tp.partition, error)
            time.sleep(0.5)
