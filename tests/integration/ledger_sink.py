"""Writes ledger rows exactly as the JDBC sink does (the LEDGER contract), from records read off the topics.

The real sink is the Kafka Connect worker (issue 14, items 1-4); the reconcile tests use this stand-in
so they check reconciliation against real engine output without depending on Connect.
"""
from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition
from psycopg import sql

from scheduler.wire.codec import Codec
from scheduler.wire.topology import Topology

TOPOLOGY = Topology.load()
CODEC = Codec.default()
TABLE_OF = {"ScheduleState": "schedule_versions", "CommandResult": "command_results", "Occurrence": "dispatches",
            "OccurrenceEvent": "occurrence_events", "AttemptEvent": "attempts", "DeadLetter": "dead_letters"}
GENERATED = {"dead_letters": {"occurrence_id"}}


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def record_row(record: dict[str, Any], topic: str, partition: int, offset: int, timestamp_ms: int) -> dict[str, Any]:
    """Kafka coordinates plus every top-level field; nested records and arrays as JSON text."""
    row: dict[str, Any] = {"kafka_topic": topic, "kafka_partition": partition, "kafka_offset": offset,
                           "kafka_timestamp": datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc)}
    for name, value in record.items():
        row[name] = json.dumps(_jsonable(value)) if isinstance(value, (dict, list)) else value
    return row


def insert(conn: psycopg.Connection, schema: str, table: str, rows: list[dict[str, Any]]) -> None:
    """Idempotent like the sink: a redelivered record changes nothing; versions upsert on their key."""
    if not rows:
        return
    columns = [c for c in rows[0] if c not in GENERATED.get(table, ())]
    if table == "schedule_versions":
        conflict = sql.SQL("ON CONFLICT (schedule_id, version) DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in columns))
    else:
        conflict = sql.SQL("ON CONFLICT DO NOTHING")
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) {}").format(
        sql.Identifier(schema, table), sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)), conflict)
    with conn.cursor() as cursor:
        cursor.executemany(statement, [[row[c] for c in columns] for row in rows])
    conn.commit()


def audited_topics(prefix: str, tenants: list[str]) -> dict[str, str]:
    """topic -> record name, for every topic the ledger sinks."""
    topics = {TOPOLOGY.topic_name("schedules", prefix): "ScheduleState",
              TOPOLOGY.topic_name("command-results", prefix): "CommandResult",
              TOPOLOGY.topic_name("occurrence-events", prefix): "OccurrenceEvent",
              TOPOLOGY.topic_name("attempts", prefix): "AttemptEvent"}
    for tenant in tenants:
        topics[TOPOLOGY.topic_name("dead-letters", prefix, tenant=tenant)] = "DeadLetter"
        for priority in TOPOLOGY.priorities:
            topics[TOPOLOGY.topic_name("occurrences", prefix, tenant=tenant, priority=priority)] = "Occurrence"
    return topics


def sink_topics(bootstrap: str, prefix: str, tenants: list[str], conn: psycopg.Connection, schema: str,
                idle_s: float = 3.0, timeout_s: float = 120.0) -> dict[str, int]:
    """Reads every audited topic from the start (read_committed) past its end as of now, and writes the
    rows; returns rows per table."""
    topics = audited_topics(prefix, tenants)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"sink-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    metadata = consumer.list_topics(timeout=10).topics
    partitions = [TopicPartition(t, p, 0) for t in topics if t in metadata for p in metadata[t].partitions]
    ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions}
    consumer.assign(partitions)
    rows: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLE_OF.values()}
    deadline = time.monotonic() + timeout_s
    behind_seen = None if any(ends.values()) else 0.0
    # Done when nothing written before the start has come for a while: positions never reach the end
    # offsets, which end with transaction markers a consumer does not see.
    while behind_seen is None or time.monotonic() - behind_seen < idle_s:
        assert time.monotonic() < deadline, "the audited topics were not read to their end in time"
        for msg in consumer.consume(5000, timeout=0.5):
            if msg.error():
                continue
            if msg.offset() < ends[(msg.topic(), msg.partition())]:
                behind_seen = time.monotonic()
            if msg.value() is None:  # tombstones are dropped
                continue
            name = topics[msg.topic()]
            record = CODEC.decode(name, msg.value())
            rows[TABLE_OF[name]].append(record_row(record, msg.topic(), msg.partition(), msg.offset(),
                                                   msg.timestamp()[1]))
    consumer.close()
    for table, found in rows.items():
        insert(conn, schema, table, found)
    return {table: len(found) for table, found in rows.items()}
