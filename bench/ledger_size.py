"""The audit ledger's bytes per occurrence, per payload mode: `python bench/ledger_size.py [--count 200000]`.

For each of `audit ensure --payload full|hash|none` a fresh schema (`ensure_tables`, so the real DDL,
partitions and trigger) gets N occurrences by COPY: one dispatches row (a ~200-byte JSON payload) and two
attempts rows (STARTED, SUCCEEDED) each, shaped as the sink writes them, all scheduled in today's UTC day.
After VACUUM ANALYZE, pg_total_relation_size (heap, TOAST, indexes, free space and visibility maps) of every
partition of both tables, divided by N, is the figure; multiplied by the seed day's 200 million occurrences
it is a day of ledger. Starts its own PostgreSQL (Debian's binaries, LocalPostgres) and removes it; writes
`bench/results/ledger-size-<N>.md`. Not included: occurrence_events (only what was not sent), WAL.
"""
from __future__ import annotations

import argparse
import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from scheduler.audit.partitions import PARTITIONED, day_of
from scheduler.audit.postgres import LocalPostgres
from scheduler.audit.tables import PAYLOAD_MODES, ensure_tables, schema_name
from scheduler.timing.occurrence_id import occurrence_ids

SEED_PER_DAY = 200_000_000
SCHEDULES = 10_000
RESULTS = Path(__file__).parent / "results"
TOPIC = "sched.occurrences.acme-corp.normal"


def payload(n: int) -> bytes:
    """~200 bytes of JSON, the size of a job's arguments in the seed's examples."""
    return json.dumps({"job": "invoice-reminder", "tenant": "acme-corp", "customer_id": f"cust-{n:012d}",
                       "template": "reminder-v3", "channel": "email", "locale": "en-GB",
                       "args": {"days_overdue": n % 90, "amount_cents": 1000 + n % 50_000, "currency": "EUR"}}, separators=(",", ":")).encode()


def load(conn: psycopg.Connection, schema: str, count: int, day_start_ms: int) -> None:
    ids = [(f"sch-{uuid.UUID(int=s).hex[:20]}", occurrence_ids(f"sch-{uuid.UUID(int=s).hex[:20]}", 1))
           for s in range(SCHEDULES)]
    stamp = datetime.now(UTC)
    with conn.cursor() as cursor:
        with cursor.copy(f"COPY {schema}.dispatches (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, "
                         "occurrence_id, schedule_id, tenant, schedule_version, scheduled_for_ms, available_at_ms, "
                         "priority, payload, attempt, dst_rule, catch_up, lease_ms) FROM STDIN") as copy:
            for n in range(count):
                sid, of = ids[n % SCHEDULES]
                at = day_start_ms + n * 400 % 86_400_000
                copy.write_row((TOPIC, n % 8, n // 8, stamp, of(at), sid, "acme-corp", 1, at, at, "NORMAL",
                                payload(n), 1, None, False, 30_000))
        with cursor.copy(f"COPY {schema}.attempts (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, "
                         "occurrence_id, schedule_id, tenant, schedule_version, scheduled_for_ms, attempt, "
                         "attempt_token, kind, retryable, error_class, error_message, worker_id, at_ms, progress) "
                         "FROM STDIN") as copy:
            for n in range(count):
                sid, of = ids[n % SCHEDULES]
                at = day_start_ms + n * 400 % 86_400_000
                token = uuid.UUID(int=n).hex
                for step, kind in enumerate(("STARTED", "SUCCEEDED")):
                    copy.write_row(("sched.attempts", n % 8, 2 * (n // 8) + step, stamp, of(at), sid, "acme-corp", 1,
                                    at, 1, token, kind, None, None, None, f"worker-{n % 16:02d}", at + 50 + step * 900,
                                    None))
    conn.commit()


def sizes(conn: psycopg.Connection, schema: str) -> dict[str, int]:
    """Bytes of every partition of each partitioned table (the parents themselves hold no rows)."""
    out = {}
    for table in PARTITIONED:
        row = conn.execute("SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
                           "WHERE inhparent = %s::regclass", (f"{schema}.{table}",)).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200_000, help="occurrences per payload mode (default 200000)")
    args = parser.parse_args()
    server = LocalPostgres()
    rows = []
    try:
        url = server.start()
        now_ms = int(time.time() * 1000)
        with psycopg.connect(url) as conn:
            for mode in PAYLOAD_MODES:
                prefix = f"size_{mode}"
                ensure_tables(conn, prefix, now_ms=now_ms, payload=mode)
                began = time.monotonic()
                load(conn, schema_name(prefix), args.count, day_of(now_ms).start_ms)
                loaded_s = time.monotonic() - began
                conn.autocommit = True
                conn.execute(f"VACUUM ANALYZE {schema_name(prefix)}.dispatches, {schema_name(prefix)}.attempts")
                conn.autocommit = False
                found = sizes(conn, schema_name(prefix))
                total = sum(found.values())
                rows.append((mode, found["dispatches"] / args.count, found["attempts"] / args.count,
                             total / args.count, total / args.count * SEED_PER_DAY / 1e9, loaded_s))
                print(f"{mode}: {total / args.count:.0f} bytes/occurrence, loaded in {loaded_s:.1f}s", flush=True)
    finally:
        server.destroy()
    report = [f"# Ledger bytes per occurrence, {args.count:,} occurrences per payload mode",
              "", f"`python bench/ledger_size.py --count {args.count}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
              "PostgreSQL from Debian's binaries (LocalPostgres), one dispatches row (~200-byte JSON payload) and "
              "two attempts rows per occurrence, COPY-loaded then VACUUM ANALYZE; pg_total_relation_size of every "
              "partition (heap, TOAST, indexes, FSM, VM).", "",
              "| payload mode | dispatches B/occ | attempts B/occ | total B/occ | seed day (200 M) GB | load s |",
              "|---|---|---|---|---|---|"]
    report += [f"| {mode} | {d:.0f} | {a:.0f} | {t:.0f} | {gb:.0f} | {s:.1f} |" for mode, d, a, t, gb, s in rows]
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"ledger-size-{args.count}.md"
    out.write_text("\n".join(report) + "\n")
    print("\n".join(report))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
