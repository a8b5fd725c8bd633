"""The answers of a reconcile classified in PostgreSQL (scheduler/audit/reconcile_sql.py), read back in
the shape `report_format` renders: small figures as values, long lists as iterators over server-side
cursors, `batch` rows per round trip. Lists come in the in-memory report's order (ids in code-point
order: COLLATE "C")."""
from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from scheduler.audit.expected import Expected, VersionSpan
from scheduler.audit.ledger import DEFAULT_BATCH
from scheduler.audit.ledger_reader import LedgerReader
from scheduler.audit.reconcile import ABSENT, CLASSIFICATIONS, Classified, LagStats, Unexpected
from scheduler.audit.reconcile_buckets import TARGET_ROWS
from scheduler.audit.reconcile_sql import Loaded, SqlReconciler

_OCCURRENCE_COLUMNS = ("occurrence_id, schedule_id, schedule_version, scheduled_for_ms, available_at_ms, origin, "
                       "classification, deliveries, failed_attempts")


@dataclass(frozen=True)
class ScheduleSummary:
    schedule_id: str
    spans: list[VersionSpan]
    classifications: dict[str, int]


def _classified(row: tuple[Any, ...]) -> Classified:
    oid, sid, version, at_ms, available_ms, origin, classification, deliveries, failed = row
    return Classified(Expected(oid, sid, version, at_ms, available_ms, origin), classification, deliveries, failed)


class StreamedReport:
    """Everything `document` and `summary` need; the figures are read once, the lists on each iteration."""

    def __init__(self, reconciler: SqlReconciler, loaded: Loaded) -> None:
        self._r = reconciler
        self._conn: psycopg.Connection = reconciler.conn
        self.spans = loaded.spans
        self.bucket_count, self.session_count = reconciler.buckets.count, reconciler.session_count
        self.warnings = loaded.warnings
        found: dict[str, int] = dict(self._conn.execute(
            "SELECT classification, count(*) FROM rc_classified GROUP BY 1").fetchall())
        self.expected = sum(found.values())
        self._counts = found
        self.unexpected_count = self._scalar("SELECT count(*) FROM rc_unexpected")
        self.duplicate_count = self._scalar("SELECT count(*) FROM rc_duplicates")
        self.deliveries: Counter[int] = Counter(dict(self._conn.execute(
            "SELECT deliveries, sum(ids)::bigint FROM rc_deliveries GROUP BY 1").fetchall()))
        self.lag, self.catch_up_lag = self._lags()

    def _scalar(self, query: str) -> int:
        row = self._conn.execute(query).fetchone()
        return int(row[0]) if row else 0

    def _stream(self, query: str) -> Iterator[tuple[Any, ...]]:
        with self._conn.cursor(name=f"rc_{uuid.uuid4().hex[:12]}") as cursor:
            cursor.itersize = self._r.batch
            cursor.execute(query)
            yield from cursor

    def counts(self) -> dict[str, int]:
        return {name: self._counts.get(name, 0) for name in CLASSIFICATIONS}

    @property
    def absent_count(self) -> int:
        return self._counts.get(ABSENT, 0)

    @property
    def ok(self) -> bool:
        return not self.unexpected_count and not self.absent_count

    def absent(self) -> Iterator[Classified]:
        return map(_classified, self._stream(
            f"SELECT {_OCCURRENCE_COLUMNS} FROM rc_classified WHERE classification = '{ABSENT}' ORDER BY seq"))

    def occurrences(self) -> Iterator[Classified]:
        return map(_classified, self._stream(f"SELECT {_OCCURRENCE_COLUMNS} FROM rc_classified ORDER BY seq"))

    def unexpected(self) -> Iterator[Unexpected]:
        for oid, sid, version, at_ms, deliveries in self._stream(
                "SELECT occurrence_id, schedule_id, schedule_version, scheduled_for_ms, deliveries FROM rc_unexpected "
                'ORDER BY schedule_id COLLATE "C", scheduled_for_ms, occurrence_id COLLATE "C"'):
            yield Unexpected(oid, sid, version, at_ms, int(deliveries))

    def duplicates(self) -> Iterator[tuple[str, int, int]]:
        for oid, attempt, n in self._stream('SELECT occurrence_id, attempt, deliveries FROM rc_duplicates '
                                            'ORDER BY occurrence_id COLLATE "C", attempt, deliveries'):
            yield oid, attempt, int(n)

    def id_mismatches(self) -> Iterator[str]:
        for (oid,) in self._stream('SELECT DISTINCT occurrence_id COLLATE "C" FROM rc_mismatches ORDER BY 1'):
            yield oid

    def mismatch_count(self) -> int:
        return self._scalar("SELECT count(DISTINCT occurrence_id) FROM rc_mismatches")

    def schedules(self) -> Iterator[ScheduleSummary]:
        """Per schedule in id order: its version spans (held: a few per schedule) and classification counts
        (streamed from PostgreSQL), for every schedule that has either."""
        spans_of: dict[str, list[VersionSpan]] = {}
        for span in self.spans:
            spans_of.setdefault(span.schedule_id, []).append(span)
        counted = self._stream('SELECT schedule_id, classification, count(*) FROM rc_classified '
                               'GROUP BY 1, 2 ORDER BY schedule_id COLLATE "C", classification COLLATE "C"')
        pending = next(counted, None)
        names = iter(sorted(spans_of))
        name = next(names, None)
        while name is not None or pending is not None:
            sid = min(n for n in (name, pending[0] if pending else None) if n is not None)
            counts: dict[str, int] = {}
            while pending is not None and pending[0] == sid:
                counts[pending[1]] = int(pending[2])
                pending = next(counted, None)
            if name == sid:
                name = next(names, None)
            yield ScheduleSummary(sid, spans_of.get(sid, []), counts)

    def _lags(self) -> tuple[dict[str, LagStats], dict[str, LagStats]]:
        """Nearest-rank percentiles (reconcile.percentile) walked over the lag counts the buckets added up,
        in value order: the smallest lag with at least q of the dispatches at or below it."""
        stats: dict[bool, LagStats] = {}
        for replay, total, measured in self._conn.execute(
                "SELECT catch_up, sum(dispatches)::bigint, (sum(dispatches) FILTER (WHERE lag_ms IS NOT NULL))::bigint "
                "FROM rc_lags GROUP BY 1").fetchall():
            if not measured:  # only rows without a timestamp or an available_at: no lag to tell
                continue
            ranks = {q: max(1, math.ceil(q * measured)) for q in (0.5, 0.99)}
            found: dict[float, int] = {}
            seen = most = 0
            for lag, n in self._stream(f"SELECT lag_ms, sum(dispatches)::bigint FROM rc_lags WHERE catch_up = {replay} "
                                       "AND lag_ms IS NOT NULL GROUP BY 1 ORDER BY 1"):
                seen, most = seen + n, lag
                for q, rank in ranks.items():
                    if q not in found and seen >= rank:
                        found[q] = lag
            stats[replay] = LagStats(total, found[0.5], found[0.99], most)
        tenant = self._r.tenant
        return ({tenant: stats[False]} if False in stats else {}), ({tenant: stats[True]} if True in stats else {})


def reconcile_streamed(reader: LedgerReader, tenant: str, from_ms: int, to_ms: int, schedule: str | None = None,
                       batch: int = DEFAULT_BATCH, target_rows: int = TARGET_ROWS, jobs: int = 1) -> StreamedReport:
    """Reconcile [from_ms, to_ms) on the reader's connection: the expected set per schedule into PostgreSQL,
    classified there bucket by bucket (`target_rows` each), on up to `jobs` sessions at once; the report
    reads the answers back (inside this transaction: do not commit before)."""
    with SqlReconciler(reader.conn, reader.schema, tenant, from_ms, to_ms, schedule, batch, target_rows,
                       jobs) as reconciler:
        reconciler.prepare()
        loaded = reconciler.load_expected(reader.histories(tenant, schedule, batch))
        reconciler.load_dead_letters(reader.dead_letters(tenant, from_ms, to_ms, schedule, batch))
        reconciler.classify()
    return StreamedReport(reconciler, loaded)
