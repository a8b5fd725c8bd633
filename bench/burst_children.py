"""The burst's reader and its transactional ceiling, each run in its own process, and the arrivals the reader
wrote (bench/burst.py)."""
from __future__ import annotations

import itertools
import os
import struct
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from queue import Empty
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from burst_common import PAYLOAD, PRIORITY, TOPOLOGY, TXN_RECORDS, Arrival
from children import detach
from scheduler.engine.config import PRODUCER_BATCHING, EngineConfig
from scheduler.timing.jitter import available_at
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.wire.codec import Codec
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF
from visibility import VisibleAt

# The header of each record the reader writes: seen_ms, kafka timestamp, topic index, partition, offset,
# value length.
_FRAME = struct.Struct(">qqHHqI")


def read_occurrences(bootstrap: str, topics: list[str], out_path: str, counter: Any, stop: Any) -> None:
    """Append every committed record with the wall time it was received; decoding waits until later. In
    its own process group, so a terminal's Ctrl-C reaches the bench alone, which stops it; it also stops by
    itself should the bench die without doing so."""
    parent = detach()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-reader-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 20, "log_level": 3})
    metadata = consumer.list_topics(timeout=30).topics
    index = {name: i for i, name in enumerate(topics)}
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in metadata[t].partitions])
    pack = _FRAME.pack
    with open(out_path, "wb") as out:
        while not stop.is_set() and os.getppid() == parent:
            messages = consumer.consume(20_000, timeout=0.05)
            seen = time.time_ns() // 1_000_000
            chunks = []
            for msg in messages:
                if msg.error() is not None:
                    continue
                value = msg.value()
                chunks.append(pack(seen, msg.timestamp()[1], index[msg.topic()], msg.partition(), msg.offset(),
                                   len(value)))
                chunks.append(value)
            if chunks:
                out.write(b"".join(chunks))
                with counter.get_lock():
                    counter.value += len(chunks) // 2
    consumer.close()


def produce_ceiling(bootstrap: str, prefix: str, plan: list[tuple[str, int]], due_ms: int, window_ms: int,
                    interleaved: bool, result: Any) -> None:
    """The same number of same-size occurrence records, produced transactionally as fast as possible.

    Producer settings are those of `SchedulerProcess` (scheduler/engine/runtime.py); records are encoded
    before the clock starts, since the engine also encodes them ahead of time (at materialization).
    In tenant order a transaction touches few partitions; `interleaved` takes the tenants in turn, as
    the engine's fair dispatch does, so each transaction touches every tenant's partitions."""
    detach()
    codec = Codec.default()
    scheduled_for = datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc)
    per_tenant: list[list[tuple[str, bytes, bytes]]] = []
    n = 0
    for tenant, count in plan:
        records: list[tuple[str, bytes, bytes]] = []
        per_tenant.append(records)
        topic = TOPOLOGY.topic_name("occurrences", prefix, tenant=tenant, priority=PRIORITY.lower())
        for _ in range(count):
            sid = f"ceil-{n:07d}"
            oid = occurrence_id(sid, 1, scheduled_for)
            avail = available_at(oid, scheduled_for, timedelta(milliseconds=window_ms))
            body = codec.encode("Occurrence", {
                "occurrence_id": oid, "schedule_id": sid, "tenant": tenant, "schedule_version": 1,
                "scheduled_for_ms": due_ms, "available_at_ms": int(avail.timestamp() * 1000),
                "priority": PRIORITY, "payload": PAYLOAD, "attempt": 1, "dst_rule": None, "catch_up": False})
            records.append((topic, sid.encode(), body))
            n += 1
    records = ([r for turn in itertools.zip_longest(*per_tenant) for r in turn if r is not None] if interleaved
               else [r for tenant_records in per_tenant for r in tenant_records])
    producer = Producer({
        "bootstrap.servers": bootstrap, **PRODUCER_PARTITIONER_CONF,
        "transactional.id": f"{prefix}.ceiling.{uuid.uuid4().hex[:8]}",
        "transaction.timeout.ms": EngineConfig.transaction_timeout_ms, **PRODUCER_BATCHING, "log_level": 3,
    })
    producer.init_transactions(30)
    produce = producer.produce
    started = time.perf_counter()
    commits = []
    redone = 0
    first = 0
    while first < len(records):
        producer.begin_transaction()
        for topic, key, value in records[first:first + TXN_RECORDS]:
            produce(topic, value, key)
        producer.poll(0)
        producer.flush(60)
        try:
            producer.commit_transaction()
        except KafkaException as exc:
            # Seen right after the engine's burst: a record stuck until the transaction timed out. The
            # batch is redone and counted, and the time it cost stays in the measurement.
            if not exc.args[0].txn_requires_abort() or redone == 3:
                raise
            producer.abort_transaction()
            redone += 1
            continue
        commits.append(time.perf_counter() - started)
        first += TXN_RECORDS
    producer.flush(10)
    result.put({"records": len(records), "seconds": time.perf_counter() - started, "commits": commits,
                "redone": redone, "value_bytes": sum(len(r[2]) for r in records) / max(1, len(records))})


def warm_transactions(bootstrap: str) -> None:
    """A fresh broker creates its transaction state topic (50 partitions) for the first transactional producer;
    on the loaded 2-core machine that can outlast the engine's 30 s `init_transactions`, so wait for it here."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-warm-{uuid.uuid4().hex[:8]}",
                         "log_level": 3})
    producer.init_transactions(180)


def wait_result(queue: Any, child: Any, what: str) -> Any:
    """The child's result, or an error as soon as it dies without one (a failed transaction, say)."""
    while True:
        try:
            return queue.get(timeout=1.0)
        except Empty:
            if not child.is_alive():
                raise RuntimeError(f"{what} exited ({child.exitcode}) without a result") from None


def decode_arrivals(path: Path, topics: list[str],
                    visible: VisibleAt | None = None) -> tuple[list[Arrival], Counter[str]]:
    codec = Codec.default()
    arrivals = []
    per_topic: Counter[str] = Counter()
    data = path.read_bytes()
    pos = 0
    size = _FRAME.size
    while pos < len(data):
        seen, ts, topic_index, partition, offset, length = _FRAME.unpack_from(data, pos)
        pos += size
        record = codec.decode("Occurrence", data[pos:pos + length])
        pos += length
        per_topic[topics[topic_index]] += 1
        at = visible.at(topic_index, partition, offset) if visible is not None else None
        arrivals.append(Arrival(record["occurrence_id"], record["tenant"], record["scheduled_for_ms"],
                                record["available_at_ms"], ts, seen, seen if at is None else min(at, seen),
                                at is not None))
    return arrivals, per_topic
