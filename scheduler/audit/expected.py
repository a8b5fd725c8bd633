"""The occurrences a schedule should have produced in a range, recomputed from its versions: pure.

Each version owns the fires of its spec from the instant it was accepted (its first ACCEPTED
CommandResult) up to and including the instant the next version was accepted; the engine
materializes a new version strictly after that instant (scheduler/engine/command_policy.py), so no
fire belongs to two versions and none falls between them. A fire the old version owned but had
not dispatched when it was superseded is still expected: the engine's INVALIDATED / CANCELED /
SKIPPED_PAUSED event explains it, and without one it is ABSENT.

* ACTIVE (or later COMPLETED) version: the spec's fires after its cursor - the accepted instant,
  or for a CREATEd one-shot `first_cursor_ms` (a just-passed instant still fires, late) - with
  max_fires counted from the previous version's fired_count, which the engine carries over.
* PAUSED version: its fires are expected SKIPPED_PAUSED (origin PAUSED). The engine records those
  it had materialized when paused (old version's ids) and, on RESUME, the rest (the new version's
  ids); a pause never resumed records nothing, and not firing is then still right.
* CANCELED and never-admitted (PENDING) versions own nothing.
* TRIGGER and BACKFILL results name occurrences outside the recurrence: their instants and
  version (ids are occurrence_id(schedule, version, instant)). A RERUN re-delivers an existing id.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from scheduler.audit.ledger import ResultRow, VersionRow
from scheduler.engine.command_policy import first_cursor_ms
from scheduler.timing.errors import SpecError
from scheduler.timing.fires import count_fires, iter_instants
from scheduler.timing.instants import to_datetime
from scheduler.timing.jitter import available_at_ms
from scheduler.timing.occurrence_id import occurrence_id, occurrence_ids
from scheduler.timing.spec_record import compile_spec

SCHEDULE, PAUSED, TRIGGER, BACKFILL = "SCHEDULE", "PAUSED", "TRIGGER", "BACKFILL"
MANUAL = (TRIGGER, BACKFILL)
OWNS_FIRES = frozenset({"ACTIVE", "COMPLETED"})


@dataclass(frozen=True, slots=True)
class Expected:
    occurrence_id: str
    schedule_id: str
    schedule_version: int
    scheduled_for_ms: int
    available_at_ms: int
    origin: str  # SCHEDULE, PAUSED, TRIGGER or BACKFILL


@dataclass(frozen=True, slots=True)
class VersionSpan:
    """When a version was in force: (accepted_at_ms, superseded_at_ms], open when superseded is None."""

    schedule_id: str
    version: int
    state: str
    accepted_at_ms: int
    superseded_at_ms: int | None


def accepted_instants(results: Iterable[ResultRow]) -> dict[tuple[str, int], int]:
    """(schedule, version) -> the first ACCEPTED result carrying it: the instant the version began.
    Later results with the same version (TRIGGER, a repeated PAUSE, a repeated CREATE) come after it."""
    first: dict[tuple[str, int], int] = {}
    for result in results:
        if result.version is None:
            continue
        key = (result.schedule_id, result.version)
        if key not in first or result.processed_at_ms < first[key]:
            first[key] = result.processed_at_ms
    return first


def version_spans(versions: Iterable[VersionRow], results: Iterable[ResultRow]) -> tuple[list[VersionSpan], list[str]]:
    accepted = accepted_instants(results)
    by_schedule: dict[str, dict[int, VersionRow]] = defaultdict(dict)
    for row in versions:
        by_schedule[row.schedule_id][row.version] = row
    warnings: list[str] = []
    spans: list[VersionSpan] = []
    for sid, rows in sorted(by_schedule.items()):
        numbers = sorted(set(rows) | {v for s, v in accepted if s == sid})
        starts: dict[int, int] = {}
        for v in numbers:
            if (sid, v) in accepted:
                starts[v] = accepted[(sid, v)]
            elif v in rows and rows[v].state != "PENDING":
                # No result sunk (yet): the row's own instants are the engine's now_ms of that change.
                starts[v] = rows[v].created_at_ms if v == 1 else rows[v].updated_at_ms
                warnings.append(f"{sid} v{v}: no ACCEPTED command result; its start is taken from the version row")
        ordered = [v for v in numbers if v in starts]
        for index, v in enumerate(ordered):
            if v not in rows:
                warnings.append(f"{sid} v{v}: accepted but no schedule_versions row; its fires cannot be recomputed")
                continue
            nxt = starts[ordered[index + 1]] if index + 1 < len(ordered) else None
            spans.append(VersionSpan(sid, v, rows[v].state, starts[v], nxt))
        for v in numbers:
            if v > 1 and v in starts and v - 1 not in rows:
                warnings.append(f"{sid} v{v}: no row for v{v - 1}; max_fires counted from 0")
    return spans, warnings


def _fires(row: VersionRow, cursor_ms: int, upper_ms: int, from_ms: int, fired_before: int,
           origin: str) -> Iterator[Expected]:
    """Fires of `row`'s spec in (cursor, upper] that lie at or after from_ms, one at a time. Fires before
    the window are counted (for max_fires), day by day, never enumerated."""
    start_ms = max(cursor_ms, from_ms - 1)
    if upper_ms <= start_ms:
        return
    spec = compile_spec(row.spec)
    if start_ms > cursor_ms:
        fired_before += count_fires(spec, to_datetime(cursor_ms), to_datetime(start_ms), fired_before)
    window_ms = row.spec.get("flexible_window_ms") or 0
    sid, version = row.schedule_id, row.version
    id_of = occurrence_ids(sid, version)
    for instant_us in iter_instants(spec, start_ms * 1000, upper_ms * 1000, fired_before):
        at_ms = instant_us // 1000
        oid = id_of(at_ms)
        yield Expected(oid, sid, version, at_ms, available_at_ms(oid, at_ms, window_ms) if window_ms else at_ms, origin)


def _span_occurrences(span: VersionSpan, rows: dict[int, VersionRow], from_ms: int, to_ms_: int) -> Iterator[Expected]:
    row = rows[span.version]
    previous = rows.get(span.version - 1)
    upper = to_ms_ - 1 if span.superseded_at_ms is None else min(span.superseded_at_ms, to_ms_ - 1)
    if row.state in OWNS_FIRES:
        cursor = first_cursor_ms(row.spec, span.accepted_at_ms) if span.version == 1 else span.accepted_at_ms
        fired_before = previous.fired_count if previous is not None else 0
        yield from _fires(row, cursor, upper, from_ms, fired_before, SCHEDULE)
    elif row.state == "PAUSED":
        # The previous version's pending fires after the pause were dropped, yet still counted.
        dropped = sum(1 for ref in previous.pending if ref["scheduled_for_ms"] > span.accepted_at_ms) if previous else 0
        fired_before = previous.fired_count - dropped if previous is not None else 0
        yield from _fires(row, span.accepted_at_ms, upper, from_ms, fired_before, PAUSED)


def _manual(results: Iterable[ResultRow], known: set[str], from_ms: int, to_ms_: int) -> Iterator[Expected]:
    for result in results:
        if result.command_type not in MANUAL or result.version is None or result.schedule_id not in known:
            continue
        instants = result.next_fires_ms if result.command_type == BACKFILL else (result.processed_at_ms,)
        for at_ms in instants:
            if from_ms <= at_ms < to_ms_:
                oid = occurrence_id(result.schedule_id, result.version, to_datetime(at_ms))
                yield Expected(oid, result.schedule_id, result.version, at_ms, at_ms, result.command_type)


def _guarded(span: VersionSpan, occurrences: Iterator[Expected], warnings: list[str]) -> Iterator[Expected]:
    """A spec that does not compile is a warning, not the end of the run (it surfaces on first use)."""
    try:
        yield from occurrences
    except SpecError as exc:
        warnings.append(f"{span.schedule_id} v{span.version}: spec does not compile ({exc.field}: {exc.message})")


def _by_time(item: Expected) -> tuple[int, int]:
    return item.scheduled_for_ms, item.schedule_version


def schedule_occurrences(spans: list[VersionSpan], rows: dict[int, VersionRow], results: list[ResultRow],
                         from_ms: int, to_ms_: int, warnings: list[str]) -> Iterator[Expected]:
    """One schedule's expected occurrences in [from_ms, to_ms_), one per id, by (instant, version), lazily:
    each span's fires come in time order, so a merge orders them without holding the range. An id that
    two sources name (a TRIGGER at a fire of the same version) keeps the recurrence's item."""
    sources = [_guarded(span, _span_occurrences(span, rows, from_ms, to_ms_), warnings) for span in spans]
    known = {row.schedule_id for row in rows.values()}
    manual = sorted(_manual(results, known, from_ms, to_ms_), key=_by_time)
    if not manual:  # one span per version, and a version's instants strictly increase: no id twice
        yield from sources[0] if len(sources) == 1 else heapq.merge(*sources, key=_by_time)
        return
    at_instant: set[str] = set()
    instant = None
    for item in heapq.merge(*sources, manual, key=_by_time):
        if item.scheduled_for_ms != instant:
            instant, at_instant = item.scheduled_for_ms, set()
        if item.occurrence_id not in at_instant:
            at_instant.add(item.occurrence_id)
            yield item


def expected_occurrences(versions: list[VersionRow], results: list[ResultRow], from_ms: int,
                         to_ms_: int) -> tuple[list[Expected], list[VersionSpan], list[str]]:
    """Every occurrence expected with scheduled_for in [from_ms, to_ms_), one per id, by schedule and time:
    the in-memory form of `schedule_occurrences`, over all the tenant's schedules at once."""
    spans, warnings = version_spans(versions, results)
    rows: dict[str, dict[int, VersionRow]] = defaultdict(dict)
    for row in versions:
        rows[row.schedule_id][row.version] = row
    spans_of: dict[str, list[VersionSpan]] = defaultdict(list)
    for span in spans:
        spans_of[span.schedule_id].append(span)
    results_of: dict[str, list[ResultRow]] = defaultdict(list)
    for result in results:
        results_of[result.schedule_id].append(result)
    found: list[Expected] = []
    for sid in sorted(rows):
        found.extend(schedule_occurrences(spans_of[sid], rows[sid], results_of[sid], from_ms, to_ms_, warnings))
    return found, spans, warnings
