"""The ledger's daily partitions, retention and payload modes on a real PostgreSQL (tests/fixtures_audit.py):
rows written as the sink writes them (INSERT ... ON CONFLICT on the connector's key), `scheduler audit retain`
and `scheduler reconcile` run as an operator would."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from engine_harness import REPO
from reconcile_env import TENANT, reconcile, window

from scheduler.audit.partitions import DAY_MS, day_of
from scheduler.audit.postgres import LocalPostgres, default_data_dir
from scheduler.audit.tables import PARTITIONED_KEY, ensure_tables, schema_name

NOW = int(time.time() * 1000)
TODAY = day_of(NOW).start_ms
PAYLOAD = b'{"job":"nightly-report","tenant":"acme","args":[1,2,3]}'


@pytest.fixture
def ledger(audit_postgres: str) -> Iterator[tuple[psycopg.Connection, str, str]]:
    prefix = f"p{uuid.uuid4().hex[:8]}"
    with psycopg.connect(audit_postgres) as conn:
        yield conn, prefix, schema_name(prefix)
        conn.rollback()
        conn.execute(f"DROP SCHEMA IF EXISTS {schema_name(prefix)} CASCADE")
        conn.commit()


def upsert_dispatch(conn: psycopg.Connection, schema: str, offset: int, at_ms: int, payload: bytes | None = PAYLOAD,
                    key: tuple[str, ...] = PARTITIONED_KEY) -> None:
    """What the Debezium sink sends for one record (insert.mode=upsert on primary.key.fields)."""
    conn.execute(f"INSERT INTO {schema}.dispatches (kafka_topic, kafka_partition, kafka_offset, occurrence_id, "
                 "schedule_id, tenant, schedule_version, scheduled_for_ms, available_at_ms, payload) "
                 "VALUES ('t', 0, %s, %s, 's', %s, 1, %s, %s, %s) "
                 f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET payload = EXCLUDED.payload",
                 (offset, f"occ-{offset}", TENANT, at_ms, at_ms, payload))
    conn.commit()


def add_attempt(conn: psycopg.Connection, schema: str, offset: int, at_ms: int) -> None:
    conn.execute(f"INSERT INTO {schema}.attempts (kafka_topic, kafka_partition, kafka_offset, occurrence_id, tenant, "
                 "scheduled_for_ms, attempt, kind, at_ms) VALUES ('a', 0, %s, %s, %s, %s, 1, 'SUCCEEDED', %s)",
                 (offset, f"occ-{offset}", TENANT, at_ms, at_ms))
    conn.commit()


def poll(read: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 10.0) -> Any:
    """`read()` until `done` holds, failing with the last value at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout:.0f}s still {value!r}")
        time.sleep(0.2)


def audit(url: str | None, prefix: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SCHEDULER_TOPIC_PREFIX": prefix, "XDG_STATE_HOME": str(REPO / ".no-such-state")}
    env.pop("AUDIT_DATABASE_URL", None)
    if url is not None:
        env["AUDIT_DATABASE_URL"] = url
    return subprocess.run([sys.executable, "-m", "scheduler", "audit", *arguments], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def partition_of(conn: psycopg.Connection, schema: str, table: str) -> dict[int, str]:
    rows = conn.execute(f"SELECT kafka_offset, tableoid::regclass::text FROM {schema}.{table}").fetchall()
    return {offset: name.rsplit(".", 1)[1] for offset, name in rows}


def test_ensure_partitions_by_utc_day_and_far_instants_land_in_default(ledger) -> None:
    conn, prefix, schema = ledger
    report = ensure_tables(conn, prefix, now_ms=NOW)
    created = report.partitions.created[f"{schema}.dispatches"]
    assert len(created) == 10 and f"dispatches_{day_of(TODAY - DAY_MS).suffix}" in created
    assert report.partitions.unpartitioned == []
    assert ensure_tables(conn, prefix, now_ms=NOW).partitions.created == {f"{schema}.dispatches": [],
                                                                          f"{schema}.attempts": []}
    instants = {1: TODAY - DAY_MS, 2: TODAY + DAY_MS - 1, 3: TODAY + DAY_MS, 4: TODAY + 8 * DAY_MS - 1,
                5: TODAY + 8 * DAY_MS, 6: 1_700_000_000_000}
    for offset, at_ms in instants.items():
        upsert_dispatch(conn, schema, offset, at_ms)
        add_attempt(conn, schema, offset, at_ms)
    upsert_dispatch(conn, schema, 1, instants[1])  # a redelivery rewrites its row
    expected = {offset: f"dispatches_{day_of(at_ms).suffix}" for offset, at_ms in instants.items()}
    expected[5] = expected[6] = "dispatches_default"  # past the week ahead, and long ago
    assert partition_of(conn, schema, "dispatches") == expected
    assert partition_of(conn, schema, "attempts") == {k: v.replace("dispatches", "attempts") for k, v in expected.items()}
    # A later ensure makes the day after the week; the row DEFAULT held for it moves into its partition.
    ensure_tables(conn, prefix, now_ms=NOW + DAY_MS)
    assert partition_of(conn, schema, "dispatches")[5] == f"dispatches_{day_of(instants[5]).suffix}"
    assert conn.execute(f"SELECT count(*) FROM {schema}.dispatches").fetchone()[0] == 6


def create_unpartitioned_dispatches(conn: psycopg.Connection, schema: str) -> None:
    """dispatches as ledger.sql created it before the partitions."""
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"CREATE TABLE {schema}.dispatches (kafka_topic text NOT NULL, kafka_partition integer NOT NULL, "
                 "kafka_offset bigint NOT NULL, kafka_timestamp timestamptz, occurrence_id text NOT NULL, "
                 "schedule_id text NOT NULL, tenant text NOT NULL, schedule_version bigint, scheduled_for_ms bigint, "
                 "available_at_ms bigint, priority text, payload bytea, attempt integer, dst_rule text, "
                 "catch_up boolean, lease_ms bigint, PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset))")
    conn.commit()


def test_an_older_unpartitioned_ledger_is_reported_and_keeps_working(ledger) -> None:
    conn, prefix, schema = ledger
    create_unpartitioned_dispatches(conn, schema)
    report = ensure_tables(conn, prefix, now_ms=NOW, payload="full")
    assert report.partitions.unpartitioned == [f"{schema}.dispatches"]
    assert f"{schema}.dispatches" in report.ok and f"{schema}.attempts" in report.created
    relkind = conn.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", (f"{schema}.dispatches",))
    assert relkind.fetchone()[0] == "r"
    upsert_dispatch(conn, schema, 1, NOW, key=("kafka_topic", "kafka_partition", "kafka_offset"))
    upsert_dispatch(conn, schema, 1, NOW, key=("kafka_topic", "kafka_partition", "kafka_offset"))
    assert conn.execute(f"SELECT payload FROM {schema}.dispatches").fetchall() == [(PAYLOAD,)]
    retained = audit(conn.info.dsn, prefix, "retain", "--keep", "7d")
    assert retained.returncode == 0, retained.stderr
    assert f"UNPARTITIONED table {schema}.dispatches" in retained.stdout
    assert "Partitioning an older ledger" in retained.stdout


def test_the_documented_migration_partitions_an_older_ledger_and_keeps_its_rows(ledger, audit_postgres) -> None:
    """The SQL of docs/operations.md, "Partitioning an older ledger", as written there (schema renamed)."""
    conn, prefix, schema = ledger
    create_unpartitioned_dispatches(conn, schema)
    ensure_tables(conn, prefix, now_ms=NOW, payload="full")
    old = TODAY - 20 * DAY_MS
    for offset, at_ms in enumerate((old, old + 1, TODAY - 3 * DAY_MS, NOW)):
        upsert_dispatch(conn, schema, offset, at_ms, key=("kafka_topic", "kafka_partition", "kafka_offset"))
    ensure_tables(conn, prefix, now_ms=NOW, payload="hash")
    section = (REPO / "docs" / "operations.md").read_text().split("### Partitioning an older ledger")[1]
    rename, copy = [block.replace("sched.", f"{schema}.") for block in re.findall(r"```sql\n(.*?)```", section, re.S)]
    with psycopg.connect(audit_postgres, autocommit=True) as admin:
        admin.execute(rename)
    report = ensure_tables(conn, prefix, now_ms=NOW)
    assert report.partitions.unpartitioned == []
    with psycopg.connect(audit_postgres, autocommit=True) as admin:
        admin.execute(copy)
    rows = partition_of(conn, schema, "dispatches")
    assert rows == {0: f"dispatches_{day_of(old).suffix}", 1: f"dispatches_{day_of(old).suffix}",
                    2: f"dispatches_{day_of(TODAY - 3 * DAY_MS).suffix}", 3: f"dispatches_{day_of(NOW).suffix}"}
    payloads = conn.execute(f"SELECT DISTINCT payload FROM {schema}.dispatches").fetchall()
    assert payloads == [(PAYLOAD,)]  # copied as they were, not hashed again
    upsert_dispatch(conn, schema, 9, NOW)  # the sink's new key works, the trigger hashes new rows
    assert conn.execute(f"SELECT payload FROM {schema}.dispatches WHERE kafka_offset = 9").fetchone()[0] == \
        hashlib.sha256(PAYLOAD).digest()
    conn.commit()
    retained = audit(conn.info.dsn, prefix, "retain", "--keep", "7d")
    assert retained.returncode == 0 and retained.stdout.count("dropped ") == 1, retained.stdout + retained.stderr
    assert sorted(partition_of(conn, schema, "dispatches")) == [2, 3, 9]


@pytest.mark.parametrize("mode, stored", [("full", PAYLOAD), ("hash", hashlib.sha256(PAYLOAD).digest()),
                                          ("none", None)])
def test_the_payload_mode_decides_what_dispatches_keep(ledger, mode: str, stored: bytes | None) -> None:
    conn, prefix, schema = ledger
    ensure_tables(conn, prefix, now_ms=NOW, payload=mode)
    upsert_dispatch(conn, schema, 1, NOW)
    upsert_dispatch(conn, schema, 1, NOW)  # a redelivery: EXCLUDED already passed the trigger, hashed once
    upsert_dispatch(conn, schema, 2, NOW, payload=None)
    rows = conn.execute(f"SELECT kafka_offset, payload FROM {schema}.dispatches ORDER BY 1").fetchall()
    assert rows == [(1, stored), (2, None)]
    again = ensure_tables(conn, prefix, now_ms=NOW)  # no --payload: the mode stays
    assert (again.payload, again.payload_action) == (mode, "ok")


def test_a_new_ledger_hashes_by_default_and_a_mode_change_is_data(ledger) -> None:
    conn, prefix, schema = ledger
    first = ensure_tables(conn, prefix, now_ms=NOW)
    assert (first.payload, first.payload_action) == ("hash", "created")
    upsert_dispatch(conn, schema, 1, NOW)
    changed = ensure_tables(conn, prefix, now_ms=NOW, payload="full")
    assert (changed.payload, changed.payload_action) == ("full", "updated")
    upsert_dispatch(conn, schema, 2, NOW)
    rows = conn.execute(f"SELECT kafka_offset, payload FROM {schema}.dispatches ORDER BY 1").fetchall()
    assert rows == [(1, hashlib.sha256(PAYLOAD).digest()), (2, PAYLOAD)]


def test_retain_drops_whole_old_days_records_them_and_reconcile_refuses_them(ledger, audit_postgres) -> None:
    conn, prefix, schema = ledger
    ensure_tables(conn, prefix, now_ms=NOW - 12 * DAY_MS)  # days -13 .. -5
    ensure_tables(conn, prefix, now_ms=NOW)  # days -1 .. +7
    old, edge, kept = TODAY - 12 * DAY_MS, TODAY - 8 * DAY_MS, TODAY - 6 * DAY_MS
    for offset, at_ms in enumerate((old, old + 5, edge + DAY_MS - 1, kept, NOW, TODAY + 30 * DAY_MS)):
        upsert_dispatch(conn, schema, offset, at_ms)
        add_attempt(conn, schema, offset, at_ms)
    conn.execute(f"INSERT INTO {schema}.schedule_versions (schedule_id, tenant, version, state, spec) "
                 "VALUES ('s', %s, 1, 'ACTIVE', '{}')", (TENANT,))
    conn.commit()

    def count() -> int:
        found = conn.execute(f"SELECT (SELECT count(*) FROM {schema}.dispatches) + "
                             f"(SELECT count(*) FROM {schema}.attempts)").fetchone()[0]
        conn.commit()  # an open transaction's locks would hold up retain's DROP (until its lock_timeout)
        return found

    assert count() == 12
    dry = audit(conn.info.dsn, prefix, "retain", "--keep", "7d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"DROP     partition {schema}.dispatches_{day_of(old).suffix}" in dry.stdout
    assert conn.execute(f"SELECT count(*) FROM {schema}.ledger_retention").fetchone()[0] == 0 and count() == 12

    done = audit(conn.info.dsn, prefix, "retain", "--keep", "7d")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    dropped = sorted(line.split()[2] for line in lines if line.startswith("dropped "))
    # days -13 .. -8 end at or before now - 7d; day -7 ends after it
    assert dropped == sorted(f"{schema}.{table}_{day_of(TODAY - n * DAY_MS).suffix}"
                             for table in ("dispatches", "attempts") for n in range(8, 14))
    assert f"kept     partition {schema}.dispatches_{day_of(TODAY - 7 * DAY_MS).suffix}" in done.stdout
    assert f"kept     partition {schema}.dispatches_default DEFAULT" in done.stdout
    poll(count, lambda n: n == 6)  # the two old rows and the one at the edge, in both tables
    left = {offset for offset, in conn.execute(f"SELECT kafka_offset FROM {schema}.dispatches")}
    assert left == {3, 4, 5}
    recorded = conn.execute(f"SELECT table_name, range_start_ms, range_end_ms FROM {schema}.ledger_retention "
                            "ORDER BY 1, 2").fetchall()
    assert recorded[0] == ("attempts", TODAY - 13 * DAY_MS, TODAY - 12 * DAY_MS) and len(recorded) == 12
    assert audit(conn.info.dsn, prefix, "retain", "--keep", "7d").stdout.count("dropped ") == 0

    refused = reconcile(audit_postgres, prefix, *window(old - DAY_MS, kept))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "dropped by `scheduler audit retain`" in refused.stderr
    assert f"dispatches {day_of(old).label()}" in refused.stderr
    assert f"reconcile from {TODAY - 7 * DAY_MS} on" in refused.stderr
    # A range from the first kept instant on is reconciled (nothing expected: the spec is a stand-in).
    allowed = reconcile(audit_postgres, prefix, *window(TODAY - 7 * DAY_MS, NOW))
    assert "dropped by" not in allowed.stderr


def test_retain_exit_codes(ledger) -> None:
    conn, prefix, schema = ledger
    if not LocalPostgres(default_data_dir()).is_running():  # root's local server is shared: it may run
        assert audit(None, prefix, "retain", "--keep", "7d").returncode == 2  # no database configured, none local
    unreachable = audit("postgresql://postgres@127.0.0.1:1/postgres", prefix, "retain", "--keep", "7d")
    assert unreachable.returncode == 6 and "cannot reach" in unreachable.stderr
    no_tables = audit(conn.info.dsn, prefix, "retain", "--keep", "7d")
    assert no_tables.returncode == 2 and "audit ensure" in no_tables.stderr
    assert audit(conn.info.dsn, prefix, "retain", "--keep", "seven days").returncode == 2
