"""Brute-force references for RRULE, cron W/LW and month_end=clamp: walk local days.

Independent of scheduler.timing's evaluation. RRULE days come from dateutil's
rrule on a *naive* DTSTART (pure wall-clock RFC 5545, no zone involved); W, LW
and clamp are decided per local day from the calendar alone. Every wall time
then goes through timing_reference.resolve (zoneinfo's fold, gap ends bisected).
"""
from __future__ import annotations

import calendar
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr
from timing_reference import resolve


def _fires(walls: Iterable[datetime], zone_name: str, gap: str, overlap: str) -> list[tuple[datetime, str | None]]:
    zone = ZoneInfo(zone_name)
    best: dict[datetime, str | None] = {}
    for wall in walls:
        for instant, rule in resolve(wall, zone, gap, overlap):
            if instant not in best or rule is None:
                best[instant] = rule
    return sorted(best.items())


def rrule_walls(rule_text: str, dtstart: datetime, wall_from: datetime, wall_to: datetime,
                exdates: frozenset[date] = frozenset()) -> tuple[list[datetime], list[datetime]]:
    """(walls the rule fires at in [wall_from, wall_to), walls its EXDATE days took out)."""
    rule = rrulestr(rule_text, dtstart=dtstart)
    kept, excluded = [], []
    for wall in rule.xafter(wall_from, inc=True):
        if wall >= wall_to:
            break
        (excluded if wall.date() in exdates else kept).append(wall)
    return kept, excluded


def reference_rrule(rule_text: str, dtstart: datetime, zone: str, gap: str, overlap: str, wall_from: datetime,
                    wall_to: datetime, exdates: frozenset[date] = frozenset()):
    kept, excluded = rrule_walls(rule_text, dtstart, wall_from, wall_to, exdates)
    return _fires(kept, zone, gap, overlap), _fires(excluded, zone, gap, overlap)


def _weekday_near(day: date) -> date:
    """Quartz W from first principles: Saturday -> Friday, Sunday -> Monday, never leaving the month."""
    length = calendar.monthrange(day.year, day.month)[1]
    if day.weekday() == 5:
        return day - timedelta(days=1) if day.day > 1 else day + timedelta(days=2)
    if day.weekday() == 6:
        return day + timedelta(days=1) if day.day < length else day - timedelta(days=2)
    return day


def dom_day_matches(field: str, day: date, clamp: bool) -> bool:
    """A day-of-month field of the forms the property tests draw: `d`, `d,e`, `L`, `dW`, `LW`."""
    length = calendar.monthrange(day.year, day.month)[1]
    last = date(day.year, day.month, length)
    if field == "LW":
        return day == _weekday_near(last)
    if field.endswith("W"):
        wanted = int(field[:-1])
        if wanted > length and not clamp:
            return False
        return day == _weekday_near(date(day.year, day.month, min(wanted, length)))
    if field == "L":
        return day == last
    values = [int(v) for v in field.split(",")]
    return day.day in values or (clamp and day == last and any(v > length for v in values))


def reference_cron_days(dom: str, times: list[time], clamp: bool, zone: str, gap: str, overlap: str,
                        first_day: date, last_day: date):
    """Fires of `<times> <dom> * *` on the local days first_day..last_day."""
    walls = []
    day = first_day
    while day <= last_day:
        if dom_day_matches(dom, day, clamp):
            walls.extend(datetime.combine(day, t) for t in times)
        day += timedelta(days=1)
    return _fires(walls, zone, gap, overlap)


def clamped_month_days(values: list[int], first_day: date, last_day: date) -> list[date]:
    """BYMONTHDAY values with month_end=clamp, decided month by month."""
    days = set()
    year, month = first_day.year, first_day.month
    while date(year, month, 1) <= last_day:
        length = calendar.monthrange(year, month)[1]
        for v in values:
            d = min(v, length) if v > 0 else max(length + 1 + v, 1)
            days.add(date(year, month, d))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return sorted(d for d in days if first_day <= d <= last_day)
