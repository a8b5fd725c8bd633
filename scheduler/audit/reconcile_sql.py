"""Reconciliation at any range's size: the expected set streamed into PostgreSQL, classified there.

`scheduler/audit/reconcile.py` states the rules over rows held in memory; this module applies the same
rules as set-based SQL, so memory does not grow with the range:

1. the expected occurrences, computed per schedule by the time core (`expected.schedule_occurrences`),
   go into the session's temporary table `rc_expected` by COPY, a batch at a time;
2. one INSERT ... SELECT joins them with the range's dispatches (counted per id), attempt steps
   (aggregated per id), occurrence events and dead letters, and writes one classified row per
   expected occurrence into `rc_classified` (hash joins and aggregates that spill to disk past
   work_mem, not rows in this process);
3. `StreamedReport` (scheduler/audit/streamed_report.py) reads counts, lists and percentiles from
   those tables, through server-side cursors where a list can be long.

The temporary tables live until the connection closes (one reconcile per connection, or `drop()`).
`tests/integration/test_reconcile_stream.py` checks these rules against `reconcile.reconcile`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from scheduler.audit.expected import PAUSED, Expected, VersionSpan, schedule_occurrences, version_spans
from scheduler.audit.ledger import (
    DEFAULT_BATCH,
    FAILED_STEP,
    FINAL_STEPS,
    LIVE_STEPS,
    DeadLetterRow,
    ResultRow,
    VersionRow,
)
from scheduler.audit.reconcile import ABSENT, DEAD, ENQUEUED, EVENT_KINDS, FAILED, RETRIED, RUNNING, SKIPPED_PAUSED
from scheduler.timing.occurrence_id import occurrence_ids

WORK_MEM = "64MB"  # per sort or hash of one query: PostgreSQL's share of the memory bound
TEMP_BUFFERS = "128MB"  # the temporary tables' pages kept in the backend before they go to temp files
TEMP_TABLES = ("rc_expected", "rc_dead", "rc_ranges", "rc_sent", "rc_classified", "rc_candidates", "rc_unexpected",
               "rc_duplicates", "rc_mismatches")
# A final report is the latest by time, ties to the greater kind (the in-memory max over (time, kind)):
# encoded as time * len + rank of the kind in sorted order, so max() picks it.
_FINALS = tuple(sorted((*FINAL_STEPS, DEAD)))
_TEMP_DDL = """
CREATE TEMP TABLE rc_expected (seq bigint, occurrence_id text, schedule_id text, schedule_version bigint,
    scheduled_for_ms bigint, available_at_ms bigint, origin text);
CREATE TEMP TABLE rc_dead (occurrence_id text, dead_at_ms bigint);
CREATE TEMP TABLE rc_ranges (schedule_id text, kind text, range_first_ms bigint, range_last_ms bigint,
    recorded_at_ms bigint);
CREATE TEMP TABLE rc_sent (occurrence_id text, schedule_id text, schedule_version bigint, scheduled_for_ms bigint,
    one_key boolean, deliveries bigint, max_attempt integer);
CREATE TEMP TABLE rc_classified (seq bigint, occurrence_id text, schedule_id text, schedule_version bigint,
    scheduled_for_ms bigint, available_at_ms bigint, origin text, classification text, deliveries bigint,
    failed_attempts bigint, key_matches boolean);
CREATE TEMP TABLE rc_candidates (occurrence_id text, schedule_id text, schedule_version bigint,
    scheduled_for_ms bigint);
CREATE TEMP TABLE rc_unexpected (occurrence_id text, schedule_id text, schedule_version bigint,
    scheduled_for_ms bigint, deliveries bigint);
CREATE TEMP TABLE rc_duplicates (occurrence_id text, attempt integer, deliveries bigint);
CREATE TEMP TABLE rc_mismatches (occurrence_id text);
"""


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


def _lines(items: Iterable[Expected], first_seq: int) -> Iterator[str]:
    seq = first_seq
    sid_text = ""
    sid = None
    for e in items:
        if e.schedule_id != sid:
            sid, sid_text = e.schedule_id, _copy_text(e.schedule_id)
        yield (f"{seq}\t{e.occurrence_id}\t{sid_text}\t{e.schedule_version}\t{e.scheduled_for_ms}\t"
               f"{e.available_at_ms}\t{e.origin}\n")
        seq += 1


class SqlReconciler:
    """One reconcile of one tenant's range on one connection (its temporary tables are this session's)."""

    def __init__(self, conn: psycopg.Connection, schema: str, tenant: str, from_ms: int, to_ms: int,
                 schedule: str | None = None, batch: int = DEFAULT_BATCH) -> None:
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self.conn, self.schema, self.tenant = conn, schema, tenant
        self.from_ms, self.to_ms, self.schedule, self.batch = from_ms, to_ms, schedule, batch
        self.params: dict[str, Any] = {"tenant": tenant, "from": from_ms, "to": to_ms, "schedule": schedule}

    def table(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.schema, name)

    def execute(self, query: str, **tables: str) -> None:
        statement = sql.SQL(query).format(**{k: self.table(v) for k, v in tables.items()})
        self.conn.execute(statement, self.params)

    def prepare(self) -> None:
        self.drop()
        self.conn.execute(f"SET work_mem = '{WORK_MEM}'")
        self.conn.execute(f"SET temp_buffers = '{TEMP_BUFFERS}'")
        # JIT compiles the classification's many expressions for each run: it cost more CPU than it saved
        # (1.5-2.5 s per million occurrences measured) on queries that scan each row once.
        self.conn.execute("SET jit = off")
        self.conn.execute(_TEMP_DDL)

    def drop(self) -> None:
        self.conn.execute("DROP TABLE IF EXISTS " + ", ".join(TEMP_TABLES))

    # -- 1. the expected set, by COPY --------------------------------------------------------------

    def load_expected(self, histories: Iterable[tuple[str, dict[int, VersionRow], list[ResultRow]]]) -> Loaded:
        """COPY a batch at a time: between batches the histories' server-side cursors fetch on this same
        connection (a COPY in progress would not let them)."""
        loaded = Loaded()
        chunk: list[str] = []
        for _sid, rows, results in histories:
            spans, warnings = version_spans(rows.values(), results)
            loaded.spans.extend(spans)
            loaded.warnings.extend(warnings)
            items = schedule_occurrences(spans, rows, results, self.from_ms, self.to_ms, loaded.warnings)
            for line in _lines(items, loaded.expected + len(chunk)):
                chunk.append(line)
                if len(chunk) >= self.batch:
                    loaded.expected += self._copy("rc_expected", chunk)
                    chunk = []
        loaded.expected += self._copy("rc_expected", chunk)
        return loaded

    def load_dead_letters(self, dead: Iterable[DeadLetterRow]) -> None:
        chunk: list[str] = []
        for row in dead:
            chunk.append(f"{_copy_text(row.occurrence_id)}\t{row.dead_at_ms}\n")
            if len(chunk) >= self.batch:
                self._copy("rc_dead", chunk)
                chunk = []
        self._copy("rc_dead", chunk)

    def _copy(self, table: str, lines: list[str]) -> int:
        if lines:
            with self.conn.cursor() as cursor, cursor.copy(f"COPY {table} FROM STDIN") as copy:
                copy.write("".join(lines))
        return len(lines)

    # -- 2. classification, in PostgreSQL ------------------------------------------------------------

    def classify(self) -> None:
        self.params.update(kinds=list(EVENT_KINDS), live=list(LIVE_STEPS), failed=FAILED_STEP, paused=SKIPPED_PAUSED)
        # A paused fire carries the id the engine gave it in its SKIPPED_PAUSED event (old or resumed version).
        self.execute(
            "UPDATE rc_expected e SET occurrence_id = p.occurrence_id, schedule_version = p.schedule_version "
            "FROM (SELECT DISTINCT ON (schedule_id, scheduled_for_ms) schedule_id, scheduled_for_ms, occurrence_id, "
            "schedule_version FROM {events} WHERE kind = %(paused)s AND occurrence_id IS NOT NULL AND "
            f"scheduled_for_ms IS NOT NULL AND {_EVENTS_READ} ORDER BY schedule_id, scheduled_for_ms, "
            "recorded_at_ms DESC) p WHERE e.origin = 'PAUSED' AND p.schedule_id = e.schedule_id "
            "AND p.scheduled_for_ms = e.scheduled_for_ms", events="occurrence_events")
        self.execute(
            "INSERT INTO rc_ranges SELECT schedule_id, kind, range_first_ms, range_last_ms, recorded_at_ms "
            "FROM {events} WHERE occurrence_id IS NULL AND range_first_ms IS NOT NULL "
            f"AND range_last_ms IS NOT NULL AND {_EVENTS_READ}", events="occurrence_events")
        # Dispatches per id: one pass; `one_key` says whether every row of the id names the same
        # (schedule, version, instant), which the recipe check below relies on.
        self.execute(
            "INSERT INTO rc_sent SELECT occurrence_id, min(schedule_id), min(schedule_version), min(scheduled_for_ms), "
            "min(schedule_id) = max(schedule_id) AND min(schedule_version) = max(schedule_version) AND "
            "min(scheduled_for_ms) = max(scheduled_for_ms), count(*), max(coalesce(attempt, 1)) "
            f"FROM {{dispatches}} WHERE {_IN_RANGE} GROUP BY occurrence_id", dispatches="dispatches")
        self.conn.execute("ANALYZE rc_expected; ANALYZE rc_sent")
        self.execute(_CLASSIFY, attempts="attempts", events="occurrence_events")
        self._unexpected()
        self._duplicates()
        self._mismatches()

    def _unexpected(self) -> None:
        """A dispatched id no recurrence or manual command expects (or a paused fire's) is UNEXPECTED, named
        by its first (instant, version) key. Such ids, and expected ids dispatched under another key, are
        the candidates for the recipe check."""
        self.conn.execute(f"""
INSERT INTO rc_candidates
SELECT s.occurrence_id, NULL, NULL, NULL FROM rc_sent s
WHERE NOT EXISTS (SELECT 1 FROM rc_classified c WHERE c.occurrence_id = s.occurrence_id AND c.origin <> '{PAUSED}')""")
        self.conn.execute("ANALYZE rc_candidates")
        self.execute(f"""
INSERT INTO rc_unexpected
SELECT DISTINCT ON (d.occurrence_id) d.occurrence_id, d.schedule_id, d.schedule_version, d.scheduled_for_ms,
       s.deliveries
FROM rc_candidates c JOIN rc_sent s USING (occurrence_id) JOIN {{dispatches}} d USING (occurrence_id)
WHERE {_in_range("d")}
ORDER BY d.occurrence_id, d.scheduled_for_ms, d.schedule_version""", dispatches="dispatches")
        self.conn.execute("INSERT INTO rc_candidates SELECT occurrence_id, schedule_id, schedule_version, "
                          "scheduled_for_ms FROM rc_classified WHERE deliveries > 0 AND NOT key_matches")

    def _duplicates(self) -> None:
        """One id and attempt delivered more than once: only ids delivered more than once can be one."""
        self.execute(f"""
INSERT INTO rc_duplicates
SELECT d.occurrence_id, coalesce(d.attempt, 1), count(*)
FROM {{dispatches}} d JOIN rc_sent s ON s.occurrence_id = d.occurrence_id AND s.deliveries > 1
WHERE {_in_range("d")}
GROUP BY 1, 2 HAVING count(*) > 1""", dispatches="dispatches")

    def _mismatches(self) -> None:
        """Only a dispatch whose (schedule, version, instant) is not its expected id's needs the recipe:
        PostgreSQL finds those few, the time core recomputes their ids."""
        statement = sql.SQL(
            "SELECT DISTINCT d.occurrence_id, d.schedule_id, d.schedule_version, d.scheduled_for_ms "
            f"FROM {{t}} d JOIN rc_candidates c USING (occurrence_id) WHERE {_in_range('d')} "
            "AND (c.schedule_id IS NULL OR "
            "(d.schedule_id, d.schedule_version, d.scheduled_for_ms) IS DISTINCT FROM "
            "(c.schedule_id, c.schedule_version, c.scheduled_for_ms))").format(t=self.table("dispatches"))
        with self.conn.cursor(name="rc_candidates") as candidates:
            candidates.execute(statement, self.params)
            while found := candidates.fetchmany(self.batch):
                self._copy("rc_mismatches", [f"{_copy_text(oid)}\n" for oid, sid, version, at_ms in found
                                             if version is None or at_ms is None
                                             or occurrence_ids(sid, version)(at_ms) != oid])


def _in_range(alias: str = "") -> str:
    """The rows of the tenant (and schedule) scheduled in [from, to): what the range reads."""
    a = f"{alias}." if alias else ""
    return (f"{a}tenant = %(tenant)s AND {a}scheduled_for_ms >= %(from)s AND {a}scheduled_for_ms < %(to)s AND "
            f"(%(schedule)s::text IS NULL OR {a}schedule_id = %(schedule)s)")


_ONLY = "(%(schedule)s::text IS NULL OR schedule_id = %(schedule)s)"
_IN_RANGE = _in_range()
_EVENTS_READ = ("tenant = %(tenant)s AND kind = ANY(%(kinds)s) AND ((scheduled_for_ms >= %(from)s AND "
                "scheduled_for_ms < %(to)s) OR (range_last_ms >= %(from)s AND range_first_ms < %(to)s)) AND " + _ONLY)
_FINAL = "greatest(st.final_enc, d.dead_enc)"
_RANGE_KIND = ("(SELECT r.kind FROM rc_ranges r WHERE r.schedule_id = e.schedule_id AND e.scheduled_for_ms "
               "BETWEEN r.range_first_ms AND r.range_last_ms ORDER BY r.recorded_at_ms DESC LIMIT 1)")
_RANKS = " ".join(f"WHEN '{kind}' THEN at_ms * {len(_FINALS)} + {n}" for n, kind in enumerate(_FINALS)
                  if kind in FINAL_STEPS)
# The rules of reconcile._classify, first match wins (docs/reconcile.md, Classification).
_CLASSIFY = f"""
INSERT INTO rc_classified
SELECT e.seq, e.occurrence_id, e.schedule_id, e.schedule_version, e.scheduled_for_ms, e.available_at_ms, e.origin,
  CASE
    WHEN e.origin = '{PAUSED}' THEN coalesce(ev.kind, {_RANGE_KIND}, '{SKIPPED_PAUSED}')
    WHEN s.deliveries IS NULL THEN coalesce(ev.kind, {_RANGE_KIND}, '{ABSENT}')
    WHEN {_FINAL} IS NOT NULL THEN (ARRAY[{", ".join(f"'{k}'" for k in _FINALS)}])[mod({_FINAL}, {len(_FINALS)}) + 1]
    WHEN ev.kind IS NOT NULL THEN ev.kind
    WHEN st.max_failed IS NOT NULL THEN CASE WHEN s.max_attempt > st.max_failed THEN '{RETRIED}' ELSE '{FAILED}' END
    WHEN st.started THEN '{RUNNING}'
    ELSE '{ENQUEUED}'
  END,
  coalesce(s.deliveries, 0),
  CASE WHEN e.origin <> '{PAUSED}' AND s.deliveries IS NOT NULL
        AND ({_FINAL} IS NOT NULL OR ev.kind IS NOT NULL OR st.max_failed IS NOT NULL)
       THEN coalesce(st.failed, 0) ELSE 0 END,
  s.one_key AND s.schedule_id = e.schedule_id AND s.schedule_version = e.schedule_version
    AND s.scheduled_for_ms = e.scheduled_for_ms
FROM rc_expected e
LEFT JOIN rc_sent s USING (occurrence_id)
LEFT JOIN (SELECT occurrence_id, max(CASE kind {_RANKS} END) AS final_enc,
                  count(*) FILTER (WHERE kind = %(failed)s) AS failed,
                  max(attempt) FILTER (WHERE kind = %(failed)s) AS max_failed,
                  coalesce(bool_or(kind = ANY(%(live)s)), false) AS started
           FROM {{attempts}} WHERE {_IN_RANGE} GROUP BY occurrence_id) st USING (occurrence_id)
LEFT JOIN (SELECT DISTINCT ON (occurrence_id) occurrence_id, kind FROM {{events}}
           WHERE occurrence_id IS NOT NULL AND {_EVENTS_READ}
           ORDER BY occurrence_id, recorded_at_ms DESC) ev USING (occurrence_id)
LEFT JOIN (SELECT occurrence_id, max(dead_at_ms) * {len(_FINALS)} + {_FINALS.index(DEAD)} AS dead_enc FROM rc_dead
           GROUP BY occurrence_id) d USING (occurrence_id)
"""
