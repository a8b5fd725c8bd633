"""The console's ledger reader on a real PostgreSQL, on the audit ledger's own tables (`ensure_tables`)."""
from __future__ import annotations

import json

import pytest

from scheduler.audit.history import Ledger, schema_name
from scheduler.audit.tables import ensure_tables

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.integration

PREFIX = "Console-T1"


def test_versions_and_occurrences_come_from_the_ledger_per_tenant(postgres_dsn):
    s = schema_name(PREFIX)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        ensure_tables(conn, PREFIX)
        versions = (f"INSERT INTO {s}.schedule_versions (schedule_id, kafka_partition, kafka_offset, kafka_timestamp, "
                    "tenant, version, state, spec, fired_count, next_fire_ms, updated_at_ms) "
                    "VALUES (%s, 0, %s, now(), %s, %s, %s, %s, %s, NULL, %s)")
        for version, state in ((1, "ACTIVE"), (2, "PAUSED")):
            conn.execute(versions, ("daily", version, "acme", version, state,
                                    json.dumps({"kind": "CRON", "expression": "0 9 * * *"}), 4, version * 1000))
        conn.execute(versions, ("g-daily", 9, "globex", 1, "ACTIVE", "{}", 0, 1))
        base = 1_767_225_600_000  # 2026-01-01T00:00:00Z
        rows = [("o1", base + 60_000, base + 60_000, "2026-01-01 00:01:00.250+00", 0), ("o1", base + 60_000, base + 60_000, "2026-01-01 00:01:05+00", 1),
                ("o2", base + 120_000, base + 125_000, "2026-01-01 00:02:05.100+00", 2)]
        for oid, due, available, enqueued, offset in rows:
            conn.execute(f"INSERT INTO {s}.dispatches (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, "
                         "occurrence_id, schedule_id, tenant, scheduled_for_ms, available_at_ms, attempt) "
                         "VALUES ('sched.occurrences.acme.normal', 0, %s, %s, %s, 'daily', 'acme', %s, %s, 1)",
                         (offset, enqueued, oid, due, available))
        due_of = {"o1": base + 60_000, "o2": base + 120_000}
        for offset, (oid, attempt, kind, at) in enumerate([("o1", 1, "STARTED", 61_000), ("o1", 1, "FAILED", 62_000),
                                                           ("o1", 2, "STARTED", 66_000), ("o1", 2, "FAILED", 67_000),
                                                           ("o2", 1, "STARTED", 126_000), ("o2", 1, "SUCCEEDED", 127_000)]):
            conn.execute(f"INSERT INTO {s}.attempts (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, "
                         "occurrence_id, schedule_id, tenant, scheduled_for_ms, attempt, kind, at_ms) "
                         "VALUES ('sched.attempts', 0, %s, now(), %s, 'daily', 'acme', %s, %s, %s, %s)",
                         (offset, oid, due_of[oid], attempt, kind, at))
        conn.execute(f"INSERT INTO {s}.dead_letters (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, "
                     "occurrence) VALUES ('sched.dead-letters.acme', 0, 0, now(), %s)", (json.dumps({"occurrence_id": "o1"}),))

    ledger = Ledger(postgres_dsn, PREFIX)
    versions = ledger.versions("acme", "daily")
    assert [(v["version"], v["state"]) for v in versions] == [(2, "PAUSED"), (1, "ACTIVE")]
    assert ledger.versions("globex", "daily") == [] and len(ledger.versions("globex", "g-daily")) == 1
    occurrences = {o["occurrence_id"]: o for o in ledger.occurrences("acme", "daily")}
    assert list(occurrences) == ["o2", "o1"]  # newest first
    assert occurrences["o1"]["status"] == "DEAD" and occurrences["o1"]["attempts"] == 2
    assert occurrences["o1"]["dispatches"] == 2 and occurrences["o1"]["lag_ms"] == 250
    assert occurrences["o2"]["status"] == "SUCCEEDED" and occurrences["o2"]["lag_ms"] == 100  # from available_at
    assert ledger.occurrences("globex", "daily") == []
    assert [o["occurrence_id"] for o in ledger.occurrences("acme", "daily", since_ms=base + 120_000)] == ["o2"]
    assert [o["occurrence_id"] for o in ledger.occurrences("acme", "daily", limit=1)] == ["o2"]


def test_an_unset_ledger_is_none(monkeypatch):
    monkeypatch.delenv("AUDIT_DATABASE_URL", raising=False)
    assert Ledger.from_env("sched") is None
    monkeypatch.setenv("AUDIT_DATABASE_URL", "host=/nowhere")
    assert Ledger.from_env("sched").schema == "sched"
