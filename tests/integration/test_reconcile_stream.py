"""The streamed reconcile (classified in PostgreSQL, scheduler/audit/reconcile_sql.py) against the in-memory
one (scheduler/audit/reconcile.py, the rules' reference) on a ledger with every classification, read in
batches of a few rows so that every COPY, fetch and merge crosses many batch boundaries."""
from __future__ import annotations

import io
import json
import uuid

import psycopg
import pytest
from reconcile_env import TENANT, reconcile, window

from scheduler.audit.ledger_reader import LedgerReader
from scheduler.audit.reconcile import reconcile as reconcile_in_memory
from scheduler.audit.reconcile_buckets import TARGET_ROWS
from scheduler.audit.report_format import document
from scheduler.audit.stream_format import write_json
from scheduler.audit.streamed_report import reconcile_streamed
from scheduler.audit.tables import ensure_tables, schema_name
from scheduler.control.client import make_spec
from scheduler.timing.instants import to_datetime
from scheduler.timing.jitter import available_at_ms
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.wire.topology import Topology

T0 = 1_777_852_800_000  # 2026-05-04T00:00:00Z
M = 60_000
END = T0 + 30 * M
# a: 29 fires, one per classification and 20 succeeded; b: 5 + 4 succeeded around 5 paused; c: 3 missed as a
# range, 2 succeeded; d: one TRIGGER, succeeded.
FIXED = {"SUCCEEDED": 32, "DEAD": 1, "SKIPPED_STALE": 1, "RETRIED": 1, "FAILED": 1, "RUNNING": 1, "ENQUEUED": 1,
         "MISSED": 4, "SKIPPED_PAUSED": 5, "INVALIDATED": 0, "SKIPPED_OVERLAP": 0, "CANCELED": 1, "ABSENT": 1}


def spec_text(period_s: int, **fields) -> str:
    return json.dumps({**make_spec("rate", f"every {period_s}s", anchor_at_ms=T0, **fields), "payload": ""})


def oid(sid: str, version: int, at_ms: int) -> str:
    return occurrence_id(sid, version, to_datetime(at_ms))


class Rows:
    """Ledger rows as the sink writes them, Kafka offsets counted per table."""

    def __init__(self, conn: psycopg.Connection, schema: str, prefix: str) -> None:
        self.conn, self.schema, self.prefix, self.offset = conn, schema, prefix, 0

    def put(self, table: str, **values) -> None:
        if table != "schedule_versions":
            self.offset += 1
            values = {"kafka_topic": values.pop("topic", f"{self.prefix}.{table}"), "kafka_partition": 0,
                      "kafka_offset": self.offset, **values}
        columns = ", ".join(values)
        self.conn.execute(f'INSERT INTO "{self.schema}".{table} ({columns}) VALUES '
                          f'({", ".join(["%s"] * len(values))})', tuple(values.values()))

    def version(self, sid: str, version: int, state: str, spec: str, at_ms: int, command: str) -> None:
        self.put("schedule_versions", schedule_id=sid, tenant=TENANT, version=version, state=state, spec=spec,
                 fired_count=0, pending="[]", created_at_ms=T0, updated_at_ms=at_ms)
        self.put("command_results", schedule_id=sid, tenant=TENANT, command_type=command, status="ACCEPTED",
                 version=version, next_fires_ms="[]", processed_at_ms=at_ms)

    def sent(self, sid: str, version: int, at_ms: int, attempt: int = 1, occurrence: str | None = None,
             catch_up: bool = False, available_ms: int | None = None) -> str:
        found = occurrence or oid(sid, version, at_ms)
        self.put("dispatches", kafka_timestamp=to_datetime(at_ms + 5 + self.offset % 7), occurrence_id=found,
                 schedule_id=sid, tenant=TENANT, schedule_version=version, scheduled_for_ms=at_ms,
                 available_at_ms=available_ms if available_ms is not None else at_ms, priority="NORMAL",
                 attempt=attempt, catch_up=catch_up)
        return found

    def step(self, sid: str, version: int, at_ms: int, kind: str, attempt: int = 1, lag: int = 50) -> None:
        self.put("attempts", occurrence_id=oid(sid, version, at_ms), schedule_id=sid, tenant=TENANT,
                 schedule_version=version, scheduled_for_ms=at_ms, attempt=attempt, kind=kind, at_ms=at_ms + lag)

    def event(self, sid: str, version: int, kind: str, at_ms: int | None = None, recorded_ms: int = END,
              occurrence: str | None = None, first_ms: int | None = None, last_ms: int | None = None) -> None:
        self.put("occurrence_events", occurrence_id=occurrence, schedule_id=sid, tenant=TENANT,
                 schedule_version=version, scheduled_for_ms=at_ms, kind=kind, range_first_ms=first_ms,
                 range_last_ms=last_ms, count=1 if first_ms is None else 3, recorded_at_ms=recorded_ms)


def build(rows: Rows) -> str:
    """Every classification, an unexpected dispatch, a duplicate, an id off the recipe, a catch-up replay, a
    flexible window, a pause with its recorded ids, a summarised MISSED range and a TRIGGER; returns the id
    of the one ABSENT occurrence."""
    rows.version("a", 1, "ACTIVE", spec_text(60), T0, "CREATE")
    fires = [T0 + k * M for k in range(1, 30)]
    special = {fires[0]: "dead", fires[1]: "stale", fires[2]: "retried", fires[3]: "failed", fires[4]: "running",
               fires[5]: "enqueued", fires[6]: "missed", fires[7]: "absent", fires[8]: "canceled-after-dispatch",
               fires[9]: "duplicate", fires[10]: "catch-up"}
    for at in fires:
        what = special.get(at, "ok")
        if what in ("missed", "absent"):
            if what == "missed":
                rows.event("a", 1, "MISSED", at, occurrence=oid("a", 1, at))
            continue
        rows.sent("a", 1, at, catch_up=what == "catch-up")
        if what == "duplicate":
            rows.sent("a", 1, at)
        if what == "dead":
            rows.step("a", 1, at, "FAILED")
            rows.put("dead_letters", topic=Topology.load().topic_name("dead-letters", rows.prefix, tenant=TENANT),
                     occurrence=json.dumps({"occurrence_id": oid("a", 1, at), "schedule_id": "a",
                                            "scheduled_for_ms": {"long": at}}), dead_at_ms=at + 900)
        elif what == "stale":
            rows.step("a", 1, at, "SKIPPED_STALE")
        elif what == "retried":
            rows.step("a", 1, at, "FAILED")
            rows.sent("a", 1, at, attempt=2)
        elif what == "failed":
            rows.step("a", 1, at, "STARTED")
            rows.step("a", 1, at, "FAILED")
        elif what == "running":
            rows.step("a", 1, at, "HEARTBEAT")
        elif what == "canceled-after-dispatch":
            rows.event("a", 1, "CANCELED", at, occurrence=oid("a", 1, at))
        elif what != "enqueued":
            rows.step("a", 1, at, "STARTED", lag=10)
            rows.step("a", 1, at, "SUCCEEDED")
    rows.sent("a", 9, fires[12])  # no version 9: UNEXPECTED
    rows.sent("a", 1, fires[13] + 1, occurrence="f" * 32)  # an id off the recipe: UNEXPECTED and a mismatch

    # b: every 2 minutes, paused from 10m to 20m (v2), resumed as v3; the engine recorded the paused fires.
    rows.version("b", 1, "ACTIVE", spec_text(120, flexible_window_ms=20_000), T0, "CREATE")
    rows.version("b", 2, "PAUSED", spec_text(120, flexible_window_ms=20_000), T0 + 10 * M, "PAUSE")
    rows.version("b", 3, "ACTIVE", spec_text(120, flexible_window_ms=20_000), T0 + 20 * M + 1, "RESUME")
    for k in range(1, 15):
        at = T0 + k * 2 * M
        if 10 * M < at - T0 <= 20 * M:
            rows.event("b", 3, "SKIPPED_PAUSED", at, occurrence=oid("b", 3, at))
            continue
        version = 1 if at - T0 <= 10 * M else 3
        rows.sent("b", version, at, available_ms=available_at_ms(oid("b", version, at), at, 20_000))
        rows.step("b", version, at, "SUCCEEDED")
    # c: every 5 minutes; three fires missed as one summarised range, the rest succeeded.
    rows.version("c", 1, "ACTIVE", spec_text(300), T0, "CREATE")
    rows.event("c", 1, "MISSED", first_ms=T0 + 5 * M, last_ms=T0 + 15 * M)
    for k in range(4, 6):
        rows.sent("c", 1, T0 + k * 5 * M)
        rows.step("c", 1, T0 + k * 5 * M, "SUCCEEDED")
    # d: hourly, triggered once.
    rows.version("d", 1, "ACTIVE", spec_text(3600), T0, "CREATE")
    rows.put("command_results", schedule_id="d", tenant=TENANT, command_type="TRIGGER", status="ACCEPTED", version=1,
             next_fires_ms="[]", processed_at_ms=T0 + 7 * M + 3)
    rows.sent("d", 1, T0 + 7 * M + 3)
    rows.step("d", 1, T0 + 7 * M + 3, "SUCCEEDED")
    rows.conn.commit()
    return oid("a", 1, fires[7])


@pytest.fixture
def ledger(audit_postgres):
    prefix = f"rs{uuid.uuid4().hex[:8]}"
    with psycopg.connect(audit_postgres) as conn:
        ensure_tables(conn, prefix)
        absent = build(Rows(conn, schema_name(prefix), prefix))
        yield conn, prefix, absent


@pytest.mark.parametrize(("target_rows", "jobs"), [(TARGET_ROWS, 2), (7, 1), (7, 3)],
                         ids=["one bucket", "many buckets", "many buckets on three sessions"])
def test_a_streamed_reconcile_in_small_batches_matches_the_in_memory_one(ledger, target_rows, jobs):
    conn, prefix, absent = ledger
    reader = LedgerReader(conn, prefix)
    expected_doc = document(reconcile_in_memory(reader.read(TENANT, T0, END), T0, END), tenant=TENANT, schedule=None,
                            from_ms=T0, to_ms=END, schema=reader.schema, every_occurrence=True)
    conn.execute(f'ANALYZE "{schema_name(prefix)}".dispatches')  # buckets are sized from the planner's estimate
    out = io.StringIO()
    report = reconcile_streamed(reader, TENANT, T0, END, batch=3, target_rows=target_rows, jobs=jobs)
    assert report.expected > 3 * 10  # many batches
    assert report.bucket_count == 1 if target_rows == TARGET_ROWS else report.bucket_count > 3, report.bucket_count
    assert report.session_count == min(jobs, report.bucket_count)
    write_json(out, report, tenant=TENANT, schedule=None, from_ms=T0, to_ms=END, schema=reader.schema,
               every_occurrence=True)
    conn.rollback()
    streamed = json.loads(out.getvalue())
    assert streamed == expected_doc
    assert out.getvalue() == json.dumps(expected_doc, indent=1) + "\n"  # what the CLI printed before, byte for byte
    assert {k: v for k, v in streamed["classifications"].items() if k in FIXED} == FIXED
    assert [a["occurrence_id"] for a in streamed["absent"]] == [absent]
    assert len(streamed["unexpected"]) == 2 and streamed["deliveries"]["id_mismatches"] == ["f" * 32]
    assert streamed["deliveries"]["duplicates"][0]["deliveries"] == 2 and streamed["catch_up_lag_ms"]


def test_the_cli_streams_in_batches_and_a_deleted_dispatch_still_fails_naming_its_id(ledger, audit_postgres):
    conn, prefix, absent = ledger
    done = reconcile(audit_postgres, prefix, *window(T0, END), "--batch", "2", "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert {k: v for k, v in doc["classifications"].items() if k in FIXED} == FIXED
    lost = next(o for o in LedgerReader(conn, prefix).read(TENANT, T0, END).dispatches if o.schedule_id == "d")
    conn.execute(f'DELETE FROM "{schema_name(prefix)}".dispatches WHERE occurrence_id = %s', (lost.occurrence_id,))
    conn.commit()
    failed = reconcile(audit_postgres, prefix, *window(T0, END), "--batch", "2")
    assert failed.returncode == 1, failed.stderr
    named = [line.split()[1] for line in failed.stdout.splitlines() if line.startswith("ABSENT ")]
    assert named == [absent, lost.occurrence_id], failed.stdout
    assert failed.stdout.splitlines()[-1] == "FAILED: 2 absent, 2 unexpected"
    bad = reconcile(audit_postgres, prefix, *window(T0, END), "--batch", "0")
    assert bad.returncode == 2 and not bad.stdout
