"""`scheduler reconcile` against a real PostgreSQL: rows shaped as the sink writes them, from a real
scheduler run (updates, pause/resume, cancel, trigger, max_fires, a misfire, dead letters, kill -9)
and by hand for the exit codes. Removing one delivered occurrence from the ledger must fail it."""
from __future__ import annotations

import json
import math
import time
import uuid

import psycopg
import pytest
from engine_harness import SchedulerProcess, ensure_layout, rfc3339
from ledger_sink import CODEC, insert, record_row, sink_topics
from reconcile_env import TENANT, reconcile, window
from worker_harness import WorkerProcess

from scheduler.audit.tables import ensure_tables, schema_name
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.timing.instants import to_datetime
from scheduler.timing.occurrence_id import occurrence_id

T0 = 1_777_852_800_000  # 2026-05-04T00:00:00Z
M = 60_000


def state(sid: str, version: int, status: str, spec: dict, fired: int, at_ms: int) -> dict:
    return {"schedule_id": sid, "tenant": TENANT, "version": version, "state": status, "spec": spec,
            "create_command_id": f"c-{sid}", "created_at_ms": T0, "updated_at_ms": at_ms, "fired_count": fired,
            "next_fire_ms": None, "pending": [], "running": []}


def result(sid: str, kind: str, version: int, at_ms: int) -> dict:
    return {"command_id": str(uuid.uuid4()), "schedule_id": sid, "tenant": TENANT, "command_type": kind,
            "status": "ACCEPTED", "version": version, "processed_at_ms": at_ms}


def dispatch(sid: str, version: int, at_ms: int) -> dict:
    oid = occurrence_id(sid, version, to_datetime(at_ms))
    return {"occurrence_id": oid, "schedule_id": sid, "tenant": TENANT, "schedule_version": version,
            "scheduled_for_ms": at_ms, "available_at_ms": at_ms, "priority": "NORMAL", "payload": b"\x00\xff"}


def write(conn: psycopg.Connection, schema: str, table: str, name: str, records: list[dict], topic: str) -> None:
    """Through the codec and back, so each row holds the whole record with its defaults, as the sink sees it."""
    decoded = [CODEC.decode(name, CODEC.encode(name, r)) for r in records]
    insert(conn, schema, table, [record_row(r, topic, 0, n, r.get("scheduled_for_ms", T0) + 7)
                                 for n, r in enumerate(decoded)])


@pytest.fixture
def ledger(audit_postgres):
    prefix = f"r{uuid.uuid4().hex[:8]}"
    with psycopg.connect(audit_postgres) as conn:
        ensure_tables(conn, prefix)
        yield conn, prefix, schema_name(prefix)


def test_exit_codes_and_the_json_document_on_sink_shaped_rows(audit_postgres, ledger):
    conn, prefix, schema = ledger
    every_10m = make_spec("cron", "*/10 * * * *")
    write(conn, schema, "schedule_versions", "ScheduleState",
          [state("s", 1, "ACTIVE", every_10m, 3, T0), state("s", 2, "CANCELED", every_10m, 3, T0 + 35 * M)],
          f"{prefix}.schedules")
    write(conn, schema, "command_results", "CommandResult",
          [result("s", "CREATE", 1, T0), result("s", "CANCEL", 2, T0 + 35 * M)], f"{prefix}.command-results")
    fires = [dispatch("s", 1, T0 + k * 10 * M) for k in (1, 2, 3)]
    write(conn, schema, "dispatches", "Occurrence", fires + fires[:1], f"{prefix}.occurrences.{TENANT}.normal")
    steps = [(fires[0], 1, "STARTED"), (fires[0], 1, "FAILED"), (fires[0], 2, "SUCCEEDED"), (fires[2], 1, "STARTED"),
             (fires[2], 1, "HEARTBEAT"), (fires[2], 1, "FAILED")]
    write(conn, schema, "attempts", "AttemptEvent", [
        {**{k: o[k] for k in ("occurrence_id", "schedule_id", "tenant", "schedule_version", "scheduled_for_ms")},
         "attempt": attempt, "attempt_token": f"tok-{n}", "kind": kind, "at_ms": o["scheduled_for_ms"] + n}
        for n, (o, attempt, kind) in enumerate(steps)], f"{prefix}.attempts")

    done = reconcile(audit_postgres, prefix, *window(T0, T0 + 60 * M), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["expected"] == 3, doc  # the steps, aggregated by PostgreSQL:
    assert {k: v for k, v in doc["classifications"].items() if v} == {"SUCCEEDED": 1, "FAILED": 1, "ENQUEUED": 1}
    assert doc["deliveries"]["duplicates"] == [{"occurrence_id": fires[0]["occurrence_id"], "attempt": 1,
                                                "deliveries": 2}]
    assert doc["lag_ms"][TENANT] == {"count": 4, "p50": 7, "p99": 7, "max": 7}
    assert [v["state"] for v in doc["schedules"]["s"]["versions"]] == ["ACTIVE", "CANCELED"]

    conn.execute(f'DELETE FROM "{schema}".dispatches WHERE occurrence_id = %s', (fires[1]["occurrence_id"],))
    write(conn, schema, "dispatches", "Occurrence", [dispatch("s", 2, T0 + 40 * M)],
          f"{prefix}.occurrences.{TENANT}.high")
    conn.commit()
    failed = reconcile(audit_postgres, prefix, *window(T0, T0 + 60 * M))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"ABSENT {fires[1]['occurrence_id']}" in failed.stdout
    assert f"UNEXPECTED {occurrence_id('s', 2, to_datetime(T0 + 40 * M))}" in failed.stdout
    only = reconcile(audit_postgres, prefix, *window(T0, T0 + 60 * M), "--schedule", "s", "--json")
    assert only.returncode == 1 and [a["occurrence_id"] for a in json.loads(only.stdout)["absent"]] == [
        fires[1]["occurrence_id"]]

    bad = {
        "instant": reconcile(audit_postgres, prefix, "--tenant", TENANT, "--from", "monday", "--to", rfc3339(T0)),
        "order": reconcile(audit_postgres, prefix, *window(T0, T0)),
        "tenant": reconcile(audit_postgres, prefix, *window(T0, T0 + M)[2:], "--tenant", "nobody"),
        "schedule": reconcile(audit_postgres, prefix, *window(T0, T0 + M), "--schedule", "nope"),
        "no tables": reconcile(audit_postgres, "elsewhere", *window(T0, T0 + M)),
        "unset": reconcile(None, prefix, *window(T0, T0 + M)),
        "unreachable": reconcile("postgresql://postgres@127.0.0.1:1/postgres", prefix, *window(T0, T0 + M)),
    }
    codes = {"tenant": 3, "schedule": 3, "unreachable": 6}  # not found, unreachable: docs/cli.md; else usage
    for case, run in bad.items():
        assert run.returncode == codes.get(case, 2) and run.stderr.startswith("error: ") and not run.stdout, (case, run)
    assert "cannot reach the audit database" in bad["unreachable"].stderr


def every(period_s: int, **fields) -> dict:
    return make_spec("rate", f"every {period_s}s", anchor_at_ms=math.floor(time.time()) * 1000, **fields)


def test_a_real_run_with_manual_commands_retries_and_resume_reconciles_and_ledger_losses_are_named(
        kafka_bootstrap, unique_prefix, tmp_path, audit_postgres):
    """What the acceptance run (test_audit_acceptance.py) does not drive: TRIGGER, BACKFILL, RERUN,
    RESUME, max_fires, flexible windows and retries, sunk by the stand-in; then one lost dispatch
    (ABSENT) and one lost version row (its dispatches UNEXPECTED)."""
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    start_ms = int(time.time() * 1000) - 2000
    scheduler = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a", ("--horizon", "5")).start()
    worker = WorkerProcess(kafka_bootstrap, unique_prefix, TENANT, "worker_handlers:by_payload",
                           tmp_path / "worker").start()
    client = SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=90)
    try:
        client.create(TENANT, every(1, flexible_window_ms=800), schedule_id="flex")
        client.create(TENANT, every(1, max_fires=4), schedule_id="limited")
        client.create(TENANT, every(1), schedule_id="resumed")
        client.create(TENANT, every(2, payload=b"retryable", max_attempts=2, retry_backoff_ms=200),
                      schedule_id="retry")
        hourly = every(3600)
        client.create(TENANT, hourly, schedule_id="manual")
        time.sleep(2)
        client.pause(TENANT, "resumed")
        client.trigger_now(TENANT, "manual")
        client.backfill(TENANT, "manual", hourly["anchor_at_ms"], int(time.time() * 1000))
        time.sleep(3)
        client.resume(TENANT, "resumed")
        client.trigger_now(TENANT, "manual")
        time.sleep(4)
        to_ms = int(time.time() * 1000) - 3000
        time.sleep(4)  # everything due before to_ms is dispatched (on time), retried or recorded by now
        with psycopg.connect(audit_postgres) as conn:
            schema = schema_name(unique_prefix)
            ensure_tables(conn, unique_prefix)
            counts = sink_topics(kafka_bootstrap, unique_prefix, [TENANT], conn, schema)
            assert counts["dispatches"] and counts["attempts"] and counts["dead_letters"], counts
            done = reconcile(audit_postgres, unique_prefix, *window(start_ms, to_ms), "--json", "--all")
            assert done.returncode == 0, done.stdout[-6000:] + done.stderr + scheduler.log_tail()
            doc = json.loads(done.stdout)
            seen = doc["classifications"]
            assert seen["SUCCEEDED"] and seen["DEAD"] and seen["SKIPPED_PAUSED"], seen
            occurrences = doc["occurrences"]
            origins = {o["origin"] for o in occurrences if o["schedule_id"] == "manual"}
            assert origins == {"TRIGGER", "BACKFILL"}, occurrences
            assert len([o for o in occurrences if o["schedule_id"] == "limited"]) == 4
            retried = [o for o in occurrences if o["schedule_id"] == "retry" and o["classification"] == "DEAD"]
            assert retried and all(o["deliveries"] == 2 and o["failed_attempts"] == 2 for o in retried), retried
            resumed = {o["schedule_version"] for o in occurrences if o["schedule_id"] == "resumed"}
            assert resumed == {1, 3}, occurrences  # v1 up to and during the pause (its dropped pending), v3 after
            flexible = [o for o in occurrences if o["schedule_id"] == "flex"]
            assert any(o["available_at_ms"] != o["scheduled_for_ms"] for o in flexible), flexible

            victim = next(o for o in occurrences if o["origin"] == "TRIGGER")
            conn.execute(f'DELETE FROM "{schema}".dispatches WHERE occurrence_id = %s', (victim["occurrence_id"],))
            conn.execute(f"DELETE FROM \"{schema}\".schedule_versions WHERE schedule_id = 'resumed' AND version = 3")
            conn.commit()
            failed = reconcile(audit_postgres, unique_prefix, *window(start_ms, to_ms))
            assert failed.returncode == 1, failed.stdout + failed.stderr
            lines = failed.stdout.splitlines()
            assert [line.split()[1] for line in lines if line.startswith("ABSENT ")] == [victim["occurrence_id"]]
            unexpected = {line.split()[1] for line in lines if line.startswith("UNEXPECTED ")}
            lost = {o["occurrence_id"] for o in occurrences if o["schedule_id"] == "resumed"
                    and o["schedule_version"] == 3 and o["deliveries"]}
            assert lost and unexpected == lost, failed.stdout
    finally:
        client.close()
        worker.stop_quietly()
        if scheduler.alive():
            scheduler.terminate()
