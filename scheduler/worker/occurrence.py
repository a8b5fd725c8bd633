"""What a handler receives: the occurrence, in Python types, and the context of its attempt."""
from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def from_ms(epoch_ms: int) -> datetime:
    """Exact conversion (no float rounding), so scheduled_for survives a round trip."""
    return EPOCH + timedelta(milliseconds=epoch_ms)


def to_ms(instant: datetime) -> int:
    return (instant - EPOCH) // _MS


@dataclass(frozen=True)
class Occurrence:
    """One fire of a schedule, as decoded from an Occurrence record.

    `priority` is the lower-case name used in topic names ("high", "normal", "low").
    """

    occurrence_id: str
    schedule_id: str
    tenant: str
    schedule_version: int
    scheduled_for: datetime
    available_at: datetime
    attempt: int
    payload: bytes
    priority: str
    catch_up: bool
    dst_rule: str | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Occurrence:
        return cls(
            occurrence_id=record["occurrence_id"],
            schedule_id=record["schedule_id"],
            tenant=record["tenant"],
            schedule_version=record["schedule_version"],
            scheduled_for=from_ms(record["scheduled_for_ms"]),
            available_at=from_ms(record["available_at_ms"]),
            attempt=record.get("attempt", 1),
            payload=record.get("payload", b""),
            priority=str(record.get("priority", "NORMAL")).lower(),
            catch_up=record.get("catch_up", False),
            dst_rule=record.get("dst_rule"),
        )


@dataclass(frozen=True)
class AttemptContext:
    """Per-attempt context: the token reported in the attempt's events, and a cooperative stop signal.

    `cancelled` is set when the worker shuts down or when the schedule view shows the schedule
    cancelled or deleted while the handler runs. Checking it is up to the handler: side effects
    already done cannot be undone by the scheduler.
    """

    attempt_token: str
    cancelled: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def fresh(cls) -> AttemptContext:
        return cls(attempt_token=str(uuid.uuid4()))
