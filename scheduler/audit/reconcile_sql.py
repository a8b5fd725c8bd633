"""Reconciliation at any range's size: the expected set streamed into PostgreSQL, classified there.

`scheduler/audit/reconcile.py` states the rules over rows held in memory; this module applies the same
rules as set-based SQL (scheduler/audit/reconcile_queries.py), so memory does not grow with the range:

1. the range is cut into time buckets sized from an estimate of its dispatches
   (scheduler/audit/reconcile_buckets.py);
2. the expected occurrences, computed per schedule by the time core (`expected.schedule_occurrences`),
   go by COPY into their bucket's temporary table `rc_expected_<n>`, a batch at a time;
3. bucket after bucket, the bucket's dispatches are counted per id (`rc_sent`) and one INSERT ... SELECT
   joins its expected rows with them, with its attempt steps (aggregated per id), occurrence events and
   the range's dead letters, writing one classified row per expected occurrence into `rc_classified`;
   its unexpected ids, duplicates, id mismatches, deliveries and lags are added to the range's tables,
   and the bucket's own tables are emptied. A bucket's hashes fit in `work_mem`: the cost is linear in
   the range. With `jobs` > 1, helper sessions hold and classify every n-th bucket at the same time and
   hand their answers over at the end (scheduler/audit/reconcile_sessions.py);
4. `StreamedReport` (scheduler/audit/streamed_report.py) reads counts, lists and percentiles from
   those tables, through server-side cursors where a list can be long.

Every ledger row of an occurrence carries its scheduled_for, so it is read with that instant's bucket: a
row stamped with another instant than its id's (a corrupt record) counts where its own instant falls, as
it already did for a range that does not hold that instant.

The temporary tables live until the connection closes (one reconcile per connection, or `drop()`).
`tests/integration/test_reconcile_stream.py` checks these rules against `reconcile.reconcile`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from scheduler.audit import reconcile_queries as q
from scheduler.audit.expected import VersionSpan, schedule_occurrences, version_spans
from scheduler.audit.ledger import DEFAULT_BATCH, FAILED_STEP, LIVE_STEPS, DeadLetterRow, ResultRow, VersionRow
from scheduler.audit.reconcile import EVENT_KINDS, SKIPPED_PAUSED
from scheduler.audit.reconcile_buckets import TARGET_ROWS, Buckets, plan_buckets
from scheduler.audit.reconcile_sessions import gather_answers, helper_sessions, run_on_each, set_up
from scheduler.timing.occurrence_id import occurrence_ids

MIN_COPY_ROWS = 500  # a bucket's COPY is at least this long: many buckets share the batch's memory


@dataclass
class Loaded:
    """What the expected pass leaves in this process: the version spans and warnings (per schedule, not
    per occurrence) and how many occurrences went to the database."""

    spans: list[VersionSpan] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    expected: int = 0


def _copy_text(value: str) -> str:
    """A text field of COPY's text format."""
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


EXPECTED_PREFIX = "rc_expected_"


def _expected_table(index: int) -> str:
    return f"{EXPECTED_PREFIX}{index}"


class SqlReconciler:
    """One reconcile of one tenant's range on one connection (its temporary tables are this session's) and,
    with `jobs` > 1 and more than one bucket, helper sessions that classify every `jobs`-th bucket
    (scheduler/audit/reconcile_sessions.py). `target_rows` sizes the buckets (tests make it small to cut a
    small range into many). Use it as a context manager: the helpers close when it ends."""

    def __init__(self, conn: psycopg.Connection, schema: str, tenant: str, from_ms: int, to_ms: int,
                 schedule: str | None = None, batch: int = DEFAULT_BATCH, target_rows: int = TARGET_ROWS,
                 jobs: int = 1) -> None:
        if batch < 1 or jobs < 1:
            raise ValueError("batch and jobs must be at least 1")
        self.conn, self.schema, self.tenant = conn, schema, tenant
        self.from_ms, self.to_ms, self.schedule, self.batch = from_ms, to_ms, schedule, batch
        self.target_rows, self.jobs = target_rows, jobs
        self.params: dict[str, Any] = {"tenant": tenant, "from": from_ms, "to": to_ms, "schedule": schedule,
                                       "kinds": list(EVENT_KINDS), "live": list(LIVE_STEPS), "failed": FAILED_STEP,
                                       "paused": SKIPPED_PAUSED}
        self.buckets = Buckets(from_ms, to_ms, max(1, to_ms - from_ms), 1)
        self.sessions = [conn]
        self.session_count = 1
        self._helpers = ExitStack()

    def __enter__(self) -> SqlReconciler:
        return self

    def __exit__(self, *exc: object) -> None:
        self._helpers.close()
        self.sessions = [self.conn]

    def table(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.schema, name)

    def session_of(self, bucket: int) -> psycopg.Connection:
        return self.sessions[bucket % len(self.sessions)]

    def execute(self, query: str, bucket: int | None = None, conn: psycopg.Connection | None = None) -> None:
        """`query` over the whole range, or over one bucket's bounds and expected table."""
        params, names = dict(self.params), {"dispatches": self.table("dispatches"),
                                            "attempts": self.table("attempts"),
                                            "events": self.table("occurrence_events")}
        if bucket is not None:
            params["from"], params["to"] = self.buckets.bounds(bucket)
            names["expected"] = sql.Identifier(_expected_table(bucket))
        (conn or self.conn).execute(sql.SQL(query).format(**names), params)

    def prepare(self) -> None:
        self.drop()
        set_up(self.conn)
        self.buckets = plan_buckets(self.from_ms, self.to_ms, self._estimated_dispatches(), self.target_rows)
        helpers = min(self.jobs, self.buckets.count) - 1
        if helpers:
            self.sessions = [self.conn, *self._helpers.enter_context(helper_sessions(self.conn, helpers))]
        self.session_count = len(self.sessions)
        for index in range(self.buckets.count):
            self.session_of(index).execute(f"CREATE TEMP TABLE {_expected_table(index)} {q.EXPECTED_COLUMNS}")

    def _estimated_dispatches(self) -> float:
        """The planner's row estimate for the range's dispatches: free, and close enough to size buckets."""
        statement = sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM {t} WHERE " + q.in_range()).format(
            t=self.table("dispatches"))
        plan = self.conn.execute(statement, self.params).fetchone()
        document = plan[0] if plan else [{}]
        return float((json.loads(document) if isinstance(document, str) else document)[0]["Plan"]["Plan Rows"])

    def drop(self) -> None:
        """This session's reconcile tables, however many buckets the last reconcile on it had."""
        buckets = [name for (name,) in self.conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = pg_my_temp_schema() AND relname LIKE %s",
            (EXPECTED_PREFIX.replace("_", r"\_") + "%",))]
        self.conn.execute("DROP TABLE IF EXISTS " + ", ".join((*q.RANGE_TABLES, *buckets)))

    # -- 1. the expected set, by COPY into its buckets ---------------------------------------------

    def load_expected(self, histories: Iterable[tuple[str, dict[int, VersionRow], list[ResultRow]]]) -> Loaded:
        """COPY a bucket's lines once it holds its share of the batch: between COPYs the histories'
        server-side cursors fetch on this same connection (a COPY in progress would not let them)."""
        loaded = Loaded()
        buckets = self.buckets
        chunks: list[list[str]] = [[] for _ in range(buckets.count)]
        flush_at = max(MIN_COPY_ROWS, self.batch // buckets.count)
        seq = 0
        for sid, rows, results in histories:
            spans, warnings = version_spans(rows.values(), results)
            loaded.spans.extend(spans)
            loaded.warnings.extend(warnings)
            sid_text = _copy_text(sid)
            for e in schedule_occurrences(spans, rows, results, self.from_ms, self.to_ms, loaded.warnings):
                index = buckets.index(e.scheduled_for_ms)
                chunk = chunks[index]
                chunk.append(f"{seq}\t{e.occurrence_id}\t{sid_text}\t{e.schedule_version}\t{e.scheduled_for_ms}\t"
                             f"{e.available_at_ms}\t{e.origin}\n")
                seq += 1
                if len(chunk) >= flush_at:
                    _copy(self.session_of(index), _expected_table(index), chunk)
                    chunks[index] = []
        for index, chunk in enumerate(chunks):
            _copy(self.session_of(index), _expected_table(index), chunk)
        loaded.expected = seq
        return loaded

    def load_dead_letters(self, dead: Iterable[DeadLetterRow]) -> None:
        """Into every session: any bucket may hold a dead letter's occurrence."""
        chunk: list[str] = []
        for row in dead:
            chunk.append(f"{_copy_text(row.occurrence_id)}\t{row.dead_at_ms}\n")
            if len(chunk) >= self.batch:
                for session in self.sessions:
                    _copy(session, "rc_dead", chunk)
                chunk = []
        for session in self.sessions:
            _copy(session, "rc_dead", chunk)

    # -- 2. classification, in PostgreSQL, bucket after bucket --------------------------------------

    def classify(self) -> None:
        """Every bucket, each session taking its own at once; then the helpers' answers into this session."""
        def classify_share(share: int, conn: psycopg.Connection) -> None:
            self.execute(q.RANGES, conn=conn)
            conn.execute(q.DEAD_FINAL)
            conn.execute("ANALYZE rc_ranges; ANALYZE rc_dead_final")
            for index in range(share, self.buckets.count, len(self.sessions)):
                self._classify_bucket(index, conn)

        run_on_each(self.sessions, classify_share)
        gather_answers(self.conn, self.sessions[1:])

    def _classify_bucket(self, index: int, conn: psycopg.Connection) -> None:
        expected = _expected_table(index)
        conn.execute("TRUNCATE rc_sent, rc_candidates")
        self.execute(q.PAUSED_IDS, index, conn)
        # Dispatches per id are hashed, not grouped along the occurrence_id index: that walk reads the heap
        # in random order, 1.6x the time at a million rows (bench/README.md); the bucket's rows are found by
        # the (tenant, time) index as a bitmap, or by a scan of the day's partition.
        conn.execute("SET enable_indexscan = off")
        self.execute(q.SENT, index, conn)
        conn.execute("RESET enable_indexscan")
        conn.execute(f"ANALYZE {expected}; ANALYZE rc_sent")
        self.execute(q.CLASSIFY, index, conn)
        self.execute(q.UNEXPECTED_CANDIDATES, index, conn)
        conn.execute("ANALYZE rc_candidates")
        self.execute(q.UNEXPECTED, index, conn)
        self.execute(q.OTHER_KEY_CANDIDATES, index, conn)
        self.execute(q.DUPLICATES, index, conn)
        self._mismatches(index, conn)
        conn.execute(q.DELIVERIES)
        self.execute(q.LAGS, index, conn)
        conn.execute(f"TRUNCATE {expected}")

    def _mismatches(self, index: int, conn: psycopg.Connection) -> None:
        start, end = self.buckets.bounds(index)
        statement = sql.SQL(q.MISMATCH_CANDIDATES).format(dispatches=self.table("dispatches"))
        with conn.cursor(name="rc_mismatch_candidates") as candidates:
            candidates.execute(statement, {**self.params, "from": start, "to": end})
            while found := candidates.fetchmany(self.batch):
                _copy(conn, "rc_mismatches", [f"{_copy_text(oid)}\n" for oid, sid, version, at_ms in found
                                              if version is None or at_ms is None
                                              or occurrence_ids(sid, version)(at_ms) != oid])


def _copy(conn: psycopg.Connection, table: str, lines: list[str]) -> None:
    if lines:
        with conn.cursor() as cursor, cursor.copy(f"COPY {table} FROM STDIN") as copy:
            copy.write("".join(lines))
