"""`scheduler preview --calendar`: the fires as month grids in the schedule's zone, DST changes flagged.

Pure text rendering (no clock reads): every month from the first to the last
fire (or the start's month when nothing fires) is a Monday-first grid; a day
cell is marked `*` when the schedule fires that local day and `!` when the
zone's UTC offset changes that local day (`x`: an RRULE EXDATE took that day's
fire out). Under each grid, one line per offset change (local time before ->
after, the offsets, gap or overlap) and one line per fire day with its local times.
"""
from __future__ import annotations

import calendar
from collections import defaultdict
from collections.abc import Sequence
from datetime import date, datetime, timedelta

from scheduler.timing.fires import Fire
from scheduler.timing.instants import EPOCH, format_offset, utc_offset
from scheduler.timing.zones import load_zone, year_start, zone_rules

WEEK_HEADER = " ".join(f"{name[:2]}  " for name in calendar.day_abbr).rstrip()


def _months(first: date, last: date) -> list[tuple[int, int]]:
    months, year, month = [], first.year, first.month
    while (year, month) <= (last.year, last.month):
        months.append((year, month))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return months


def _transitions(zone_name: str, year: int, month: int) -> list[tuple[datetime, datetime, int, int]]:
    """(local wall just before, local wall from the change on, old offset, new offset) in the month."""
    rules = zone_rules(zone_name)
    zone = load_zone(zone_name)
    lo = year_start(year) + (date(year, month, 1) - date(year, 1, 1)).days * 86_400 - 86_400
    hi = lo + 33 * 86_400
    offsets, times = rules.window(lo, hi)
    found = []
    for i, instant in enumerate(times):
        moment = EPOCH + timedelta(seconds=instant)
        before = (moment + timedelta(seconds=offsets[i])).replace(tzinfo=None)
        after = moment.astimezone(zone).replace(tzinfo=None)
        if (before.year, before.month) == (year, month):
            found.append((before, after, offsets[i], offsets[i + 1]))
    return found


def _change_line(before: datetime, after: datetime, old: int, new: int) -> str:
    kind = "gap" if new > old else "overlap"
    size = timedelta(seconds=abs(new - old))
    return (f"  ! {before:%Y-%m-%d} {before:%H:%M:%S} -> {after:%H:%M:%S}  "
            f"UTC{format_offset(timedelta(seconds=old))} -> UTC{format_offset(timedelta(seconds=new))}  "
            f"({kind} of {size})")


def _grid(year: int, month: int, fire_days: set[int], change_days: set[int], excluded_days: set[int]) -> list[str]:
    lines = [f"{calendar.month_name[month]} {year}".center(len(WEEK_HEADER)), WEEK_HEADER]
    for week in calendar.Calendar(firstweekday=0).monthdayscalendar(year, month):
        cells = []
        for day in week:
            if day == 0:
                cells.append("    ")
                continue
            fire = "*" if day in fire_days else "x" if day in excluded_days else " "
            mark = fire + ("!" if day in change_days else " ")
            cells.append(f"{day:>2}{mark}")
        lines.append(" ".join(cells).rstrip())
    return lines


def render(fires: list[Fire], zone_name: str, start: datetime | None, excluded: Sequence[Fire] = ()) -> list[str]:
    """The calendar's lines; `start` picks the month shown when there is no fire."""
    zone = load_zone(zone_name)
    skipped = {f.scheduled_for.astimezone(zone).date() for f in excluded}
    local_fires = [(f.scheduled_for.astimezone(zone), f.dst_rule) for f in fires]
    by_day: dict[date, list[str]] = defaultdict(list)
    for local, rule in local_fires:
        note = f" ({rule})" if rule else ""
        by_day[local.date()].append(f"{local:%H:%M:%S} UTC{format_offset(utc_offset(local))}{note}")
    lines = [f"time zone {zone_name}; * = fires that day, ! = UTC offset changes that day, x = EXDATE"]
    if local_fires:
        first, last = local_fires[0][0].date(), local_fires[-1][0].date()
    elif start is not None:
        first = last = start.astimezone(zone).date()
    else:
        return lines + ["(no fires)"]
    for year, month in _months(first, last):
        changes = _transitions(zone_name, year, month)
        fire_days = {d.day for d in by_day if (d.year, d.month) == (year, month)}
        excluded_days = {d.day for d in skipped if (d.year, d.month) == (year, month)}
        lines += [""] + _grid(year, month, fire_days, {before.day for before, *_ in changes}, excluded_days)
        lines += [_change_line(*change) for change in changes]
        for day in sorted(d for d in by_day if (d.year, d.month) == (year, month)):
            lines.append(f"  * {day:%Y-%m-%d} {', '.join(by_day[day])}")
        lines += [f"  x {day:%Y-%m-%d} EXDATE" for day in sorted(skipped) if (day.year, day.month) == (year, month)]
    if not local_fires:
        lines.append("(no fires)")
    return lines
