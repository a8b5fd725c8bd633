"""The audit ledger's parts for real: the Connect worker with our Converter and Debezium's JDBC sink,
PostgreSQL (tests/fixtures_audit.py). A real scheduler filling it: tests/integration/test_audit_acceptance.py."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from confluent_kafka import Consumer, Producer
from engine_harness import CODEC, TOPOLOGY, ensure_layout

from scheduler.audit.connectors import dead_letter_topic, delete_connectors
from scheduler.audit.tables import schema_name
from scheduler.connect.rest import ConnectRest
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF

TENANT = "acme"


def test_a_record_the_converter_cannot_decode_goes_to_the_dead_letter_topic_and_the_rest_flows(
        kafka_bootstrap, unique_prefix, audit_ledger):
    ensure_layout(kafka_bootstrap, unique_prefix)
    topic = TOPOLOGY.topic_name("occurrence-events", unique_prefix)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **PRODUCER_PARTITIONER_CONF})
    good = {"occurrence_id": None, "schedule_id": "s-1", "tenant": TENANT, "schedule_version": 1,
            "scheduled_for_ms": None, "kind": "MISSED", "reason": "test", "range_first_ms": 1, "range_last_ms": 2,
            "count": 2, "recorded_at_ms": 3}
    producer.produce(topic, key=b"s-1", value=b"\xc3\x01 definitely not avro")
    producer.produce(topic, key=b"s-1", value=b"plain garbage")
    producer.produce(topic, key=b"s-1", value=CODEC.encode("OccurrenceEvent", good))
    producer.flush(10)
    rows = audit_ledger.wait_for("SELECT schedule_id, kind, count, kafka_offset FROM {s}.occurrence_events",
                                 lambda rows: len(rows) == 1, 90)
    assert rows == [("s-1", "MISSED", 2, 2)]
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{unique_prefix}-dlq",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([dead_letter_topic(unique_prefix)])
    rejected: list[tuple[bytes, dict[str, bytes]]] = []
    deadline = time.monotonic() + 60
    try:
        while len(rejected) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                rejected.append((message.value(), dict(message.headers() or [])))
    finally:
        consumer.close()
    assert [value for value, _ in rejected] == [b"\xc3\x01 definitely not avro", b"plain garbage"]
    reasons = [headers["__connect.errors.exception.message"].decode() for _, headers in rejected]
    assert "unknown writer schema fingerprint" in reasons[0] and "single-object" in reasons[1]
    assert all(headers["__connect.errors.topic"].decode() == topic for _, headers in rejected)


def test_kill_9_of_the_connect_worker_mid_stream_loses_no_row_and_doubles_none(
        kafka_bootstrap, unique_prefix, audit_ledger, audit_connect):
    if audit_connect.local is None:
        pytest.skip("the session uses an external Connect worker (KAFKA_CONNECT_URL), which tests cannot kill")
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    topic = TOPOLOGY.topic_name("occurrences", unique_prefix, tenant=TENANT, priority="normal")
    total, produced = 4000, []

    def stream() -> None:
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, **PRODUCER_PARTITIONER_CONF})
        for n in range(total):
            record = {"occurrence_id": f"occ-{n:05d}", "schedule_id": f"s-{n % 50}", "tenant": TENANT,
                      "schedule_version": 1, "scheduled_for_ms": 1_700_000_000_000 + n, "available_at_ms": 0,
                      "priority": "NORMAL", "payload": bytes([n % 256, 0]), "attempt": 1, "dst_rule": None,
                      "catch_up": False}
            producer.produce(topic, key=record["schedule_id"].encode(), value=CODEC.encode("Occurrence", record))
            produced.append(record["occurrence_id"])
            if n % 100 == 99:
                producer.flush(10)
                time.sleep(0.1)  # ~1,000/s for 4 s: the kill lands mid-stream
        producer.flush(10)

    writer = threading.Thread(target=stream)
    writer.start()
    audit_ledger.wait_for("SELECT count(*) FROM {s}.dispatches", lambda rows: rows[0][0] >= 300, 60)
    audit_connect.local.kill()
    mid = audit_ledger.query("SELECT count(*) FROM {s}.dispatches")[0][0]
    writer.join(60)
    assert 0 < mid < total, f"the kill did not land mid-stream ({mid} of {total} rows)"
    audit_connect.local.start()
    rows = audit_ledger.wait_for(
        "SELECT count(*), count(DISTINCT occurrence_id), count(DISTINCT (kafka_partition, kafka_offset)) FROM {s}.dispatches",
        lambda rows: rows[0][0] >= total, 180)
    assert rows == [(total, total, total)]
    payload = audit_ledger.query("SELECT payload FROM {s}.dispatches WHERE occurrence_id = 'occ-00258'")
    assert payload == [(hashlib.sha256(bytes([258 % 256, 0])).digest(),)]  # `audit ensure --payload` default: hash


def _audit(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scheduler", "audit", *arguments], env=env, capture_output=True,
                          text=True, timeout=180)


def test_audit_ensure_creates_once_then_reports_and_repairs_drift(
        kafka_bootstrap, unique_prefix, audit_connect, audit_postgres):
    ensure_layout(kafka_bootstrap, unique_prefix)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "SCHEDULER_TOPIC_PREFIX": unique_prefix,
           "KAFKA_CONNECT_URL": audit_connect.url, "AUDIT_DATABASE_URL": audit_postgres}
    rest = ConnectRest(audit_connect.url)
    try:
        first = _audit(env, "ensure")
        assert first.returncode == 0, first.stderr
        assert first.stdout.count("created  table") == 6 and first.stdout.count("created  connector") == 6
        schema = schema_name(unique_prefix)
        for table in ("dispatches", "attempts"):
            assert f"created  partitions {schema}.{table}: 10 created, 0 ok" in first.stdout, first.stdout
        assert "created  payload hash (dispatches.payload keeps the sha256 of each payload)" in first.stdout
        again = _audit(env, "ensure", "--check")
        assert again.returncode == 0, again.stdout + again.stderr
        assert again.stdout.count("ok       table") == 6 and again.stdout.count("ok       connector") == 6
        assert f"ok       partitions {schema}.attempts: 0 created, 9 ok" in again.stdout
        assert "ok       payload hash" in again.stdout
        name = f"{unique_prefix}.audit.attempts"
        rest.put_config(name, {**rest.config(name), "batch.size": "7"})
        checked = _audit(env, "ensure", "--check")
        assert checked.returncode == 1
        assert f"DRIFTED  connector {name} (batch.size)" in checked.stdout
        assert rest.config(name)["batch.size"] == "7"
        repaired = _audit(env, "ensure")
        assert repaired.returncode == 0 and f"updated  connector {name} (batch.size)" in repaired.stdout
        assert "batch.size" not in rest.config(name)
        with psycopg.connect(audit_postgres) as conn:
            conn.execute(f"ALTER TABLE {schema_name(unique_prefix)}.attempts DROP COLUMN worker_id")
        differs = _audit(env, "ensure", "--wait", "0")
        assert differs.returncode == 1
        assert f"DIFFERS  table {schema_name(unique_prefix)}.attempts: worker_id missing (want text)" in differs.stdout
        no_db = _audit({**env, "AUDIT_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/postgres"}, "ensure")
        assert no_db.returncode == 6 and "scheduler audit ensure:" in no_db.stderr  # unreachable: docs/cli.md
    finally:
        delete_connectors(rest, unique_prefix)
        with psycopg.connect(audit_postgres) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema_name(unique_prefix)} CASCADE")


def test_connect_cli_status_of_the_session_worker_and_an_external_url_starts_nothing(audit_connect, tmp_path):
    if audit_connect.local is None:
        pytest.skip("the session uses an external Connect worker (KAFKA_CONNECT_URL)")
    env = {key: value for key, value in os.environ.items() if key != "KAFKA_CONNECT_URL"}

    def connect(*arguments: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "scheduler", "connect", *arguments], env={**env, **extra},
                              capture_output=True, text=True, timeout=60)

    running = connect("status", "--data-dir", str(audit_connect.local.data_dir))
    assert running.returncode == 0
    assert f"running pid={audit_connect.local.pid()} url={audit_connect.url}" in running.stdout
    assert connect("status", "--data-dir", str(tmp_path / "none")).returncode == 3
    external = connect("start", "--data-dir", str(tmp_path / "none"), KAFKA_CONNECT_URL="http://connect.example:8083")
    assert external.returncode == 0 and external.stdout.strip() == "http://connect.example:8083"
    assert "no local worker started" in external.stderr and not (tmp_path / "none").exists()
