"""Benchmark: `scheduler reconcile` over one million occurrences in a real PostgreSQL ledger.

Run:  .venv/bin/python bench/reconcile.py [--occurrences 1000000] [--schedules 1000] [--rounds 3]
      [--database-url URL]   (default: $AUDIT_DATABASE_URL, else a throw-away local server)

Synthetic ledger, shaped as the sink writes it (scheduler/audit/ledger.sql): `--schedules` rate
schedules `every 1s` of one tenant over one window; one schedule in ten was UPDATEd half-way (two
versions, the second on a 2 s period); at least `--occurrences` expected in all. Every expected occurrence has
one dispatch row (plus 0.1 % duplicate deliveries) and a STARTED and a SUCCEEDED attempt row; one in a
thousand also a MISSED event instead. Rows are loaded with COPY, then ANALYZEd.

Timed, `--rounds` times (plus one cold CLI round first), medians of wall and CPU time reported:
* the CLI end to end: `scheduler reconcile --tenant bench --from A --to B --json` as a child process
  (interpreter start, imports, reading every row over a local Unix socket, recomputing the expected
  set with the time core, classifying, rendering the JSON to /dev/null);
* in process, the same phases apart: reading (LedgerReader.read), the expected set
  (expected_occurrences: fires + occurrence ids + jitter), and classification (reconcile() minus it).
Not included: loading the rows, PostgreSQL's cold cache on the first round (reported, not in the
median), network latency to a remote database.
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg

from scheduler.audit.expected import expected_occurrences
from scheduler.audit.ledger_reader import LedgerReader
from scheduler.audit.reconcile import reconcile
from scheduler.audit.tables import ensure_tables, schema_name
from scheduler.control.client import make_spec
from scheduler.timing.instants import to_datetime
from scheduler.timing.occurrence_id import occurrence_id

REPO = Path(__file__).resolve().parents[1]
PREFIX = "benchreconcile"
TENANT = "bench"
T0 = 1_777_852_800_000  # 2026-05-04T00:00:00Z
S = 1000


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _spec_json(period: int) -> str:
    import json
    spec = make_spec("rate", f"every {period}s", anchor_at_ms=T0)
    return json.dumps({**spec, "payload": ""})


def load(conn: psycopg.Connection, occurrences: int, schedules: int) -> tuple[int, int, int, dict[str, int]]:
    """Writes the synthetic ledger; returns (from_ms, to_ms, expected occurrences, rows per table)."""
    schema = schema_name(PREFIX)
    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    ensure_tables(conn, PREFIX)
    per = math.ceil(occurrences * 40 / (39 * schedules))  # the updated tenth fires 3/4 as often
    to_ms = T0 + per * S
    topic = f"{PREFIX}.occurrences.{TENANT}.normal"
    offset = expected = 0
    written = {"dispatches": 0, "attempts": 0, "occurrence_events": 0}
    with conn.cursor() as cur:
        with cur.copy(f'COPY "{schema}".schedule_versions (schedule_id, tenant, version, state, spec, '
                      "fired_count, pending, created_at_ms, updated_at_ms) FROM STDIN") as copy:
            for n in range(schedules):
                sid = f"s{n:05d}"
                copy.write_row((sid, TENANT, 1, "ACTIVE", _spec_json(1), per, "[]", T0 - 1, T0 - 1))
                if n % 10 == 0:
                    copy.write_row((sid, TENANT, 2, "ACTIVE", _spec_json(2), per, "[]", T0 - 1, T0 + per * S // 2))
        with cur.copy(f'COPY "{schema}".command_results (kafka_topic, kafka_partition, kafka_offset, schedule_id, '
                      "tenant, command_type, status, version, next_fires_ms, processed_at_ms) FROM STDIN") as copy:
            for n in range(schedules):
                sid = f"s{n:05d}"
                copy.write_row((f"{PREFIX}.command-results", 0, 2 * n, sid, TENANT, "CREATE", "ACCEPTED", 1, "[]",
                                T0 - 1))
                if n % 10 == 0:
                    copy.write_row((f"{PREFIX}.command-results", 0, 2 * n + 1, sid, TENANT, "UPDATE", "ACCEPTED", 2,
                                    "[]", T0 + per * S // 2))
        dispatch_sql = (f'COPY "{schema}".dispatches (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, '
                        "occurrence_id, schedule_id, tenant, schedule_version, scheduled_for_ms, available_at_ms, "
                        "priority, attempt, catch_up) FROM STDIN")
        attempt_sql = (f'COPY "{schema}".attempts (kafka_topic, kafka_partition, kafka_offset, occurrence_id, '
                       "schedule_id, tenant, schedule_version, scheduled_for_ms, attempt, kind, at_ms) FROM STDIN")
        event_sql = (f'COPY "{schema}".occurrence_events (kafka_topic, kafka_partition, kafka_offset, '
                     "occurrence_id, schedule_id, tenant, schedule_version, scheduled_for_ms, kind, reason, count, "
                     "recorded_at_ms) FROM STDIN")
        fires: list[tuple[str, str, int, int]] = []
        for n in range(schedules):
            sid = f"s{n:05d}"
            updated = T0 + per * S // 2 if n % 10 == 0 else None
            at = T0
            while at < to_ms:
                version = 1 if updated is None or at <= updated else 2
                fires.append((occurrence_id(sid, version, to_datetime(at)), sid, version, at))
                at += S if version == 1 else 2 * S
                if version == 1 and updated is not None and at > updated:
                    at = updated + 2 * S - (updated - T0) % (2 * S)
        with cur.copy(dispatch_sql) as copy:
            for i, (oid, sid, version, at) in enumerate(fires):
                if i % 1000 == 999:
                    continue  # MISSED instead, below
                for _ in range(2 if i % 1000 == 500 else 1):
                    copy.write_row((topic, i % 8, offset, to_datetime(at + 3 + i % 17), oid, sid, TENANT, version,
                                    at, at, "NORMAL", 1, False))
                    offset += 1
                    written["dispatches"] += 1
        with cur.copy(attempt_sql) as copy:
            for i, (oid, sid, version, at) in enumerate(fires):
                if i % 1000 != 999:
                    for kind, lag in (("STARTED", 10), ("SUCCEEDED", 20)):
                        copy.write_row((f"{PREFIX}.attempts", i % 8, 2 * i + (kind == "SUCCEEDED"), oid, sid, TENANT,
                                        version, at, 1, kind, at + lag))
                        written["attempts"] += 1
        with cur.copy(event_sql) as copy:
            for i, (oid, sid, version, at) in enumerate(fires):
                if i % 1000 == 999:
                    copy.write_row((f"{PREFIX}.occurrence-events", 0, i, oid, sid, TENANT, version, at, "MISSED",
                                    "bench", 1, at + 400_000))
                    written["occurrence_events"] += 1
        expected = len(fires)
    conn.commit()
    for table in ("schedule_versions", "command_results", "dispatches", "attempts", "occurrence_events"):
        conn.execute(f'ANALYZE "{schema}".{table}')
    conn.commit()
    return T0, to_ms, expected, written


def _cli(url: str, from_ms: int, to_ms: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system; PostgreSQL's own CPU is not in it)."""
    env = {**os.environ, "AUDIT_DATABASE_URL": url, "SCHEDULER_TOPIC_PREFIX": PREFIX}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "scheduler", "reconcile", "--tenant", TENANT, "--from",
                           _iso(from_ms), "--to", _iso(to_ms), "--json"], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"reconcile exited {done.returncode}: {done.stderr}")
    return elapsed, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def _phases(url: str, from_ms: int, to_ms: int, expected: int) -> list[tuple[float, float]]:
    """(wall, CPU of this process) for reading, the expected set, and classification."""
    clocks = (time.perf_counter, time.process_time)
    with psycopg.connect(url) as conn:
        began = [c() for c in clocks]
        ledger = LedgerReader(conn, PREFIX).read(TENANT, from_ms, to_ms)
        read = [c() - b for c, b in zip(clocks, began, strict=True)]
    began = [c() for c in clocks]
    items, _, _ = expected_occurrences(ledger.versions, ledger.results, from_ms, to_ms)
    building = [c() - b for c, b in zip(clocks, began, strict=True)]
    began = [c() for c in clocks]
    report = reconcile(ledger, from_ms, to_ms)
    whole = [c() - b for c, b in zip(clocks, began, strict=True)]
    assert len(items) == expected == len(report.occurrences) and report.ok, report.counts()
    return [tuple(read), tuple(building), (whole[0] - building[0], whole[1] - building[1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--occurrences", type=int, default=1_000_000)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=os.environ.get("AUDIT_DATABASE_URL"))
    args = parser.parse_args()
    server = None
    url = args.database_url
    if url is None:
        from scheduler.audit.postgres import LocalPostgres

        server = LocalPostgres()
        url = server.start()
    try:
        with psycopg.connect(url) as conn:
            began = time.perf_counter()
            from_ms, to_ms, expected, written = load(conn, args.occurrences, args.schedules)
            load_s = time.perf_counter() - began
        print(f"loaded {expected:,} expected occurrences in {load_s:.1f} s", file=sys.stderr)
        cli = [_cli(url, from_ms, to_ms) for _ in range(args.rounds + 1 if args.rounds > 1 else 1)]
        phases = [_phases(url, from_ms, to_ms, expected) for _ in range(args.rounds)]
    finally:
        if server is not None:
            server.destroy()
    med = statistics.median
    warm = cli[1:] or cli
    rows = [("CLI end to end (child process, --json)", med(w for w, _ in warm), med(c for _, c in warm)),
            *((name, med(p[i][0] for p in phases), med(p[i][1] for p in phases)) for i, name in enumerate((
                "  reading the ledger (LedgerReader.read)", "  expected set (expected_occurrences)",
                "  classification (reconcile minus the expected set)")))]
    rows_text = ", ".join(f"{table} {n:,}" for table, n in written.items())
    lines = [f"# reconcile: {expected:,} expected occurrences", "",
             f"{expected:,} expected occurrences, {args.schedules} schedules; rows: {rows_text}; "
             f"medians of {args.rounds} rounds (first CLI round, cold: {cli[0][0]:.1f} s); load average "
             f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end: wall time is inflated by other "
             "work on the machine, CPU time much less so", "",
             "| phase | wall s | CPU s | CPU s per million occurrences |", "|---|---|---|---|"]
    lines += [f"| {name} | {wall:.1f} | {cpu:.1f} | {cpu * 1_000_000 / expected:.1f} |" for name, wall, cpu in rows]
    report = REPO / "bench" / "results" / f"reconcile-{args.occurrences}.md"
    report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines) + f"\n\n(written to {report.relative_to(REPO)})")


if __name__ == "__main__":
    main()
