"""A schedule's recent occurrences (run history: status, attempts, lag), for `scheduler occurrences list` and
the console's schedule page: from the audit ledger when one is configured (everything it recorded), else
from the occurrence-status view (what the compacted changelog still holds).

The lag is how late the occurrence began: in the view, from scheduled_for to its first attempt's start; in
the ledger, from when it was due (available_at, else scheduled_for) to its dispatch.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Record = dict[str, Any]

ROW_FIELDS = ("occurrence_id", "scheduled_for_ms", "status", "attempts", "lag_ms")
# What the ledger calls a status besides the view's OccurrenceState symbols (scheduler/audit/history.py).
LEDGER_STATUSES = ("FAILED",)


def view_row(status: Mapping[str, Any]) -> Record:
    """One OccurrenceStatus as a history row."""
    started = next((a["at_ms"] for a in status["attempts"] if a["kind"] == "STARTED"), None)
    return {"occurrence_id": status["occurrence_id"], "scheduled_for_ms": status["scheduled_for_ms"],
            "status": status["state"], "attempts": status["attempt"],
            "lag_ms": None if started is None else max(0, started - status["scheduled_for_ms"])}


def ledger_row(row: Record) -> Record:
    """One row of `Ledger.occurrences` with only the fields a view row has."""
    return {name: row[name] for name in ROW_FIELDS}


def select(rows: Iterable[Record], since_ms: int | None, status: str | None, limit: int) -> list[Record]:
    """The newest `limit` rows scheduled at `since_ms` or later with `status` (None: any)."""
    chosen = [row for row in rows if (since_ms is None or row["scheduled_for_ms"] >= since_ms)
              and (status is None or row["status"] == status)]
    chosen.sort(key=lambda row: (row["scheduled_for_ms"], row["occurrence_id"]), reverse=True)
    return chosen[:limit]
