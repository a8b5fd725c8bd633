"""The audit ledger's tables: where they live, what they hold, and creating them (ledger.sql).

The contract (column names and types, keys) is derived here from schemas/*.avsc, so the DDL in
ledger.sql is checked against the records rather than trusted to be retyped correctly."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from psycopg import sql

from scheduler.audit.partition_db import PartitionsReport, ensure_partitions
from scheduler.audit.partitions import PARTITION_COLUMN
from scheduler.wire.schemas import load_current, schema_dir

DATABASE_URL_ENV = "AUDIT_DATABASE_URL"
COMMON_COLUMNS = {"kafka_topic": "text", "kafka_partition": "integer", "kafka_offset": "bigint",
                  "kafka_timestamp": "timestamp with time zone"}
KAFKA_COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset")
PARTITIONED_KEY = (*KAFKA_COORDINATES, PARTITION_COLUMN)  # a partitioned table's key holds its partition column
PAYLOAD_MODES = ("full", "hash", "none")
DEFAULT_PAYLOAD = "hash"
_PRIMITIVE_COLUMNS = {"string": "text", "enum": "text", "long": "bigint", "int": "integer",
                      "boolean": "boolean", "bytes": "bytea", "double": "double precision", "float": "real"}


@dataclass(frozen=True)
class LedgerTable:
    name: str
    record: str  # Avro short name in schemas/
    topic_key: str  # key of the source topic in topologies/scheduler.toml
    primary_key: tuple[str, ...] = KAFKA_COORDINATES
    extra_columns: dict[str, str] = field(default_factory=dict)


TABLES = (
    LedgerTable("schedule_versions", "ScheduleState", "schedules", ("schedule_id", "version")),
    LedgerTable("command_results", "CommandResult", "command-results"),
    LedgerTable("dispatches", "Occurrence", "occurrences", PARTITIONED_KEY),
    LedgerTable("occurrence_events", "OccurrenceEvent", "occurrence-events"),
    LedgerTable("attempts", "AttemptEvent", "attempts", PARTITIONED_KEY),
    LedgerTable("dead_letters", "DeadLetter", "dead-letters", extra_columns={"occurrence_id": "text"}),
)


def schema_name(prefix: str) -> str:
    """The PostgreSQL schema of a deployment: its topic prefix, lower-cased, [a-z0-9_] only."""
    return re.sub(r"[^a-z0-9_]", "_", prefix.lower())


def column_type(avro_type: Any) -> str:
    """The column of one top-level field: ["null", T] is a nullable T; records and arrays are JSON text."""
    if isinstance(avro_type, list):
        branches = [branch for branch in avro_type if branch != "null"]
        return column_type(branches[0]) if len(branches) == 1 else "text"
    if isinstance(avro_type, dict):
        kind = avro_type["type"]
        return _PRIMITIVE_COLUMNS.get(kind, "text") if kind not in ("record", "array", "map") else "text"
    return _PRIMITIVE_COLUMNS.get(avro_type, "text")


def expected_columns(table: LedgerTable) -> dict[str, str]:
    schema = load_current(schema_dir())[f"scheduler.v1.{table.record}"].schema
    fields = {item["name"]: column_type(item["type"]) for item in schema["fields"]}
    return {**COMMON_COLUMNS, **fields, **table.extra_columns}


def ddl(prefix: str) -> str:
    return (resources.files(__package__) / "ledger.sql").read_text().replace("{schema}", schema_name(prefix))


@dataclass
class TablesReport:
    created: list[str] = field(default_factory=list)
    ok: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    partitions: PartitionsReport = field(default_factory=PartitionsReport)
    payload: str = DEFAULT_PAYLOAD
    payload_action: str = "ok"  # created (a new ledger, or one from before the modes), updated, ok


def ensure_tables(conn: Any, prefix: str, now_ms: int | None = None, payload: str | None = None) -> TablesReport:
    """Create the schema, missing tables and the occurrence tables' partitions for yesterday .. today + 7
    days (`now_ms`, default the clock); set the payload mode if `payload` is given (a new ledger gets
    hash, an existing one keeps its mode: a re-run of ensure without the flag changes nothing). Tables
    whose columns differ, or that are not partitioned (an older ledger), are reported, never altered."""
    schema = schema_name(prefix)
    # Two sessions ensuring one deployment at once would race on CREATE SCHEMA IF NOT EXISTS.
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
    before = _columns(conn, schema)
    conn.execute(ddl(prefix))
    report = TablesReport(partitions=ensure_partitions(conn, schema, int(time.time() * 1000) if now_ms is None
                                                       else now_ms))
    report.payload, report.payload_action = _payload_mode(conn, schema, payload)
    conn.commit()
    after = _columns(conn, schema)
    for table in TABLES:
        qualified = f"{schema}.{table.name}"
        if table.name not in before:
            report.created.append(qualified)
            continue
        found, wanted = after.get(table.name, {}), expected_columns(table)
        problems = [f"{name} missing (want {kind})" for name, kind in wanted.items() if name not in found]
        problems += [f"{name} is {found[name]}, want {kind}" for name, kind in wanted.items()
                     if name in found and found[name] != kind]
        if problems:
            report.differences.append(f"{qualified}: {'; '.join(problems)}")
        else:
            report.ok.append(qualified)
    return report


def _payload_mode(conn: Any, schema: str, wanted: str | None) -> tuple[str, str]:
    """The mode in force after this ensure, and what this ensure did to it (created, updated, ok)."""
    if wanted is not None and wanted not in PAYLOAD_MODES:
        raise ValueError(f"payload mode must be one of {', '.join(PAYLOAD_MODES)}, got {wanted!r}")
    settings = sql.Identifier(schema, "ledger_settings")
    row = conn.execute(sql.SQL("SELECT value FROM {} WHERE name = 'payload'").format(settings)).fetchone()
    mode = wanted or (row[0] if row else DEFAULT_PAYLOAD)
    if row is None or row[0] != mode:
        conn.execute(sql.SQL("INSERT INTO {} VALUES ('payload', %s) ON CONFLICT (name) DO UPDATE SET value = "
                             "EXCLUDED.value").format(settings), (mode,))
    return mode, "created" if row is None else "updated" if row[0] != mode else "ok"


def _columns(conn: Any, schema: str) -> dict[str, dict[str, str]]:
    rows = conn.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                        "WHERE table_schema = %s", (schema,)).fetchall()
    tables: dict[str, dict[str, str]] = {}
    for table, column, kind in rows:
        tables.setdefault(table, {})[column] = kind
    return tables
