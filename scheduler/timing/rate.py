"""Fixed-rate schedules: anchor + k * period in elapsed time, never shifted by DST.

"every 24h" is 86,400 real seconds, so across a DST change its local hour moves;
a local daily time is a cron schedule instead (see the seeds).
"""
from __future__ import annotations

import re
from collections.abc import Iterator

from scheduler.timing.errors import SpecError
from scheduler.timing.instants import US_PER_S

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_EXPRESSION = re.compile(r"^every\s*((?:\d+\s*[smhd]\s*)+)$", re.IGNORECASE)
_PART = re.compile(r"(\d+)\s*([smhd])", re.IGNORECASE)
MAX_US = 253_402_300_799 * US_PER_S  # 9999-12-31T23:59:59Z


def parse_period(expression: str) -> int:
    """`every 90m`, `every 24h`, `every 1h30m`, `every 45s`, `every 7d` -> period in microseconds."""
    match = _EXPRESSION.match(expression.strip()) if isinstance(expression, str) else None
    if not match:
        raise SpecError("expression", f"a rate is written 'every <n><s|m|h|d>...', got {expression!r}")
    seconds = sum(int(n) * _UNITS[unit.lower()] for n, unit in _PART.findall(match.group(1)))
    if seconds < 1:
        raise SpecError("expression", "the rate period must be at least one second")
    return seconds * US_PER_S


class RateTimeline:
    """Fires anchor + k * period for k >= 0, in epoch microseconds."""

    def __init__(self, anchor: int, period: int):
        self.anchor = anchor
        self.period = period

    def _first_index(self, after: int) -> int:
        return max(0, (after - self.anchor) // self.period + 1)

    def iter_after(self, after: int) -> Iterator[tuple[int, str | None]]:
        instant = self.anchor + self._first_index(after) * self.period
        while instant <= MAX_US:
            yield instant, None
            instant += self.period

    def count(self, after: int, until: int) -> int:
        if until < self.anchor:
            return 0
        return max(0, (min(until, MAX_US) - self.anchor) // self.period - self._first_index(after) + 1)

    def nth(self, after: int, n: int, until: int) -> tuple[int, str | None] | None:
        instant = self.anchor + (self._first_index(after) + n - 1) * self.period
        return (instant, None) if instant <= min(until, MAX_US) else None
