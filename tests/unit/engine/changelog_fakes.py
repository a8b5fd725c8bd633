"""Changelog partitions in memory, and the consumer and admin client a restore or a standby reads them with.

`ChangelogConsumer` behaves as a `read_committed` consumer with `enable.partition.eof` does, as far as the
engine looks: it hands out the records from each assigned position, at most `per_fetch` per partition and
call, never past the log's stable end (an open transaction's first offset), skips offsets that hold no record
(transaction markers, aborted records) and reports the end it reached once with a `_PARTITION_EOF` message;
its positions are the next offsets to read. No broker, no thread: every call answers at once.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, TopicPartition
from confluent_kafka.admin import OffsetSpec

EARLIEST = type(OffsetSpec.earliest())  # type: ignore[no-untyped-call]
Record = tuple[bytes, bytes | None, list[tuple[str, bytes]] | None]  # key, value (None: a tombstone), headers


@dataclass
class Log:
    """One changelog partition: records by offset, the log's first offset, its high watermark (past every
    record and marker) and, while a transaction is open, the offset a read_committed reader stops at."""

    records: dict[int, Record] = field(default_factory=dict)
    low: int = 0
    high: int = 0
    open_at: int | None = None

    def append(self, key: bytes, value: bytes | None, headers: list[tuple[str, bytes]] | None = None,
               marker: bool = False) -> int:
        """A record at the end (then a transaction marker after it, when `marker`); returns its offset."""
        offset = self.high
        self.records[offset] = (key, value, headers)
        self.high += 2 if marker else 1
        return offset

    @property
    def stable(self) -> int:
        return self.high if self.open_at is None else self.open_at


class Changelogs(dict[tuple[str, int], Log]):
    """(topic, partition) -> its log; a partition never written is an empty log."""

    def __missing__(self, key: tuple[str, int]) -> Log:
        log = self[key] = Log()
        return log


class ChangelogConsumer:
    def __init__(self, logs: Changelogs, per_fetch: int = 1_000) -> None:
        self.logs, self.per_fetch = logs, per_fetch
        self.positions: dict[tuple[str, int], int] = {}
        self.assigns: list[list[tuple[str, int, int]]] = []
        self.unassigns: list[list[tuple[str, int]]] = []
        self.consumes = 0
        self.closed = False
        self._told_end: dict[tuple[str, int], int] = {}

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        pass  # scheduler.kafka.clients.settled asks for metadata twice

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.assigns.append([(tp.topic, tp.partition, tp.offset) for tp in tps])
        for tp in tps:
            self.positions[(tp.topic, tp.partition)] = tp.offset
            self._told_end.pop((tp.topic, tp.partition), None)

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        self.unassigns.append([(tp.topic, tp.partition) for tp in tps])
        for tp in tps:
            self.positions.pop((tp.topic, tp.partition), None)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        self.consumes += 1
        out: list[Message] = []
        for (topic, partition), position in self.positions.items():
            log = self.logs[(topic, partition)]
            taken = 0
            while position < log.stable and taken < self.per_fetch:
                if position in log.records:
                    key, value, headers = log.records[position]
                    out.append(Message(topic=topic, partition=partition, offset=position, key=key, value=value,
                                       headers=headers, error=None))
                    taken += 1
                position += 1
            while position < log.stable and position not in log.records:
                position += 1  # markers and aborted records: never handed out
            if position >= log.stable and self._told_end.get((topic, partition)) != position:
                self._told_end[(topic, partition)] = position
                out.append(Message(topic=topic, partition=partition, offset=position,
                                   error=KafkaError(KafkaError._PARTITION_EOF)))
            self.positions[(topic, partition)] = position
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1001))
                for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        log = self.logs[(tp.topic, tp.partition)]
        return log.low, log.high

    def close(self) -> None:
        self.closed = True


@dataclass
class Offsets:
    offset: int


class OffsetsAdmin:
    """Answers ListOffsets from the logs: the earliest spec with the first offset, the latest with the high
    watermark (what a read_uncommitted reader is shown)."""

    def __init__(self, logs: Changelogs) -> None:
        self.logs = logs
        self.requests: list[list[tuple[str, int]]] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        pass

    def list_offsets(self, request: dict[TopicPartition, Any], **_: Any) -> dict[TopicPartition, Future[Offsets]]:
        self.requests.append(sorted((tp.topic, tp.partition) for tp in request))
        futures: dict[TopicPartition, Future[Offsets]] = {}
        for tp, spec in request.items():
            log = self.logs[(tp.topic, tp.partition)]
            future: Future[Offsets] = Future()
            future.set_result(Offsets(log.low if isinstance(spec, EARLIEST) else log.high))
            futures[tp] = future
        return futures
