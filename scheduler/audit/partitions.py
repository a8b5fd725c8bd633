"""The daily partitions of the ledger's occurrence tables, as plain values: which UTC days `audit ensure`
creates and which `audit retain` may drop. No database here, so the rules are unit tested with `now`
passed in (tests/unit/audit/test_partitions.py); `partition_db` applies them.

Days are UTC days in epoch milliseconds: a day is exactly 86,400,000 ms, so daylight-saving changes of
any zone never make a partition 23 or 25 hours long, and a range's bounds are plain integers that
PostgreSQL compares with `scheduled_for_ms` directly."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

DAY_MS = 86_400_000
DAYS_BEFORE = 1  # yesterday: a late record of the day just closed still finds its partition
DAYS_AHEAD = 7  # a week of headroom, so a missed daily run never sends a day's rows to DEFAULT
PARTITIONED = ("dispatches", "attempts")  # the occurrence tables partitioned on scheduled_for_ms
PARTITION_COLUMN = "scheduled_for_ms"

DROP, KEEP, NOT_DAILY = "drop", "keep", "not daily"


@dataclass(frozen=True, order=True)
class DayRange:
    """[start_ms, end_ms): one partition's bounds."""

    start_ms: int
    end_ms: int

    @property
    def suffix(self) -> str:
        """The partition's name after `<table>_`: `p20261207` for the UTC day starting at start_ms."""
        return "p" + datetime.fromtimestamp(self.start_ms / 1000, UTC).strftime("%Y%m%d")

    @property
    def is_daily(self) -> bool:
        return self.start_ms % DAY_MS == 0 and self.end_ms - self.start_ms == DAY_MS

    def label(self) -> str:
        start = datetime.fromtimestamp(self.start_ms / 1000, UTC)
        return f"{start:%Y-%m-%d} [{self.start_ms}, {self.end_ms})"


def day_of(instant_ms: int) -> DayRange:
    """The UTC day holding `instant_ms` (floor division: an instant before 1970 is in its own day too)."""
    start = instant_ms // DAY_MS * DAY_MS
    return DayRange(start, start + DAY_MS)


def days_to_create(now_ms: int, before: int = DAYS_BEFORE, ahead: int = DAYS_AHEAD) -> list[DayRange]:
    """Yesterday .. today + `ahead` days (both included): the partitions ensure and retain keep in place."""
    today = day_of(now_ms).start_ms
    return [DayRange(today + n * DAY_MS, today + (n + 1) * DAY_MS) for n in range(-before, ahead + 1)]


@dataclass(frozen=True)
class Decision:
    """What retain does with one partition, and why (the line it prints)."""

    partition: str
    bounds: DayRange | None  # None: the DEFAULT partition
    action: str
    reason: str


def retention_cutoff(now_ms: int, keep_ms: int) -> int:
    """The first instant kept: a partition whose upper bound is at or before it holds only older rows."""
    if keep_ms < 0:
        raise ValueError(f"--keep must not be negative, got {keep_ms} ms")
    return now_ms - keep_ms


def decide(partitions: dict[str, DayRange | None], now_ms: int, keep_ms: int) -> list[Decision]:
    """One decision per partition, oldest first, the DEFAULT partition last. Dropped: a daily partition
    whose upper bound is <= now - keep, so no row it holds is in the kept window. Kept: every other one,
    the DEFAULT (it holds far instants of every age) and a range someone made by hand that is not one UTC
    day (retain drops only what it could have created)."""
    cutoff = retention_cutoff(now_ms, keep_ms)
    decisions = []
    for name, bounds in sorted(partitions.items(), key=lambda item: (item[1] is None, item[1] or DayRange(0, 0))):
        if bounds is None:
            decisions.append(Decision(name, None, KEEP, "DEFAULT partition, never dropped"))
        elif not bounds.is_daily:
            decisions.append(Decision(name, bounds, NOT_DAILY, "not one UTC day, left alone"))
        elif bounds.end_ms <= cutoff:
            decisions.append(Decision(name, bounds, DROP, f"ends at or before the cutoff {cutoff}"))
        else:
            decisions.append(Decision(name, bounds, KEEP, f"overlaps the kept window from {cutoff}"))
    return decisions


def planned_days(now_ms: int, dropped: set[int], keep_ms: int | None = None) -> list[DayRange]:
    """The days ensure (and retain, with its `keep_ms`) create: `days_to_create`, less any a retain dropped
    (`dropped`: their start_ms) or, with `keep_ms`, would drop at once. A late row of such a day goes to
    DEFAULT instead, so a dropped day is never refilled into a partition that looks whole."""
    cutoff = None if keep_ms is None else retention_cutoff(now_ms, keep_ms)
    return [day for day in days_to_create(now_ms)
            if day.start_ms not in dropped and (cutoff is None or day.end_ms > cutoff)]
