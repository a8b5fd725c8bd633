"""Reads one tenant's ledger rows from PostgreSQL (the LEDGER contract) into `scheduler.audit.ledger` values.

Only what reconciliation needs is read: every version and ACCEPTED result of the tenant's schedules
(few rows, and the expected set needs each version's whole life), and the occurrence rows whose
scheduled_for lies in the range; attempt steps arrive aggregated per occurrence (GROUP BY in PostgreSQL).
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from scheduler.audit.ledger import (
    FAILED_STEP,
    FINAL_STEPS,
    LIVE_STEPS,
    AttemptSummary,
    DeadLetterRow,
    DispatchRow,
    EventRow,
    Ledger,
    ResultRow,
    VersionRow,
)
from scheduler.audit.tables import TABLES, schema_name
from scheduler.wire.schemas import PRIMITIVES
from scheduler.wire.topology import Topology

_FETCH = 20_000
_EPOCH_MS = "(extract(epoch from kafka_timestamp) * 1000)::bigint"


class LedgerError(Exception):
    """The ledger is not there to read (no schema or table): nothing can be reconciled."""


def _plain(value: Any) -> Any:
    """Nested values as JSON, tolerating Avro's JSON encoding of unions ({"long": 5} for 5)."""
    if isinstance(value, dict):
        if len(value) == 1:
            (branch, inner), = value.items()
            if branch in PRIMITIVES or "." in branch:
                return _plain(inner)
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _json(text: str | None, default: Any) -> Any:
    return default if text is None else _plain(json.loads(text))


class LedgerReader:
    def __init__(self, conn: psycopg.Connection, prefix: str, topology: Topology | None = None) -> None:
        self.conn = conn
        self.prefix = prefix
        self.schema = schema_name(prefix)
        self.topology = topology or Topology.load()

    def missing_tables(self) -> list[str]:
        found = {row[0] for row in self.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (self.schema,))}
        return [t.name for t in TABLES if t.name not in found]

    def schedules(self, tenant: str) -> set[str]:
        return {row[0] for row in self._rows("SELECT DISTINCT schedule_id FROM {t} WHERE tenant = %s",
                                             "schedule_versions", (tenant,))}

    def knows(self, tenant: str, schedule: str | None = None) -> bool:
        """Whether the ledger has a version of the tenant's (or of this schedule of the tenant)."""
        statement = sql.SQL("SELECT EXISTS (SELECT 1 FROM {t} WHERE tenant = %s AND "
                            "(%s::text IS NULL OR schedule_id = %s))").format(
            t=sql.Identifier(self.schema, "schedule_versions"))
        row = self.conn.execute(statement, (tenant, schedule, schedule)).fetchone()
        return bool(row and row[0])

    def _rows(self, query: str, table: str, params: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        statement = sql.SQL(query).format(t=sql.Identifier(self.schema, table))
        with self.conn.cursor(binary=True) as cursor:
            cursor.execute(statement, params)
            while batch := cursor.fetchmany(_FETCH):
                yield from batch

    def _streamed(self, query: str, table: str, params: tuple[Any, ...], batch: int) -> Iterator[tuple[Any, ...]]:
        """Rows through a server-side cursor, `batch` per round trip: memory holds one batch, whatever the count."""
        statement = sql.SQL(query).format(t=sql.Identifier(self.schema, table))
        with self.conn.cursor(name=f"ledger_{uuid.uuid4().hex[:12]}", binary=True) as cursor:
            cursor.itersize = batch
            cursor.execute(statement, params)
            yield from cursor

    def histories(self, tenant: str, schedule: str | None = None,
                  batch: int = _FETCH) -> Iterator[tuple[str, dict[int, VersionRow], list[ResultRow]]]:
        """(schedule id, its version rows by number, its ACCEPTED results), one schedule at a time in code-point
        order of the id (Python's sort): the expected set is computed per schedule without holding the tenant."""
        only = "AND (%s::text IS NULL OR schedule_id = %s)"
        versions = self._streamed(
            "SELECT schedule_id, tenant, version, state, spec, fired_count, next_fire_ms, pending, created_at_ms, "
            f"updated_at_ms FROM {{t}} WHERE tenant = %s {only} ORDER BY schedule_id COLLATE \"C\", version",
            "schedule_versions", (tenant, schedule, schedule), batch)
        results = self._streamed(
            "SELECT schedule_id, command_type, version, processed_at_ms, next_fires_ms FROM {t} "
            f"WHERE tenant = %s AND status = 'ACCEPTED' {only} ORDER BY schedule_id COLLATE \"C\"",
            "command_results", (tenant, schedule, schedule), batch)
        pending_result = next(results, None)
        row = next(versions, None)
        while row is not None:
            sid = row[0]
            rows: dict[int, VersionRow] = {}
            while row is not None and row[0] == sid:
                _, t, version, state, spec, fired, next_fire, pending, created, updated = row
                rows[version] = VersionRow(sid, t, version, state, _json(spec, {}), fired or 0, next_fire,
                                           tuple(_json(pending, [])), created or 0, updated or 0)
                row = next(versions, None)
            found: list[ResultRow] = []
            while pending_result is not None and pending_result[0] <= sid:
                rid, kind, version, at, fires = pending_result
                if rid == sid:
                    found.append(ResultRow(rid, kind, version, at, tuple(_json(fires, []))))
                pending_result = next(results, None)
            yield sid, rows, found

    def dead_letters(self, tenant: str, from_ms: int, to_ms: int, schedule: str | None = None,
                     batch: int = _FETCH) -> Iterator[DeadLetterRow]:
        """The tenant's dead letters of occurrences scheduled in [from, to), streamed (the record is JSON text:
        filtered here, where its Avro union encoding is understood)."""
        topic = self.topology.topic_name("dead-letters", self.prefix, tenant=tenant)
        for oid, occurrence, dead_at in self._streamed("SELECT occurrence_id, occurrence, dead_at_ms FROM {t} "
                                                       "WHERE kafka_topic = %s", "dead_letters", (topic,), batch):
            record = _json(occurrence, {})
            if from_ms <= record.get("scheduled_for_ms", -1) < to_ms and schedule in (None, record.get("schedule_id")):
                yield DeadLetterRow(oid or record["occurrence_id"], dead_at)

    def read(self, tenant: str, from_ms: int, to_ms: int, schedule: str | None = None) -> Ledger:
        missing = self.missing_tables()
        if missing:
            raise LedgerError(f"schema {self.schema!r} lacks the ledger tables {', '.join(missing)} "
                              "(created by `scheduler audit ensure`)")
        only = "AND (%s::text IS NULL OR schedule_id = %s)"
        window = (tenant, from_ms, to_ms, schedule, schedule)
        ledger = Ledger()
        ledger.versions = [
            VersionRow(sid, t, version, state, _json(spec, {}), fired or 0, next_fire, tuple(_json(pending, [])),
                       created or 0, updated or 0)
            for sid, t, version, state, spec, fired, next_fire, pending, created, updated in self._rows(
                "SELECT schedule_id, tenant, version, state, spec, fired_count, next_fire_ms, pending, created_at_ms, "
                f"updated_at_ms FROM {{t}} WHERE tenant = %s {only}", "schedule_versions",
                (tenant, schedule, schedule))]
        ledger.results = [
            ResultRow(sid, kind, version, at, tuple(_json(fires, [])))
            for sid, kind, version, at, fires in self._rows(
                "SELECT schedule_id, command_type, version, processed_at_ms, next_fires_ms FROM {t} "
                f"WHERE tenant = %s AND status = 'ACCEPTED' {only}", "command_results", (tenant, schedule, schedule))]
        ledger.dispatches = [
            DispatchRow(oid, sid, version, at, available, enqueued, attempt or 1, bool(catch_up), tenant)
            for oid, sid, version, at, available, enqueued, attempt, catch_up in self._rows(
                "SELECT occurrence_id, schedule_id, schedule_version, scheduled_for_ms, available_at_ms, "
                f"{_EPOCH_MS}, attempt, catch_up FROM {{t}} "
                f"WHERE tenant = %s AND scheduled_for_ms >= %s AND scheduled_for_ms < %s {only}", "dispatches", window)]
        ledger.events = [
            EventRow(sid, version, kind, recorded, oid, at, first, last, count or 1)
            for sid, version, kind, recorded, oid, at, first, last, count in self._rows(
                "SELECT schedule_id, schedule_version, kind, recorded_at_ms, occurrence_id, scheduled_for_ms, "
                "range_first_ms, range_last_ms, count FROM {t} WHERE tenant = %s "
                "AND ((scheduled_for_ms >= %s AND scheduled_for_ms < %s) "
                "OR (range_last_ms >= %s AND range_first_ms < %s)) " + only, "occurrence_events",
                (tenant, from_ms, to_ms, from_ms, to_ms, schedule, schedule))]
        ledger.attempts = [
            AttemptSummary(*row) for row in self._rows(
                "SELECT occurrence_id, (array_agg(kind ORDER BY at_ms DESC) FILTER (WHERE kind = ANY(%s)))[1], "
                "max(at_ms) FILTER (WHERE kind = ANY(%s)), count(*) FILTER (WHERE kind = %s), "
                "max(attempt) FILTER (WHERE kind = %s), coalesce(bool_or(kind = ANY(%s)), false) FROM {t} "
                f"WHERE tenant = %s AND scheduled_for_ms >= %s AND scheduled_for_ms < %s {only} "
                "GROUP BY occurrence_id", "attempts",
                (list(FINAL_STEPS), list(FINAL_STEPS), FAILED_STEP, FAILED_STEP, list(LIVE_STEPS), *window))]
        ledger.dead_letters = list(self.dead_letters(tenant, from_ms, to_ms, schedule))
        return ledger
