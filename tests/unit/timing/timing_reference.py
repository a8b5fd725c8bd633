"""Brute-force reference for the timing tests: walk every local calendar minute.

Deliberately naive and independent of scheduler.timing's evaluation: it tests
each wall minute against the cron fields with its own day rules and maps it to
UTC with zoneinfo's fold attribute (PEP 495), finding gap ends by bisection.
"""
from __future__ import annotations

import calendar
from datetime import datetime, timedelta, timezone
from functools import cache
from zoneinfo import ZoneInfo

from scheduler.timing.cron import parse_cron

UTC = timezone.utc


def _day_matches(rule, when: datetime) -> bool:
    length = calendar.monthrange(when.year, when.month)[1]
    weekday = (when.weekday() + 1) % 7  # Sunday = 0
    same_weekdays_before = sum(1 for d in range(1, when.day) if (when.replace(day=d).weekday() + 1) % 7 == weekday)
    later_same_weekday = when.day + 7 <= length
    dom_hit = when.day in rule.dom or (rule.dom_last and when.day == length)
    dow_hit = (
        weekday in rule.dow
        or (weekday, same_weekdays_before + 1) in rule.dow_nth
        or (weekday in rule.dow_last and not later_same_weekday)
    )
    if rule.dom_star or rule.dow_star:
        return dom_hit and dow_hit
    return dom_hit or dow_hit


def cron_matches(expression: str, wall: datetime) -> bool:
    cron = parse_cron(expression)
    return (
        wall.minute in cron.minutes
        and wall.hour in cron.hours
        and wall.month in cron.months
        and _day_matches(cron.day_rule, wall)
    )


def _local(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def resolve(wall: datetime, zone: ZoneInfo, gap: str, overlap: str) -> list[tuple[datetime, str | None]]:
    found = sorted({u for fold in (0, 1) if _local(u := wall.replace(tzinfo=zone, fold=fold).astimezone(UTC), zone) == wall})
    if len(found) == 1:
        return [(found[0], None)]
    if len(found) == 2:
        rule = {"first": "overlap_first", "last": "overlap_last", "both": "overlap_both"}[overlap]
        chosen = {"first": found[:1], "last": found[1:], "both": found}[overlap]
        return [(u, rule) for u in chosen]
    if gap == "skip":
        return []
    lo = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)  # before the gap: local < wall
    hi = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)  # after the gap: local > wall
    lo, hi = min(lo, hi), max(lo, hi)
    while hi - lo > timedelta(seconds=1):
        mid = lo + timedelta(seconds=(hi - lo) // timedelta(seconds=2))
        if _local(mid, zone) > wall:
            hi = mid
        else:
            lo = mid
    return [(hi, "gap_shifted")]


def reference_cron(expression: str, zone_name: str, gap: str, overlap: str, wall_from: datetime, wall_to: datetime):
    """All fires of walls in [wall_from, wall_to), sorted, de-duplicated (an unshifted fire wins)."""
    zone = ZoneInfo(zone_name)
    best: dict[datetime, str | None] = {}
    wall = wall_from.replace(second=0, microsecond=0)
    while wall < wall_to:
        if cron_matches(expression, wall):
            for u, rule in resolve(wall, zone, gap, overlap):
                if u not in best or rule is None:
                    best[u] = rule
        wall += timedelta(minutes=1)
    return sorted(best.items())


@cache
def transitions(zone_name: str, first_year: int = 2000, last_year: int = 2037) -> tuple[datetime, ...]:
    """Offset changes found by sampling every 6 hours and bisecting to the second."""
    zone = ZoneInfo(zone_name)

    def offset(t: datetime):
        return t.astimezone(zone).utcoffset()

    found = []
    t = datetime(first_year, 1, 1, tzinfo=UTC)
    end = datetime(last_year + 1, 1, 1, tzinfo=UTC)
    step = timedelta(hours=6)
    while t < end:
        if offset(t) != offset(t + step):
            lo, hi = t, t + step
            while hi - lo > timedelta(seconds=1):
                mid = lo + timedelta(seconds=(hi - lo) // timedelta(seconds=2))
                if offset(mid) == offset(lo):
                    lo = mid
                else:
                    hi = mid
            found.append(hi)
        t += step
    return tuple(found)
