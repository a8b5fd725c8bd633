"""Issue 14's acceptance run: a real scheduler (cron, fixed-rate and one-shot schedules with updates,
pauses, cancels and a kill -9 mid-run) and a real worker; the ledger filled by the real Connect
worker and Debezium's JDBC sink (tests/fixtures_audit.py) equals, row for row, the ledger the
contract describes (tests/integration/ledger_sink.py builds it straight from the topics), and
`scheduler reconcile` on it finds nothing ABSENT, until one delivered occurrence is deleted."""
from __future__ import annotations

import json
import math
import time

import psycopg
from engine_harness import SchedulerProcess, ensure_layout, rfc3339
from ledger_sink import sink_topics
from reconcile_env import TENANT, reconcile, window
from worker_harness import WorkerProcess

from scheduler.audit.tables import TABLES, ensure_tables, schema_name
from scheduler.control.client import SchedulerClient, make_spec

JSON_COLUMNS = {"spec", "pending", "running", "admission_waiters", "first_next_fires_ms", "next_fires_ms",
                "occurrence", "history"}


def every(period_s: int, **fields) -> dict:
    return make_spec("rate", f"every {period_s}s", anchor_at_ms=math.floor(time.time()) * 1000, **fields)


def rows(url: str, schema: str, table: str) -> list[tuple]:
    """Every row, JSON text parsed (the stand-in and the converter space JSON differently), in key order."""
    with psycopg.connect(url) as conn:
        cursor = conn.execute(f"SELECT * FROM {schema}.{table}")
        names = [column.name for column in cursor.description]
        found = [tuple(json.loads(value) if name in JSON_COLUMNS and value is not None else value
                       for name, value in zip(names, row, strict=True)) for row in cursor.fetchall()]
    return sorted(found, key=repr)


def test_the_real_ledger_reconciles_with_nothing_absent_and_a_deleted_dispatch_is_named(
        kafka_bootstrap, unique_prefix, audit_ledger, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    start_ms = int(time.time() * 1000)
    scheduler = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a", ("--horizon", "5")).start()
    worker = WorkerProcess(kafka_bootstrap, unique_prefix, TENANT, "worker_handlers:by_payload",
                           tmp_path / "worker").start()
    try:
        with SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=90) as client:
            client.create(TENANT, every(1), schedule_id="rate")
            client.create(TENANT, every(2, payload=b"permanent"), schedule_id="dead")
            client.create(TENANT, every(1, max_lateness_ms=1000, misfire_policy="SKIP"), schedule_id="skippy")
            client.create(TENANT, every(1), schedule_id="paused")
            client.create(TENANT, every(1), schedule_id="canceled")
            client.create(TENANT, make_spec("cron", "* * * * *"), schedule_id="cron")
            client.create(TENANT, make_spec("once", rfc3339(int(time.time() * 1000) + 4000)), schedule_id="once")
            time.sleep(3)
            client.update(TENANT, "rate", every(2))
            client.pause(TENANT, "paused")
            time.sleep(3)
            client.cancel(TENANT, "canceled")
            client.resume(TENANT, "paused")
            time.sleep(3)
            scheduler.kill()  # kill -9 mid-run: skippy's fires during the downtime are MISSED
            time.sleep(4)
            scheduler.start()
            deadline = time.time() + 62  # the cron schedule fires at least once
            while time.time() < deadline:
                time.sleep(5)
                assert scheduler.alive(), scheduler.log_tail()
            client.update(TENANT, "paused", every(3))
            time.sleep(3)
            to_ms = int(time.time() * 1000) - 3000
            time.sleep(3)  # everything due before to_ms is dispatched (on time) or recorded by now
    finally:
        worker.stop_quietly()
        scheduler.terminate()

    reference = f"{unique_prefix}ref"
    with psycopg.connect(audit_ledger.database_url) as conn:
        ensure_tables(conn, reference)
        expected = sink_topics(kafka_bootstrap, unique_prefix, [TENANT], conn, schema_name(reference))
    assert expected["dispatches"] and expected["attempts"] and expected["dead_letters"], expected
    try:
        for table in TABLES:
            wanted = rows(audit_ledger.database_url, schema_name(reference), table.name)
            count = len(wanted)
            audit_ledger.wait_for(f"SELECT count(*) FROM {{s}}.{table.name}",
                                  lambda found, n=count: found[0][0] >= n, 120)
            assert rows(audit_ledger.database_url, audit_ledger.schema, table.name) == wanted, table.name
    finally:
        with psycopg.connect(audit_ledger.database_url) as conn:
            conn.execute(f"DROP SCHEMA {schema_name(reference)} CASCADE")

    done = reconcile(audit_ledger.database_url, unique_prefix, *window(start_ms, to_ms), "--json", "--all")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr
    doc = json.loads(done.stdout)
    seen = doc["classifications"]
    assert not seen.get("ABSENT") and seen["SUCCEEDED"] and seen["DEAD"] and seen["MISSED"], seen
    assert seen["SKIPPED_PAUSED"], seen
    assert {o["schedule_id"] for o in doc["occurrences"]} >= {"rate", "dead", "cron", "once", "canceled"}

    victim = next(o for o in doc["occurrences"] if o["schedule_id"] == "cron" and o["deliveries"])
    audit_ledger.query("DELETE FROM {s}.dispatches WHERE occurrence_id = %s RETURNING occurrence_id",
                       (victim["occurrence_id"],))
    failed = reconcile(audit_ledger.database_url, unique_prefix, *window(start_ms, to_ms))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    absent = [line for line in failed.stdout.splitlines() if line.startswith("ABSENT ")]
    assert len(absent) == 1 and victim["occurrence_id"] in absent[0], failed.stdout
