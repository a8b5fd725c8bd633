"""Renders a reconciliation Report: the JSON document of `scheduler reconcile --json` and the human summary.

The JSON document is a contract (docs/reconcile.md); keys are only ever added.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from scheduler.audit.reconcile import ABSENT, Classified, LagStats, Report
from scheduler.timing.instants import format_utc, to_datetime


def iso(ms: int) -> str:
    return format_utc(to_datetime(ms))


def _occurrence(c: Classified) -> dict[str, Any]:
    e = c.expected
    return {"occurrence_id": e.occurrence_id, "schedule_id": e.schedule_id, "schedule_version": e.schedule_version,
            "scheduled_for": iso(e.scheduled_for_ms), "scheduled_for_ms": e.scheduled_for_ms,
            "available_at_ms": e.available_at_ms, "origin": e.origin, "classification": c.classification,
            "deliveries": c.deliveries, "failed_attempts": c.attempts_failed}


def _lag(stats: dict[str, LagStats]) -> dict[str, dict[str, int]]:
    return {t: {"count": s.count, "p50": s.p50_ms, "p99": s.p99_ms, "max": s.max_ms} for t, s in sorted(stats.items())}


def _schedules(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = defaultdict(lambda: {"versions": [], "classifications": {}})
    for span in report.spans:
        out[span.schedule_id]["versions"].append({
            "version": span.version, "state": span.state, "accepted_at_ms": span.accepted_at_ms,
            "superseded_at_ms": span.superseded_at_ms})
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for c in report.occurrences:
        per[c.expected.schedule_id][c.classification] += 1
    for sid, counts in per.items():
        out[sid]["classifications"] = dict(sorted(counts.items()))
    return dict(sorted(out.items()))


def document(report: Report, *, tenant: str, schedule: str | None, from_ms: int, to_ms: int, schema: str,
             every_occurrence: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "tenant": tenant, "schedule": schedule, "from": iso(from_ms), "to": iso(to_ms), "from_ms": from_ms,
        "to_ms": to_ms, "schema": schema, "ok": report.ok, "expected": len(report.occurrences),
        "classifications": report.counts(),
        "absent": [_occurrence(c) for c in report.absent()],
        "unexpected": [{"occurrence_id": u.occurrence_id, "schedule_id": u.schedule_id,
                        "schedule_version": u.schedule_version, "scheduled_for": iso(u.scheduled_for_ms),
                        "scheduled_for_ms": u.scheduled_for_ms, "deliveries": u.deliveries} for u in report.unexpected],
        "deliveries": {
            "per_id": {str(n): ids for n, ids in sorted(report.deliveries.items())},
            "duplicates": [{"occurrence_id": oid, "attempt": attempt, "deliveries": n}
                           for oid, attempt, n in report.duplicates],
            "id_mismatches": sorted({d.occurrence_id for d in report.id_mismatches}),
        },
        "lag_ms": _lag(report.lag), "catch_up_lag_ms": _lag(report.catch_up_lag),
        "schedules": _schedules(report), "warnings": report.warnings,
    }
    if every_occurrence:
        doc["occurrences"] = [_occurrence(c) for c in report.occurrences]
    return doc


def _lag_line(label: str, tenant: str, s: LagStats) -> str:
    return f"{label} {tenant}: p50 {s.p50_ms} ms, p99 {s.p99_ms} ms, max {s.max_ms} ms ({s.count} dispatches)"


def summary(doc: dict[str, Any], report: Report) -> list[str]:
    scope = doc["schedule"] or f"all {len(doc['schedules'])} schedules"
    lines = [f"reconcile tenant {doc['tenant']} [{doc['from']}, {doc['to']}) {scope} (ledger schema {doc['schema']})",
             f"expected occurrences: {doc['expected']}"]
    width = max(map(len, doc["classifications"]))
    lines += [f"  {name:<{width}}  {n}" for name, n in doc["classifications"].items()]
    lines.append(f"unexpected (dispatched, not expected): {len(doc['unexpected'])}")
    again = sum(ids for n, ids in report.deliveries.items() if n > 1)
    lines.append(f"deliveries: {sum(report.deliveries.values())} ids dispatched, {again} more than once "
                 f"(retries, re-runs, duplicates); {len(report.duplicates)} ids delivered twice for one attempt; "
                 f"{len(doc['deliveries']['id_mismatches'])} ids not matching the recipe")
    lines += [_lag_line("enqueue lag", t, s) for t, s in sorted(report.lag.items())]
    lines += [_lag_line("catch-up lag", t, s) for t, s in sorted(report.catch_up_lag.items())]
    lines += [f"warning: {w}" for w in report.warnings]
    lines += [f"{ABSENT} {a['occurrence_id']} schedule={a['schedule_id']} version={a['schedule_version']} "
              f"scheduled_for={a['scheduled_for']} origin={a['origin']}" for a in doc["absent"]]
    lines += [f"UNEXPECTED {u['occurrence_id']} schedule={u['schedule_id']} version={u['schedule_version']} "
              f"scheduled_for={u['scheduled_for']} deliveries={u['deliveries']}" for u in doc["unexpected"]]
    lines += [f"DUPLICATE {d['occurrence_id']} attempt={d['attempt']} deliveries={d['deliveries']}"
              for d in doc["deliveries"]["duplicates"]]
    verdict = "OK: nothing absent, nothing unexpected" if report.ok else \
        f"FAILED: {len(doc['absent'])} absent, {len(doc['unexpected'])} unexpected"
    lines.append(verdict)
    return lines
