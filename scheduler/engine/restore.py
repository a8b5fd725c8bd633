"""Rebuild a partition's stores from their compacted changelogs, from the local checkpoint on.

Reads with ``read_committed``, so records of transactions that never committed
(a crashed or fenced owner) are never applied. Wake-ups are not logged: they
are an index of the schedules store and are rebuilt beside it.
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


def restore_partition(store: PartitionStore, consumer_conf: dict[str, Any], changelogs: dict[str, str],
                      partition: int, codec: Any, timeout_s: float = 120.0) -> dict[str, int]:
    """Catch each store up with its changelog; returns the number of records applied per store."""
    applied = {}
    for name, topic in changelogs.items():
        convert = {"schedules": _schedule_changes(store, codec), "timeline": _timeline_changes(codec)}.get(
            name, _as_is(name))
        applied[name] = _replay(store, name, topic, partition, consumer_conf, convert, timeout_s)
    return applied


Converter = Callable[[bytes, bytes | None, dict[bytes, bytes | None]], dict[str, dict[bytes, bytes | None]]]


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
            convert: Converter, timeout_s: float) -> int:
    start = store.changelog_offset(name)
    conf = {**consumer_conf, "group.id": f"restore-{topic}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True}
    consumer = Consumer(conf)
    try:
        low, high = _watermarks(consumer, TopicPartition(topic, partition, start), timeout_s)
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
        while position < high:
            if time.monotonic() > deadline:
                raise TimeoutError(f"restoring {topic}[{partition}] stalled at {position} of {high}: "
                                   "an open transaction older than transaction.timeout.ms?")
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
        log.info("restored %s[%d]: %d records, offsets %d..%d", topic, partition, applied, start, high)
        return applied
    finally:
        consumer.close()


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
