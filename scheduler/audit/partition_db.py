"""The occurrence tables' daily partitions in PostgreSQL: creating the days ahead (`audit ensure`,
`audit retain`), dropping whole days past retention and recording them (`audit retain`), and telling
the reconciler which ranges were dropped. The rules themselves are in `partitions` (pure).

A table created by an older version is a plain table: it is reported as unpartitioned and left as it
is (docs/operations.md says how to migrate it); nothing here alters it."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from scheduler.audit.partitions import (
    DROP,
    PARTITION_COLUMN,
    PARTITIONED,
    DayRange,
    Decision,
    decide,
    planned_days,
)

RETENTION_TABLE = "ledger_retention"
_BOUND = re.compile(r"FROM \('?(-?\d+|MINVALUE)'?\) TO \('?(-?\d+|MAXVALUE)'?\)")
_LOWEST, _HIGHEST = -(2**63), 2**63 - 1


@dataclass
class PartitionsReport:
    """Per partitioned table: the daily partitions created and found, and the tables still unpartitioned."""

    created: dict[str, list[str]] = field(default_factory=dict)
    ok: dict[str, list[str]] = field(default_factory=dict)
    unpartitioned: list[str] = field(default_factory=list)


def is_partitioned(conn: Any, schema: str, table: str) -> bool:
    row = conn.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", (f"{schema}.{table}",)).fetchone()
    return bool(row and row[0] == "p")


def partitions(conn: Any, schema: str, table: str) -> dict[str, DayRange | None]:
    """Each partition of `table` by name, with its bounds (None for DEFAULT)."""
    rows = conn.execute(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass(%s)", (f"{schema}.{table}",)).fetchall()
    return {name: _bounds(expression) for name, expression in rows}


def _bounds(expression: str) -> DayRange | None:
    if expression == "DEFAULT":
        return None
    match = _BOUND.search(expression)
    if match is None:
        raise ValueError(f"not a range partition bound: {expression}")
    low, high = match.groups()
    return DayRange(_LOWEST if low == "MINVALUE" else int(low), _HIGHEST if high == "MAXVALUE" else int(high))


def dropped_days(conn: Any, schema: str, table: str) -> set[int]:
    """start_ms of every day retain dropped from `table` (none before the metadata table exists)."""
    if not _exists(conn, schema, RETENTION_TABLE):
        return set()
    rows = conn.execute(sql.SQL("SELECT range_start_ms FROM {} WHERE table_name = %s").format(
        sql.Identifier(schema, RETENTION_TABLE)), (table,)).fetchall()
    return {row[0] for row in rows}


def ensure_partitions(conn: Any, schema: str, now_ms: int, keep_ms: int | None = None) -> PartitionsReport:
    """The DEFAULT partition and the planned days of every partitioned table; the caller commits."""
    report = PartitionsReport()
    for table in PARTITIONED:
        qualified = f"{schema}.{table}"
        if not is_partitioned(conn, schema, table):
            report.unpartitioned.append(qualified)
            continue
        found = partitions(conn, schema, table)
        created, ok = report.created.setdefault(qualified, []), report.ok.setdefault(qualified, [])
        default = next((name for name, bounds in found.items() if bounds is None), None)
        if default is None:
            default = f"{table}_default"
            conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} DEFAULT").format(
                sql.Identifier(schema, default), sql.Identifier(schema, table)))
            created.append(default)
        for day in planned_days(now_ms, dropped_days(conn, schema, table), keep_ms):
            name = f"{table}_{day.suffix}"
            if day in found.values():
                ok.append(name)
            else:
                _create_day(conn, schema, table, default, day)
                created.append(name)
    return report


def _create_day(conn: Any, schema: str, table: str, default: str, day: DayRange) -> None:
    """One day's partition. Should DEFAULT already hold rows of that day (no ensure ran for a week), they
    are moved into the new partition first: PostgreSQL refuses a partition whose rows DEFAULT holds."""
    parent, part, other = (sql.Identifier(schema, name) for name in (table, f"{table}_{day.suffix}", default))
    bounds = {"start": day.start_ms, "end": day.end_ms}
    # DDL takes no bind parameters: the bounds are integers, passed as literals.
    range_sql = sql.SQL("FROM ({}) TO ({})").format(sql.Literal(day.start_ms), sql.Literal(day.end_ms))
    in_day = sql.SQL("{} >= %(start)s AND {} < %(end)s").format(sql.Identifier(PARTITION_COLUMN),
                                                                sql.Identifier(PARTITION_COLUMN))
    waiting = conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {})").format(other, in_day),
                           bounds).fetchone()[0]
    if not waiting:
        conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES {}").format(part, parent, range_sql))
        return
    # EXCLUSIVE: the sink's inserts into DEFAULT wait, so none lands in the day between the move and ATTACH.
    conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(other))
    conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS)").format(part, parent))
    conn.execute(sql.SQL("WITH moved AS (DELETE FROM {} WHERE {} RETURNING *) INSERT INTO {} SELECT * FROM moved")
                 .format(other, in_day, part), bounds)
    conn.execute(sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES {}").format(parent, part, range_sql))


@dataclass(frozen=True)
class TableDecision:
    table: str
    decision: Decision


def retain(conn: Any, schema: str, now_ms: int, keep_ms: int, dry_run: bool) -> tuple[list[TableDecision],
                                                                                      PartitionsReport]:
    """Drop (unless `dry_run`) every daily partition past `keep_ms`, recording its range in the same
    transaction as the drop, then create the days ahead; returns every partition's decision."""
    decisions = []
    for table in PARTITIONED:
        if not is_partitioned(conn, schema, table):
            continue
        for decision in decide(partitions(conn, schema, table), now_ms, keep_ms):
            decisions.append(TableDecision(table, decision))
            if decision.action == DROP and not dry_run and decision.bounds is not None:
                _drop(conn, schema, table, decision.partition, decision.bounds)
    if dry_run:
        conn.rollback()
        return decisions, PartitionsReport()
    report = ensure_partitions(conn, schema, now_ms, keep_ms)
    conn.commit()
    return decisions, report


def _drop(conn: Any, schema: str, table: str, partition: str, bounds: DayRange) -> None:
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, partition)))
    conn.execute(sql.SQL("INSERT INTO {} (table_name, range_start_ms, range_end_ms) VALUES (%s, %s, %s) "
                         "ON CONFLICT (table_name, range_start_ms) DO UPDATE SET dropped_at = now()").format(
        sql.Identifier(schema, RETENTION_TABLE)), (table, bounds.start_ms, bounds.end_ms))
    conn.commit()


def dropped_overlapping(conn: Any, schema: str, from_ms: int, to_ms: int) -> list[tuple[str, int, int]]:
    """(table, start_ms, end_ms) of every dropped range overlapping [from_ms, to_ms): history retain deleted."""
    if not _exists(conn, schema, RETENTION_TABLE):
        return []
    return [(row[0], row[1], row[2]) for row in conn.execute(sql.SQL(
        "SELECT table_name, range_start_ms, range_end_ms FROM {} WHERE range_start_ms < %s AND range_end_ms > %s "
        "ORDER BY range_start_ms, table_name").format(sql.Identifier(schema, RETENTION_TABLE)),
        (to_ms, from_ms)).fetchall()]


def _exists(conn: Any, schema: str, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.{table}",)).fetchone()
    return bool(row and row[0])
