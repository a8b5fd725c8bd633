"""Schedule specs: what a schedule means in time, validated once at the API edge."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.timing.cron import MONTH_END_OPTIONS, parse_cron
from scheduler.timing.dst import GAP_OPTIONS, OVERLAP_OPTIONS
from scheduler.timing.errors import SpecError
from scheduler.timing.instants import truncate_ms
from scheduler.timing.once import parse_once
from scheduler.timing.rate import parse_period
from scheduler.timing.rrule_days import compile_rule
from scheduler.timing.zones import load_zone

KINDS = ("once", "cron", "rate", "rrule")

__all__ = ["KINDS", "ScheduleSpec", "SpecError", "parse_spec"]


@dataclass(frozen=True)
class ScheduleSpec:
    """Expression and zone as the user gave them; instants aware UTC at millisecond precision.

    Fires lie in [start_at, end_at] (both inclusive). max_fires counts every
    occurrence of the schedule, including ones recorded as missed.
    """

    kind: str
    expression: str
    time_zone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_fires: int | None = None
    dst_gap: str = "skip"
    dst_overlap: str = "first"
    anchor_at: datetime | None = None
    month_end: str = "skip"


def _instant(field: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise SpecError(field, "must be a timezone-aware datetime")
    return truncate_ms(value)


def parse_spec(
    kind: str,
    expression: str,
    time_zone: str = "UTC",
    *,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    max_fires: int | None = None,
    dst_gap: str = "skip",
    dst_overlap: str = "first",
    anchor_at: datetime | None = None,
    month_end: str = "skip",
) -> ScheduleSpec:
    """Validate every field (raising SpecError naming it) and build a ScheduleSpec.

    A rate schedule's anchor defaults to start_at; other kinds take no anchor.
    month_end (skip | clamp) only means something to cron and rrule day-of-month values.
    """
    if kind not in KINDS:
        raise SpecError("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    load_zone(time_zone)
    if dst_gap not in GAP_OPTIONS:
        raise SpecError("dst_gap", f"must be one of {', '.join(GAP_OPTIONS)}, got {dst_gap!r}")
    if dst_overlap not in OVERLAP_OPTIONS:
        raise SpecError("dst_overlap", f"must be one of {', '.join(OVERLAP_OPTIONS)}, got {dst_overlap!r}")
    start = _instant("start_at", start_at)
    end = _instant("end_at", end_at)
    anchor = _instant("anchor_at", anchor_at)
    if start is not None and end is not None and end < start:
        raise SpecError("end_at", "must not be before start_at")
    if max_fires is not None and (isinstance(max_fires, bool) or not isinstance(max_fires, int) or max_fires < 1):
        raise SpecError("max_fires", f"must be a positive integer, got {max_fires!r}")
    if month_end not in MONTH_END_OPTIONS:
        raise SpecError("month_end", f"must be one of {', '.join(MONTH_END_OPTIONS)}, got {month_end!r}")
    if not isinstance(expression, str):
        raise SpecError("expression", "must be a string")
    if kind == "cron":
        parse_cron(expression, month_end)
    elif kind == "rrule":
        compile_rule(expression, time_zone, month_end)
    elif kind == "once":
        parse_once(expression)
    else:
        parse_period(expression)
    if kind == "rate":
        anchor = anchor or start
        if anchor is None:
            raise SpecError("anchor_at", "a rate schedule needs anchor_at (or start_at)")
    elif anchor is not None:
        raise SpecError("anchor_at", "only rate schedules have an anchor")
    return ScheduleSpec(kind, expression, time_zone, start, end, max_fires, dst_gap, dst_overlap, anchor, month_end)
