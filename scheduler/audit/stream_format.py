"""Writes a StreamedReport as `scheduler reconcile` prints it: the JSON document (byte for byte what
`json.dump(document(...), indent=1)` gives for the in-memory report) and the human summary, with the
long lists (absent, unexpected, duplicates, id mismatches, schedules, `--all`'s occurrences) written
as they stream from PostgreSQL, never held."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from scheduler.audit.reconcile import ABSENT, Unexpected
from scheduler.audit.report_format import _lag, _lag_line, _occurrence, iso
from scheduler.audit.streamed_report import ScheduleSummary, StreamedReport


def _nested(value: Any, depth: int) -> str:
    """json.dumps(indent=1) of a value that sits `depth` levels deep in the document."""
    return json.dumps(value, indent=1).replace("\n", "\n" + " " * depth)


def _list(items: Iterable[Any], depth: int) -> Iterator[str]:
    """A JSON list at `depth`, item by item, as json.dumps(indent=1) lays it out ([] when empty)."""
    pad = " " * (depth + 1)
    first = True
    for item in items:
        yield ("[\n" if first else ",\n") + pad + _nested(item, depth + 1)
        first = False
    yield "[]" if first else "\n" + " " * depth + "]"


def _dict(entries: Iterable[tuple[str, Any]], depth: int) -> Iterator[str]:
    pad = " " * (depth + 1)
    first = True
    for key, value in entries:
        yield ("{\n" if first else ",\n") + pad + json.dumps(key) + ": "
        if isinstance(value, Iterator):
            yield from value
        else:
            yield _nested(value, depth + 1)
        first = False
    yield "{}" if first else "\n" + " " * depth + "}"


def _unexpected(u: Unexpected) -> dict[str, Any]:
    return {"occurrence_id": u.occurrence_id, "schedule_id": u.schedule_id, "schedule_version": u.schedule_version,
            "scheduled_for": iso(u.scheduled_for_ms), "scheduled_for_ms": u.scheduled_for_ms,
            "deliveries": u.deliveries}


def _schedule(s: ScheduleSummary) -> dict[str, Any]:
    return {"versions": [{"version": span.version, "state": span.state, "accepted_at_ms": span.accepted_at_ms,
                          "superseded_at_ms": span.superseded_at_ms} for span in s.spans],
            "classifications": dict(sorted(s.classifications.items()))}


def write_json(out: TextIO, report: StreamedReport, *, tenant: str, schedule: str | None, from_ms: int, to_ms: int,
               schema: str, every_occurrence: bool = False) -> None:
    """The document of docs/reconcile.md, keys in its order, then a newline."""
    deliveries = _dict([
        ("per_id", {str(n): ids for n, ids in sorted(report.deliveries.items())}),
        ("duplicates", _list(({"occurrence_id": oid, "attempt": attempt, "deliveries": n}
                              for oid, attempt, n in report.duplicates()), 2)),
        ("id_mismatches", _list(report.id_mismatches(), 2)),
    ], 1)
    entries: list[tuple[str, Any]] = [
        ("tenant", tenant), ("schedule", schedule), ("from", iso(from_ms)), ("to", iso(to_ms)), ("from_ms", from_ms),
        ("to_ms", to_ms), ("schema", schema), ("ok", report.ok), ("expected", report.expected),
        ("classifications", report.counts()),
        ("absent", _list(map(_occurrence, report.absent()), 1)),
        ("unexpected", _list(map(_unexpected, report.unexpected()), 1)),
        ("deliveries", deliveries),
        ("lag_ms", _lag(report.lag)), ("catch_up_lag_ms", _lag(report.catch_up_lag)),
        ("schedules", _dict(((s.schedule_id, _schedule(s)) for s in report.schedules()), 1)),
        ("warnings", report.warnings),
    ]
    if every_occurrence:
        entries.append(("occurrences", _list(map(_occurrence, report.occurrences()), 1)))
    for text in _dict(entries, 0):
        out.write(text)
    out.write("\n")


def write_summary(out: TextIO, report: StreamedReport, *, tenant: str, schedule: str | None, from_ms: int,
                  to_ms: int, schema: str) -> None:
    """The human output of report_format.summary, line by line."""
    def line(text: str) -> None:
        out.write(text + "\n")

    scope = schedule or f"all {sum(1 for _ in report.schedules())} schedules"
    line(f"reconcile tenant {tenant} [{iso(from_ms)}, {iso(to_ms)}) {scope} (ledger schema {schema})")
    line(f"expected occurrences: {report.expected}")
    counts = report.counts()
    width = max(map(len, counts))
    for name, n in counts.items():
        line(f"  {name:<{width}}  {n}")
    line(f"unexpected (dispatched, not expected): {report.unexpected_count}")
    again = sum(ids for n, ids in report.deliveries.items() if n > 1)
    line(f"deliveries: {sum(report.deliveries.values())} ids dispatched, {again} more than once "
         f"(retries, re-runs, duplicates); {report.duplicate_count} ids delivered twice for one attempt; "
         f"{report.mismatch_count()} ids not matching the recipe")
    for t, s in sorted(report.lag.items()):
        line(_lag_line("enqueue lag", t, s))
    for t, s in sorted(report.catch_up_lag.items()):
        line(_lag_line("catch-up lag", t, s))
    for warning in report.warnings:
        line(f"warning: {warning}")
    for c in report.absent():
        a = _occurrence(c)
        line(f"{ABSENT} {a['occurrence_id']} schedule={a['schedule_id']} version={a['schedule_version']} "
             f"scheduled_for={a['scheduled_for']} origin={a['origin']}")
    for u in report.unexpected():
        line(f"UNEXPECTED {u.occurrence_id} schedule={u.schedule_id} version={u.schedule_version} "
             f"scheduled_for={iso(u.scheduled_for_ms)} deliveries={u.deliveries}")
    for oid, attempt, n in report.duplicates():
        line(f"DUPLICATE {oid} attempt={attempt} deliveries={n}")
    line("OK: nothing absent, nothing unexpected" if report.ok else
         f"FAILED: {report.absent_count} absent, {report.unexpected_count} unexpected")
