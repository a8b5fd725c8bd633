"""One-shot schedules: an RFC 3339 instant, or a local date-time in the spec's zone.

A local date-time goes through the same DST contract as cron wall times: in a
gap it is skipped (no fire at all) or shifted; when repeated it fires at the
first, the last or both occurrences.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from scheduler.timing.dst import resolve_wall
from scheduler.timing.errors import SpecError
from scheduler.timing.instants import (
    US_PER_S,
    parse_datetime_text,
    to_us,
    truncate_ms,
    wall_seconds,
)
from scheduler.timing.zones import MAX_OFFSET, zone_rules


def parse_once(expression: str) -> datetime:
    """Aware UTC datetime for an instant, naive for a local date-time (ms precision)."""
    try:
        value = parse_datetime_text(expression) if isinstance(expression, str) else None
    except ValueError as exc:
        raise SpecError("expression", str(exc)) from exc
    if value is None:
        raise SpecError("expression", "a one-shot needs an RFC 3339 date-time")
    if value.tzinfo is None:
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return truncate_ms(value)


def once_fires(expression: str, time_zone: str, gap: str, overlap: str) -> list[tuple[int, str | None]]:
    """The one-shot's instants in epoch microseconds (0, 1 or 2 of them)."""
    value = parse_once(expression)
    if value.tzinfo is not None:
        return [(to_us(value), None)]
    wall = wall_seconds(value)
    offsets, times = zone_rules(time_zone).window(wall - MAX_OFFSET, wall + MAX_OFFSET)
    return [(s * US_PER_S + value.microsecond, rule) for s, rule in resolve_wall(wall, offsets, times, gap, overlap)]


class OnceTimeline:
    def __init__(self, fires: list[tuple[int, str | None]]):
        self.fires = fires

    def iter_after(self, after: int) -> Iterator[tuple[int, str | None]]:
        return (f for f in self.fires if f[0] > after)

    def count(self, after: int, until: int) -> int:
        return sum(1 for f in self.fires if after < f[0] <= until)

    def nth(self, after: int, n: int, until: int) -> tuple[int, str | None] | None:
        later = [f for f in self.fires if after < f[0] <= until]
        return later[n - 1] if len(later) >= n else None
