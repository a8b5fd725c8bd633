"""Conversions between the engine's epoch milliseconds and the time module's aware datetimes."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_datetime(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def to_ms(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(milliseconds=1)


def optional_datetime(ms: int | None) -> datetime | None:
    return None if ms is None else to_datetime(ms)
