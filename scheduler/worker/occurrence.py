"""What a handler receives: the occurrence, in Python types, and the context of its attempt."""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.wire import vocabulary

DEFAULT_LEASE_MS: int = vocabulary.field_defaults("Occurrence")["lease_ms"]
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
    lease_ms: int = DEFAULT_LEASE_MS

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
            lease_ms=record.get("lease_ms", DEFAULT_LEASE_MS),
        )


@dataclass(eq=False)  # one context per attempt: compared and hashed by identity
class AttemptContext:
    """Per-attempt context: the token reported in the attempt's events, and a cooperative stop signal.

    `cancelled` is set when the worker shuts down, when the schedule view shows the schedule
    cancelled or deleted while the handler runs, and when the attempt lost its lease (then
    `lease_lost` is set too: the scheduler has given the occurrence to a new attempt, and this
    one's result will be refused). Checking it is up to the handler: side effects already done
    cannot be undone by the scheduler.
    """

    attempt_token: str
    cancelled: threading.Event = field(default_factory=threading.Event)
    lease_lost: threading.Event = field(default_factory=threading.Event)
    renew: Callable[[str | None], bool] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def fresh(cls) -> AttemptContext:
        return cls(attempt_token=str(uuid.uuid4()))

    def heartbeat(self, progress: str | None = None) -> bool:
        """Renew the lease now, with optional progress details (shown in the occurrence's status).

        The worker already heartbeats every lease/3 on its own; call this for a finer progress
        report. False when the lease is lost (stop: the result will be refused) or the
        heartbeat could not be written (the next one retries)."""
        if self.lease_lost.is_set() or self.renew is None:
            return False
        return self.renew(progress)

    def lose_lease(self) -> None:
        self.lease_lost.set()
        self.cancelled.set()
