"""One partition's catch-up with its changelogs: what a batch of changelog records writes into its stores.

Wake-ups are not logged: they are an index of the schedules store, rebuilt beside it from the ``wake`` header
each schedule record carries (Avro-decoding a million schedules alone would take longer than the whole restore
may; a record without the header, written before it existed, is decoded).

Batches are written without RocksDB's WAL (`BulkWrite`) and without a checkpoint; every `CHECKPOINT_EVERY`
records, at the end and when the restore is dropped, the memtables are flushed and only then the positions
reached are checkpointed. A crash mid-restore loses at most what was written since the last checkpoint, and
the next restore reads it again from there: replaying a changelog from an earlier offset ends in the same state.

A restore reads to the end of the log, not to the end a ``read_committed`` reader is shown: that is the last
stable offset, the start of the oldest open transaction, and whatever was committed after it would be missing
from the restored state. So an open transaction is waited for, with a log line and a metric saying so, until it
is committed or aborted; if the restore makes no progress within the bound, it fails loudly and the partition
never dispatches on partial state.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, Message, TopicPartition

from scheduler.engine import timeline_keys
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.timeline_keys import NO_DEADLINE, WAKE_HEADER, LocalEntry
from scheduler.wire.codec import RecordCodec
from scheduler.wire.records import TimelineEntry

log = logging.getLogger(__name__)

# Records written without the WAL between two checkpoints: what a kill -9 mid-restore makes the next owner
# read again (a few seconds' worth), and the flushes a long restore pays for.
CHECKPOINT_EVERY = 1_000_000
# Told how long a restore has been held at an open transaction: (changelog topic, partition, seconds).
WaitReport = Callable[[str, int, float], None]
STALL_REPORT_S = 1.0  # held this long at the last stable offset: logged and reported
Changes = dict[str, dict[bytes, bytes | None]]
Bounds = dict[str, tuple[int, int]]  # changelog topic -> (first offset, high watermark)


class RestoreStalled(TimeoutError):
    """The committed end of a changelog was not reached in time: the partition must not start."""


class PartitionRestore:
    """The catch-up of one partition's stores from their checkpoints to the `bounds`' ends, advanced with the
    records a shared reader hands it (scheduler/engine/restore_reader.py); the reader's `drop` at any point leaves the
    store consistent with its checkpoints (the caller closes the store)."""

    def __init__(self, store: PartitionStore, changelogs: dict[str, str], partition: int, codec: RecordCodec,
                 bounds: Bounds, timeout_s: float = 120.0, on_wait: WaitReport | None = None) -> None:
        self.store, self.partition, self.codec, self.timeout_s = store, partition, codec, timeout_s
        self.stores = {topic: name for name, topic in changelogs.items()}
        self.applied = {name: 0 for name in changelogs}
        self.started = time.monotonic()
        self.starts = {topic: max(store.changelog_offset(name), bounds[topic][0])
                       for topic, name in self.stores.items()}
        self.ends = {topic: bounds[topic][1] for topic in self.stores}
        self.positions = dict(self.starts)
        report = on_wait or (lambda topic, partition, seconds: None)
        self._stalls = {topic: _Stall(topic, partition, self.ends[topic], report) for topic in self.stores}
        self._held_s = 0.0  # waited without progress since the last record
        self._stable_end: dict[str, int] = {}  # topic -> where read_committed said the log ends, for now
        self._unclaimed = 0  # records written since the last checkpoint

    def sources(self) -> list[TopicPartition]:
        """The changelog partitions with something to read, at the offsets to read them from."""
        return [TopicPartition(t, self.partition, self.starts[t]) for t in self.stores if self.starts[t] < self.ends[t]]

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

    def advance(self, runs: list[tuple[str, list[Message]]], positions: dict[str, int], waited_s: float) -> None:
        """One fetch's share: `runs` of records per changelog topic, the reader's `positions` once it handed
        them over, and how long the fetch waited. Raises RestoreStalled when held past the bound."""
        before = self.remaining
        for topic, offset in positions.items():
            if offset > self.positions[topic]:
                self.positions[topic] = offset
        if runs:
            self._apply(runs)
        for topic, stall in self._stalls.items():
            if self.starts[topic] < self.ends[topic]:
                stall.at(self.positions[topic], self._stable_end.get(topic) == self.positions[topic])
        if self.remaining < before:
            self._held_s = 0.0
            return
        # Only the time spent waiting counts towards the bound, not the turns this restore had no slice in.
        self._held_s += waited_s
        if self._held_s > self.timeout_s and not self.done:
            topic = min(self.stores, key=lambda t: self.positions[t] - self.ends[t])
            raise RestoreStalled(
                f"restoring {topic}[{self.partition}] stopped at offset {self.positions[topic]} of "
                f"{self.ends[topic]} for {self.timeout_s:.0f} s: a transaction there was neither committed "
                "nor aborted; the partition is not started on partial state")

    def _apply(self, runs: list[tuple[str, list[Message]]]) -> None:
        """One WriteBatch with the fetch's records. The loops are the restore's cost per record (a million
        schedules in a few seconds of one core): one pass per run of one changelog, no per-record calls but the
        Message accessors and the batch's puts."""
        batch = self.store.bulk()
        put, delete, handle = batch.put, batch.delete, batch.handle
        schedules_h, timeline_h = handle("schedules"), handle("timeline")
        codec = self.codec
        for topic, run in runs:
            name = self.stores[topic]
            events = 0  # end-of-log events among the run's records
            if name == "schedules":
                for msg in run:
                    if msg.error() is not None:
                        events += self._eof(topic, msg)
                        continue
                    key, value = msg.key(), msg.value()
                    if key is None:
                        raise RuntimeError(f"restoring {topic}[{self.partition}]: a record without a key")
                    if value is None:
                        delete(key, schedules_h)
                        continue
                    put(key, value, schedules_h)
                    # The wake-up of the key's value before is left in place: one that no longer matches its
                    # schedule is dropped when it falls due (SchedulerTask.materialize_due), and looking every key
                    # up first would double the restore's work.
                    headers = msg.headers()  # a list of pairs from a consumer (header_wake, inlined)
                    wake = (headers[0][1] if isinstance(headers, list) and headers and headers[0][0] == WAKE_HEADER
                            else timeline_keys.wake_key(codec.decode("ScheduleState", value)))
                    if wake and isinstance(wake, bytes):  # a consumer's header values are bytes
                        put(wake, b"", timeline_h)
            else:
                target = timeline_h if name == "timeline" else handle(name)
                for msg in run:
                    if msg.error() is not None:
                        events += self._eof(topic, msg)
                        continue
                    key, value = msg.key(), msg.value()
                    if key is None:
                        raise RuntimeError(f"restoring {topic}[{self.partition}]: a record without a key")
                    if value is None:
                        delete(key, target)
                    else:
                        put(key, local_entry(value, codec) if target is timeline_h else value, target)
            self.applied[name] += len(run) - events
            self._unclaimed += len(run) - events
        batch.commit()
        if self._unclaimed >= CHECKPOINT_EVERY:
            self.checkpoint()

    def _eof(self, topic: str, msg: Message) -> int:
        """The reader reached the end it is shown (an error other than that fails the restore); returns 1."""
        error, offset = msg.error(), msg.offset()
        if error is None or error.code() != KafkaError._PARTITION_EOF or offset is None:
            raise RuntimeError(f"restoring {topic}[{self.partition}]: {error}")
        self.positions[topic] = max(self.positions[topic], offset)
        self._stable_end[topic] = offset
        return 1

    def checkpoint(self) -> None:
        """Claim what was written: flushed first, then the positions reached (`PartitionStore.checkpoint`)."""
        self.store.checkpoint({self.stores[t]: self.positions[t] for t in self.stores}, self._unclaimed > 0)
        self._unclaimed = 0

    def finish(self) -> None:
        self.checkpoint()
        log.info("restored partition %d: %s records in %.2f s", self.partition,
                 ", ".join(f"{n} {name}" for name, n in self.applied.items()), time.monotonic() - self.started)


def header_wake(headers: object) -> bytes | None:
    """The wake-up key a schedules changelog record's header names (b"": none); None for a record written
    before the header existed. A consumer hands headers as a list of (name, value) pairs."""
    if isinstance(headers, list) and headers and headers[0][0] == WAKE_HEADER:
        wake = headers[0][1]
        return wake if isinstance(wake, bytes) else b""
    return None


def schedule_wake(msg: Message, codec: RecordCodec) -> bytes:
    """The wake-up key a schedules changelog record names (b"": none): from its header, or, for a record
    written before the header existed, from its decoded value."""
    wake = header_wake(msg.headers())
    if wake is not None:
        return wake
    return timeline_keys.wake_key(codec.decode("ScheduleState", msg.value() or b"")) or b""


def local_entry(value: bytes, codec: RecordCodec) -> bytes:
    """A timeline changelog record (wire form) as the packed entry the local timeline stores."""
    entry: TimelineEntry = codec.decode("TimelineEntry", value)
    deadline = entry["deadline_ms"] if entry["deadline_ms"] is not None else NO_DEADLINE
    return LocalEntry(entry["tenant"], entry["schedule_id"], entry["topic"], entry["occurrence_id"],
                      entry["occurrence"], deadline, entry["overlap_policy"]).pack()


def record_writes(name: str, msg: Message, codec: RecordCodec) -> Changes:
    """What one record of store `name`'s changelog writes, record by record (the standbys tail with it)."""
    key, value = msg.key(), msg.value()
    if key is None:
        raise ValueError(f"a {name} changelog record without a key")
    if name == "schedules":
        wake = schedule_wake(msg, codec) if value is not None else b""
        return {"schedules": {key: value}, "timeline": {wake: b""} if wake else {}}
    if name == "timeline":
        return {"timeline": {key: None if value is None else local_entry(value, codec)}}
    return {name: {key: value}}


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
