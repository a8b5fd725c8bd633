"""The audit ledger's tables: where they live, what they hold, and creating them (ledger.sql).

The contract (column names and types, keys) is derived here from schemas/*.avsc, so the DDL in
ledger.sql is checked against the records rather than trusted to be retyped correctly."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from scheduler.wire.schemas import load_current, schema_dir

DATABASE_URL_ENV = "AUDIT_DATABASE_URL"
COMMON_COLUMNS = {"kafka_topic": "text", "kafka_partition": "integer", "kafka_offset": "bigint",
                  "kafka_timestamp": "timestamp with time zone"}
KAFKA_COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset")
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
    LedgerTable("dispatches", "Occurrence", "occurrences"),
    LedgerTable("occurrence_events", "OccurrenceEvent", "occurrence-events"),
    LedgerTable("attempts", "AttemptEvent", "attempts"),
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


def ensure_tables(conn: Any, prefix: str) -> TablesReport:
    """Create the schema and missing tables; report (never alter) tables whose columns differ."""
    schema = schema_name(prefix)
    # Two sessions ensuring one deployment at once would race on CREATE SCHEMA IF NOT EXISTS.
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
    before = _columns(conn, schema)
    conn.execute(ddl(prefix))
    conn.commit()
    after = _columns(conn, schema)
    report = TablesReport()
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


def _columns(conn: Any, schema: str) -> dict[str, dict[str, str]]:
    rows = conn.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                        "WHERE table_schema = %s", (schema,)).fetchall()
    tables: dict[str, dict[str, str]] = {}
    for table, column, kind in rows:
        tables.setdefault(table, {})[column] = kind
    return tables
