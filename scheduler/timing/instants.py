"""Conversions between aware datetimes, integer epoch units and RFC 3339 text.

The timing code computes on integers (epoch seconds for wall-clock work, epoch
microseconds at the API boundary) because integer arithmetic is exact and fast;
this module is the only place that converts.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAIVE_EPOCH = datetime(1970, 1, 1)
US_PER_S = 1_000_000
US_PER_MS = 1_000

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}:\d{2})?$"
)


def require_aware(value: datetime, name: str) -> datetime:
    """Reject naive datetimes: an instant without an offset is ambiguous."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime")
    return value


def to_us(value: datetime) -> int:
    """Epoch microseconds of an aware datetime."""
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * US_PER_S + delta.microseconds


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def wall_seconds(value: datetime) -> int:
    """Seconds of a naive wall-clock datetime as if it were UTC ("local seconds")."""
    delta = value - NAIVE_EPOCH
    return delta.days * 86_400 + delta.seconds


def truncate_ms(value: datetime) -> datetime:
    """Instants are kept at millisecond precision, the precision of occurrence ids."""
    return value.astimezone(UTC).replace(microsecond=value.microsecond // 1000 * 1000)


def format_utc(value: datetime) -> str:
    """RFC 3339 in UTC with a `Z`; milliseconds only when non-zero."""
    value = value.astimezone(UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond // 1000:03d}"
    return text + "Z"


def utc_offset(moment: datetime) -> timedelta:
    """The UTC offset of an aware datetime (`datetime.utcoffset` is None only for a naive one)."""
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"{moment.isoformat()} has no UTC offset (a naive datetime)")
    return offset


def format_offset(offset: timedelta) -> str:
    """`+05:30` style; seconds appended only for historical LMT offsets."""
    total = int(offset.total_seconds())
    sign = "-" if total < 0 else "+"
    hours, rest = divmod(abs(total), 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{seconds:02d}" if seconds else "")


def parse_datetime_text(text: str) -> datetime:
    """Parse RFC 3339 (offset optional: then the result is naive local wall time)."""
    text = text.strip()
    if not _RFC3339.match(text):
        raise ValueError(f"not an RFC 3339 date-time: {text!r}")
    normalized = text.replace("z", "Z").replace("t", "T").replace(" ", "T")
    if normalized.endswith("Z"):
        normalized = normalized[:-1] + "+00:00"
    if "." in normalized:
        head, _, rest = normalized.partition(".")
        fraction = re.match(r"\d+", rest)  # _RFC3339 matched: never None
        digits = fraction.group(0) if fraction else ""
        normalized = head + "." + (digits + "000000")[:6] + rest[len(digits):]
    return datetime.fromisoformat(normalized)


def parse_instant(text: str) -> datetime:
    """An RFC 3339 instant; an offset (or Z) is required."""
    value = parse_datetime_text(text)
    if value.tzinfo is None:
        raise ValueError(f"instant needs an offset or Z: {text!r}")
    return value.astimezone(UTC)


def to_datetime(ms: int) -> datetime:
    """Epoch milliseconds (the wire's and the engine's unit) as an aware UTC datetime."""
    return EPOCH + timedelta(milliseconds=ms)


def to_ms(instant: datetime) -> int:
    return (instant - EPOCH) // timedelta(milliseconds=1)


def optional_datetime(ms: int | None) -> datetime | None:
    return None if ms is None else to_datetime(ms)
