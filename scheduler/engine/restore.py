"""Rebuild a partition's stores from their compacted changelogs, from the local checkpoint on, a slice at a time.

Reads with ``read_committed``, so records of transactions that never committed
(a crashed or fenced owner) are never applied. Wake-ups are not logged: they
are an index of the schedules store, rebuilt beside it from the ``wake`` header
each schedule record carries (Avro-decoding a million schedules alone would
take longer than the whole restore may; a record without the header, written
before it existed, is decoded).

One consumer reads the four changelogs of the partition; each batch becomes one
RocksDB ``WriteBatch`` with the checkpoints it reached, so an interrupted restore
(revoked, killed) leaves the store at a batch boundary and claims nothing past it.
``PartitionRestore.step`` works until a deadline and returns, so the main loop
restores newly assigned partitions between the turns of the ones it owns.

A restore reads to the end of the log, not to the end a ``read_committed``
reader is shown: that is the last stable offset, the start of the oldest open
transaction, and whatever was committed after it would be missing from the
restored state (cancels, updates, tombstones of occurrences already sent). So an
open transaction is waited for, with a log line and a metric saying so, until it
is committed or aborted; if the restore makes no progress within the bound, it
fails loudly and the partition never dispatches on partial state.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from scheduler.engine import timeline_keys
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.timeline_keys import NO_DEADLINE, WAKE_HEADER, LocalEntry

log = logging.getLogger(__name__)

BATCH = 50_000  # records per consume call and per WriteBatch
# The longest one consume call waits. A changelog usually ends in a transaction marker, which read_committed
# never returns, so the last call of a replay waits it out: keep it short.
WAIT_S = 0.05
FETCH_CONF = {"fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
              "queued.min.messages": 200_000, "fetch.wait.max.ms": 10}

# Told how long a restore has been held at an open transaction: (changelog topic, partition, seconds).
WaitReport = Callable[[str, int, float], None]
STALL_REPORT_S = 1.0  # held this long at the last stable offset: logged and reported
Changes = dict[str, dict[bytes, bytes | None]]


class RestoreStalled(TimeoutError):
    """The committed end of a changelog was not reached in time: the partition must not start."""


class PartitionRestore:
    """The catch-up of one partition's stores, advanced by `step` until `done`; `close` at any point leaves the
    store consistent with its checkpoints (the caller closes the store)."""

    def __init__(self, store: PartitionStore, consumer_conf: dict[str, Any], changelogs: dict[str, str],
                 partition: int, codec: Any, timeout_s: float = 120.0, on_wait: WaitReport | None = None,
                 admin: AdminClient | None = None) -> None:
        self.store, self.partition, self.codec, self.timeout_s = store, partition, codec, timeout_s
        self.stores = {topic: name for name, topic in changelogs.items()}
        self.applied = {name: 0 for name in changelogs}
        self.started = time.monotonic()
        bounds = _log_bounds(admin or AdminClient(consumer_conf), list(changelogs.values()), partition, timeout_s)
        self.starts = {topic: max(store.changelog_offset(name), bounds[topic][0])
                       for topic, name in self.stores.items()}
        self.ends = {topic: bounds[topic][1] for topic in self.stores}
        self.positions = dict(self.starts)
        self._report = on_wait or (lambda topic, partition, seconds: None)
        self._stalls = {topic: _Stall(topic, partition, self.ends[topic], self._report) for topic in self.stores}
        self._held_s = 0.0  # waited without progress since the last record
        self._stable_end: dict[str, int] = {}  # topic -> where read_committed said the log ends, for now
        self.consumer: Consumer | None = None
        pending = [TopicPartition(t, partition, self.starts[t]) for t in self.stores if self.starts[t] < self.ends[t]]
        if pending:
            self.consumer = Consumer({**consumer_conf, **FETCH_CONF, "group.id": "restore",
                                      "enable.auto.commit": False, "isolation.level": "read_committed",
                                      "enable.partition.eof": True})
            self.consumer.assign(pending)

    @property
    def done(self) -> bool:
        return all(self.positions[topic] >= self.ends[topic] for topic in self.stores)

    @property
    def remaining(self) -> int:
        """Changelog offsets still to read (records, markers and aborted records alike)."""
        return sum(max(0, self.ends[t] - self.positions[t]) for t in self.stores)

    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; None before anything was read."""
        read = sum(self.positions[t] - self.starts[t] for t in self.stores)
        elapsed = time.monotonic() - self.started
        return self.remaining * elapsed / read if read > 0 else None

    def step(self, until: float) -> bool:
        """Apply batches until the store is caught up or `until` (monotonic) has passed; True when done. A call
        that finds nothing new returns at once, leaving the rest of the slice to the other restores."""
        consumer = self.consumer
        while consumer is not None and not self.done:
            now = time.monotonic()
            if now >= until:
                return False
            before = self.remaining
            messages = consumer.consume(BATCH, timeout=max(0.0, min(WAIT_S, until - now)))
            # Where the consumer stands once it handed over the batch: the checkpoints the batch is written with.
            for tp in consumer.position([TopicPartition(t, self.partition) for t in self.stores
                                         if self.starts[t] < self.ends[t]]):
                if tp.offset >= 0 and tp.offset > self.positions[tp.topic]:
                    self.positions[tp.topic] = tp.offset
            self._apply(messages)
            for topic, stall in self._stalls.items():
                if self.starts[topic] < self.ends[topic]:
                    stall.at(self.positions[topic], self._stable_end.get(topic) == self.positions[topic])
            if self.remaining < before:
                self._held_s = 0.0
                continue
            # Only the time spent waiting counts towards the bound, not the turns this restore had no slice in.
            self._held_s += time.monotonic() - now
            if self._held_s > self.timeout_s:
                topic = min(self.stores, key=lambda t: self.positions[t] - self.ends[t])
                raise RestoreStalled(
                    f"restoring {topic}[{self.partition}] stopped at offset {self.positions[topic]} of "
                    f"{self.ends[topic]} for {self.timeout_s:.0f} s: a transaction there was neither committed "
                    "nor aborted; the partition is not started on partial state")
            if not self.done:
                return False
        if self.done:
            self._finish()
        return self.done

    def _apply(self, messages: list[Message]) -> None:
        """One WriteBatch with the batch's records and the positions reached. The loop is the restore's cost
        per record (a million schedules in a few seconds of one core): one pass, no per-record calls but the
        Message accessors and the batch's puts."""
        if not messages:
            return
        batch = self.store.bulk()
        put, delete, handle = batch.put, batch.delete, batch.handle
        schedules_h, timeline_h = handle("schedules"), handle("timeline")
        counts = dict.fromkeys(self.stores, 0)
        latest: dict[bytes, Message] = {}  # schedules: the batch's last record per key (see _schedules)
        for msg in messages:
            topic = msg.topic()
            name = self.stores.get(topic)
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"restoring {topic}[{self.partition}]: {error}")
                self.positions[topic] = max(self.positions[topic], msg.offset())
                self._stable_end[topic] = msg.offset()
                continue
            counts[topic] += 1
            if name == "schedules":
                latest[msg.key()] = msg
            elif name == "timeline":
                value = msg.value()
                if value is None:
                    delete(msg.key(), timeline_h)
                else:
                    put(msg.key(), local_entry(value, self.codec), timeline_h)
            else:
                value = msg.value()
                if value is None:
                    delete(msg.key(), handle(name))
                else:
                    put(msg.key(), value, handle(name))
        self._schedules(latest, put, delete, schedules_h, timeline_h)
        for topic, n in counts.items():
            self.applied[self.stores[topic]] += n
        batch.commit({self.stores[t]: self.positions[t] for t in self.stores if counts[t]})

    def _schedules(self, latest: dict[bytes, Message], put: Any, delete: Any, schedules_h: Any,
                   timeline_h: Any) -> None:
        """The schedules and their wake-ups, from the batch's last value per key. The wake-up of the value a
        key had before is left in place: a wake-up that no longer matches its schedule is dropped when it falls
        due (SchedulerTask.materialize_due), and looking every key up first would double the restore's work."""
        codec = self.codec
        for key, msg in latest.items():
            value = msg.value()
            if value is None:
                delete(key, schedules_h)
                continue
            put(key, value, schedules_h)
            headers = msg.headers()
            wake = (headers[0][1] if headers and headers[0][0] == WAKE_HEADER else
                    timeline_keys.wake_key(codec.decode("ScheduleState", value)))
            if wake:
                put(wake, b"", timeline_h)

    def _finish(self) -> None:
        self.store.write({}, {self.stores[t]: self.positions[t] for t in self.stores})
        log.info("restored partition %d: %s records in %.2f s", self.partition,
                 ", ".join(f"{n} {name}" for name, n in self.applied.items()), time.monotonic() - self.started)

    def close(self) -> None:
        """Closing the consumer can take seconds on a loaded machine: callers on the loop do it on a thread."""
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


def schedule_wake(msg: Message, codec: Any) -> bytes:
    """The wake-up key a schedules changelog record names (b"": none): from its header, or, for a record
    written before the header existed, from its decoded value."""
    headers = msg.headers()
    if headers and headers[0][0] == WAKE_HEADER:
        return headers[0][1] or b""
    return timeline_keys.wake_key(codec.decode("ScheduleState", msg.value())) or b""


def local_entry(value: bytes, codec: Any) -> bytes:
    """A timeline changelog record (wire form) as the packed entry the local timeline stores."""
    entry = codec.decode("TimelineEntry", value)
    deadline = entry["deadline_ms"] if entry["deadline_ms"] is not None else NO_DEADLINE
    return LocalEntry(entry["tenant"], entry["schedule_id"], entry["topic"], entry["occurrence_id"],
                      entry["occurrence"], deadline, entry["overlap_policy"]).pack()


def record_writes(name: str, msg: Message, codec: Any) -> Changes:
    """What one record of store `name`'s changelog writes, record by record (the standbys tail with it)."""
    key, value = msg.key(), msg.value()
    if name == "schedules":
        wake = schedule_wake(msg, codec) if value is not None else b""
        return {"schedules": {key: value}, "timeline": {wake: b""} if wake else {}}
    if name == "timeline":
        return {"timeline": {key: None if value is None else local_entry(value, codec)}}
    return {name: {key: value}}


def restore_partition(store: PartitionStore, consumer_conf: dict[str, Any], changelogs: dict[str, str],
                      partition: int, codec: Any, timeout_s: float = 120.0,
                      on_wait: WaitReport | None = None) -> dict[str, int]:
    """Catch each store up with its changelog in one go; returns the number of records applied per store."""
    restore = PartitionRestore(store, consumer_conf, changelogs, partition, codec, timeout_s, on_wait)
    try:
        while not restore.step(time.monotonic() + 1.0):
            pass
    finally:
        restore.close()
    return restore.applied


class _Stall:
    """Notices a replay held at one offset short of the end: a read_committed reader cannot pass an open
    transaction, so the position stays at its first record until it is committed or aborted."""

    def __init__(self, topic: str, partition: int, high: int, on_wait: WaitReport) -> None:
        self.topic, self.partition, self.high, self.on_wait = topic, partition, high, on_wait
        self.position = -1
        self.since = time.monotonic()
        self.reported = False

    def at(self, position: int, at_stable_end: bool) -> None:
        """`at_stable_end`: the reader was told the log ends here (a slow fetch is no open transaction)."""
        now = time.monotonic()
        if position != self.position or position >= self.high or not at_stable_end:
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


def _log_bounds(admin: AdminClient, topics: list[str], partition: int, timeout_s: float) -> dict[str, tuple[int, int]]:
    """(first offset, high watermark) of each changelog partition, in one request each: the high watermark as
    a read_uncommitted reader sees it, past every record, committed, aborted or still open. Retried while the
    error is transient: right after topic creation or a broker restart the partition may have no leader yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found: dict[str, list[int]] = {topic: [0, 0] for topic in topics}
            for index, spec in enumerate((OffsetSpec.earliest(), OffsetSpec.latest())):
                futures = admin.list_offsets({TopicPartition(t, partition): spec for t in topics},
                                             isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=10)
                for tp, future in futures.items():
                    found[tp.topic][index] = future.result().offset
            return {topic: (low, high) for topic, (low, high) in found.items()}
        except KafkaException as exc:
            error = exc.args[0]
            transient = error.retriable() or error.code() in _TRANSIENT
            if not transient or time.monotonic() > deadline:
                raise
            log.info("log bounds of %s[%d] not available yet (%s); retrying", topics, partition, error)
            time.sleep(0.5)
