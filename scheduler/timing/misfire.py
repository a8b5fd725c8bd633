"""Misfire arithmetic after downtime: which fires to dispatch late, which to record MISSED.

Candidates are the fires in (cursor, now]. A fire with now - t <= max_lateness is
on time and always fired. Among the late ones:

    SKIP       all missed
    FIRE_ONCE  the latest late fire is fired, the rest missed
    CATCH_UP   the latest `catch_up_limit` late fires are fired, the rest missed

Late fires are counted day by day (fires.count_fires) and only the tail that is
returned is enumerated, so a `* * * * *` schedule down for a year costs
milliseconds, not half a million iterations. max_fires counts every occurrence,
so after a decision the caller's fired_before grows by len(fire) + missed_count.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.timing.fires import Fire, count_fires, fires_between, nth_fire
from scheduler.timing.instants import require_aware
from scheduler.timing.spec import ScheduleSpec

POLICIES = ("SKIP", "FIRE_ONCE", "CATCH_UP")
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class MisfireDecision:
    fire: list[Fire]  # dispatch now, ascending (late ones first, then on-time ones)
    missed: list[Fire]  # the latest missed fires, at most enumerate_limit of them
    missed_count: int  # exact number of missed fires
    missed_first: datetime | None
    missed_last: datetime | None
    cursor: datetime  # everything <= cursor is decided


def resolve_misfire(
    spec: ScheduleSpec,
    cursor: datetime,
    now: datetime,
    max_lateness: timedelta,
    policy: str,
    catch_up_limit: int,
    fired_before: int = 0,
    enumerate_limit: int = 1000,
) -> MisfireDecision:
    require_aware(cursor, "cursor")
    require_aware(now, "now")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if max_lateness < timedelta(0) or catch_up_limit < 0 or enumerate_limit < 0:
        raise ValueError("max_lateness, catch_up_limit and enumerate_limit must not be negative")
    if now <= cursor:
        return MisfireDecision([], [], 0, None, None, cursor)
    late_until = min(now, now - max_lateness - _TICK)  # late: t < now - max_lateness
    late = count_fires(spec, cursor, late_until, fired_before) if late_until > cursor else 0
    on_time = fires_between(spec, max(cursor, late_until), now, None, fired_before + late)
    fired_late = {"SKIP": 0, "FIRE_ONCE": min(1, late), "CATCH_UP": min(catch_up_limit, late)}[policy]
    missed_count = late - fired_late
    shown = min(missed_count, enumerate_limit)
    skipped = missed_count - shown  # missed fires neither returned nor enumerated
    tail_start = cursor if skipped == 0 else _nth_instant(spec, cursor, skipped, fired_before)
    tail = fires_between(spec, tail_start, late_until, shown + fired_late) if shown + fired_late else []
    missed = tail[:shown]
    missed_first = missed_last = None
    if missed_count:
        missed_first = missed[0].scheduled_for if skipped == 0 else _nth_instant(spec, cursor, 1, fired_before)
        missed_last = missed[-1].scheduled_for if shown else _nth_instant(spec, cursor, missed_count, fired_before)
    return MisfireDecision(tail[shown:] + on_time, missed, missed_count, missed_first, missed_last, now)


def _nth_instant(spec: ScheduleSpec, after: datetime, n: int, fired_before: int) -> datetime:
    """The n-th fire after `after`, which the count of late fires has shown to exist."""
    fire = nth_fire(spec, after, n, fired_before)
    if fire is None:
        raise RuntimeError(f"fire {n} after {after.isoformat()} was counted but not found")
    return fire.scheduled_for
