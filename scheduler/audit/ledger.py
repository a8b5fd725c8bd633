"""The ledger rows the reconciler reads (docs/reconcile.md), as plain values: no database here.

Each class holds the columns of one ledger table (LEDGER contract: Avro field names, *_ms epoch
milliseconds) that reconciliation needs; `ledger_reader` fills them from PostgreSQL and the unit
tests build them by hand.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class VersionRow:
    """schedule_versions: the latest ScheduleState record of one (schedule_id, version)."""

    schedule_id: str
    tenant: str
    version: int
    state: str
    spec: dict[str, Any]
    fired_count: int
    next_fire_ms: int | None = None
    pending: tuple[dict[str, Any], ...] = ()
    created_at_ms: int = 0
    updated_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class ResultRow:
    """command_results: an ACCEPTED CommandResult (rejected ones change nothing and are not read)."""

    schedule_id: str
    command_type: str
    version: int | None
    processed_at_ms: int
    next_fires_ms: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DispatchRow:
    """dispatches: one Occurrence record as delivered (a redelivery is a second row)."""

    occurrence_id: str
    schedule_id: str
    schedule_version: int
    scheduled_for_ms: int
    available_at_ms: int
    enqueued_at_ms: int  # the Kafka record timestamp
    attempt: int = 1
    catch_up: bool = False
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class EventRow:
    """occurrence_events: an occurrence (or a summarised range of them) the scheduler did not send."""

    schedule_id: str
    schedule_version: int
    kind: str
    recorded_at_ms: int
    occurrence_id: str | None = None
    scheduled_for_ms: int | None = None
    range_first_ms: int | None = None
    range_last_ms: int | None = None
    count: int = 1


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """attempts: one step a worker reported."""

    occurrence_id: str
    attempt: int
    kind: str
    at_ms: int


# Rows per COPY into the ledger's database and per fetch from it when reconciling: the reconciler's
# memory is a few batches, whatever the range (`scheduler reconcile --batch`).
DEFAULT_BATCH = 20_000

FINAL_STEPS = ("SUCCEEDED", "SKIPPED_STALE")
LIVE_STEPS = ("STARTED", "HEARTBEAT")
FAILED_STEP = "FAILED"


@dataclass(frozen=True, slots=True)
class AttemptSummary:
    """All the attempt steps of one occurrence, as reconciliation needs them (the reader has PostgreSQL
    aggregate them: a million occurrences have several million steps)."""

    occurrence_id: str
    final_kind: str | None  # the latest SUCCEEDED / SKIPPED_STALE step, by at_ms
    final_at_ms: int | None
    failed: int  # FAILED steps
    max_failed_attempt: int | None
    started: bool  # some STARTED or HEARTBEAT


def summarize(rows: Iterable[AttemptRow]) -> list[AttemptSummary]:
    """What the reader's GROUP BY computes, in Python."""
    steps: dict[str, list[AttemptRow]] = defaultdict(list)
    for row in rows:
        steps[row.occurrence_id].append(row)
    out = []
    for oid, found in steps.items():
        finals = sorted((r.at_ms, r.kind) for r in found if r.kind in FINAL_STEPS)
        failed = [r.attempt for r in found if r.kind == FAILED_STEP]
        out.append(AttemptSummary(oid, finals[-1][1] if finals else None, finals[-1][0] if finals else None,
                                  len(failed), max(failed, default=None), any(r.kind in LIVE_STEPS for r in found)))
    return out


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    occurrence_id: str
    dead_at_ms: int


@dataclass
class Ledger:
    """Everything read for one tenant, range and (optionally) schedule."""

    versions: list[VersionRow] = field(default_factory=list)
    results: list[ResultRow] = field(default_factory=list)
    dispatches: list[DispatchRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    attempts: list[AttemptSummary] = field(default_factory=list)
    dead_letters: list[DeadLetterRow] = field(default_factory=list)
