"""The ledger rows the reconciler reads (docs/reconcile.md), as plain values: no database here.

Each class holds the columns of one ledger table (LEDGER contract: Avro field names, *_ms epoch
milliseconds) that reconciliation needs; `ledger_reader` fills them from PostgreSQL and the unit
tests build them by hand.
"""
from __future__ import annotations

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
    attempts: list[AttemptRow] = field(default_factory=list)
    dead_letters: list[DeadLetterRow] = field(default_factory=list)
