"""The local days of a recurrence rule, as a day source for the cron timeline's DST walk.

Every supported BY part, expanding or limiting (RFC 5545's table), comes down to
keeping the days of a FREQ period that satisfy all of them; BYSETPOS then picks
from the period's sorted days. The period holding a given day is found by
arithmetic (never by walking from DTSTART as dateutil's `rrule.after` does) and
each period's days are cached, so a next fire costs a few cached lookups. COUNT
rules are enumerated once, when compiled (COUNT is at most MAX_COUNT).
"""
from __future__ import annotations

import calendar
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from functools import lru_cache
from itertools import islice

from scheduler.timing.errors import SpecError
from scheduler.timing.rrule import Rule, parse_rrule
from scheduler.timing.zones import MAX_YEAR

_LAST_DAY = date(MAX_YEAR, 12, 31).toordinal()
# Periods after which the Gregorian calendar repeats (400 years), so a rule with no day in
# that many aligned periods has none at all.
_REPEAT = {"YEARLY": 400, "MONTHLY": 4800, "WEEKLY": 20_871, "DAILY": 4800}


def _nth_hit(rule: Rule, day: date, length: int) -> bool:
    """BYDAY ordinals count within the month (MONTHLY, or YEARLY with BYMONTH), else the year."""
    weekday = day.weekday()
    if rule.freq == "MONTHLY" or rule.by_month:
        index, size = day.day, length
    else:
        index, size = day.timetuple().tm_yday, 366 if calendar.isleap(day.year) else 365
    return ((weekday, (index - 1) // 7 + 1) in rule.by_day_nth
            or (weekday, -((size - index) // 7 + 1)) in rule.by_day_nth)


def _keeps(rule: Rule, ordinal: int) -> bool:
    day = date.fromordinal(ordinal)
    if rule.by_month and day.month not in rule.by_month:
        return False
    length = calendar.monthrange(day.year, day.month)[1]
    if rule.by_month_day:
        wanted = rule.by_month_day
        hit = day.day in wanted or day.day - length - 1 in wanted
        if not hit and rule.clamp:
            hit = (day.day == length and any(v > length for v in wanted)) or (
                day.day == 1 and any(v < -length for v in wanted))
        if not hit:
            return False
    if rule.by_day or rule.by_day_nth:
        return day.weekday() in rule.by_day or (bool(rule.by_day_nth) and _nth_hit(rule, day, length))
    return True


def _set_positions(rule: Rule, days: list[int]) -> tuple[int, ...]:
    n = len(days)
    return tuple(sorted({days[p - 1 if p > 0 else n + p] for p in rule.by_set_pos if -n <= p <= n}))


@lru_cache(maxsize=65536)
def _period(rule: Rule, first: int, last: int) -> tuple[int, ...]:
    """Days of the period [first, last] kept by the BY parts, then by BYSETPOS."""
    days = [d for d in range(first, last + 1) if _keeps(rule, d)]
    return _set_positions(rule, days) if rule.by_set_pos else tuple(days)


def _month_bounds(index: int) -> tuple[int, int]:
    year, month = divmod(index, 12)
    first = date(year, month + 1, 1).toordinal()
    return first, first + calendar.monthrange(year, month + 1)[1] - 1


def _aligned(index: int, origin: int, interval: int) -> int:
    """The first period index >= `index` that is origin + k * interval."""
    return index + (origin - index) % interval


def _periods(rule: Rule, first: int) -> Iterator[tuple[int, int]]:
    """(first, last) day of every period the rule fires in, from the one holding `first` on."""
    start = date.fromordinal(rule.start)
    step = rule.interval
    if rule.freq == "YEARLY":
        year = _aligned(date.fromordinal(first).year, start.year, step)
        while year <= MAX_YEAR:
            yield date(year, 1, 1).toordinal(), date(year, 12, 31).toordinal()
            year += step
    elif rule.freq == "MONTHLY":
        day = date.fromordinal(first)
        index = _aligned(day.year * 12 + day.month - 1, start.year * 12 + start.month - 1, step)
        while index // 12 <= MAX_YEAR:
            yield _month_bounds(index)
            index += step
    elif rule.freq == "WEEKLY":
        origin = rule.start - (start.weekday() - rule.wkst) % 7
        week = first - (date.fromordinal(first).weekday() - rule.wkst) % 7
        week += ((origin - week) // 7 % step) * 7
        while week <= _LAST_DAY:
            yield week, week + 6
            week += 7 * step
    else:  # DAILY: one period per day, handed out a month at a time
        day = date.fromordinal(first)
        index = day.year * 12 + day.month - 1
        while index // 12 <= MAX_YEAR:
            yield _month_bounds(index)
            index += 1


@lru_cache(maxsize=65536)
def _daily_month(rule: Rule, first: int, last: int) -> tuple[int, ...]:
    """DAILY: the kept days of one month on the INTERVAL grid (BYSETPOS of a one-day set is a no-op)."""
    on_grid = first + (rule.start - first) % rule.interval
    return tuple(d for d in range(on_grid, last + 1, rule.interval) if _keeps(rule, d))


def days_after(rule: Rule, first: int, max_periods: int | None = None) -> Iterator[int]:
    """Days (ordinals) the rule yields from `first` on, ascending; COUNT and EXDATE not applied."""
    first = max(first, rule.start)
    until = _LAST_DAY if rule.until is None else rule.until
    days_of = _daily_month if rule.freq == "DAILY" else _period
    for lo, hi in islice(_periods(rule, first), max_periods):
        if lo > until:
            return
        for day in days_of(rule, lo, hi):
            if day > until:
                return
            if day >= first:
                yield day


@lru_cache(maxsize=65536)
def _year_days(rule: Rule, year: int) -> tuple[int, ...]:
    """Every day the rule yields in one calendar year (COUNT and EXDATE not applied): the
    per-year table a next fire bisects, as cron bisects its per-month day sets."""
    last = date(year, 12, 31).toordinal()
    days = []
    for day in days_after(rule, date(year, 1, 1).toordinal()):
        if day > last:
            break
        days.append(day)
    return tuple(days)


class RuleDays:
    """A compiled rule as CronTimeline's day source: its days (EXDATEs removed), or with
    `excluded=True` only the EXDATE days the rule would otherwise have fired on.

    Days are served from per-year tables (ordinals to bisect, (y, m, d) to hand out), built
    once per compiled spec, so the next fire after any instant is a bisection away.
    """

    _TABLES_KEPT = 512

    def __init__(self, rule: Rule, excluded: bool = False):
        self.rule = rule
        self.excluded = excluded
        self.times_of_day = (rule.time_of_day,)
        self._counted = None if rule.count is None else tuple(islice(days_after(rule, rule.start), rule.count))
        self._tables: dict[int, tuple[tuple[int, ...], tuple[tuple[int, int, int], ...]]] = {}
        self._first_year = date.fromordinal(rule.start).year
        ends = [MAX_YEAR]
        if rule.until is not None:
            ends.append(date.fromordinal(rule.until).year)
        if self._counted is not None:
            ends.append(date.fromordinal(self._counted[-1]).year if self._counted else self._first_year - 1)
        if excluded:
            ends.append(date.fromordinal(max(rule.exdates)).year if rule.exdates else self._first_year - 1)
        self._last_year = min(ends)

    def _table(self, year: int) -> tuple[tuple[int, ...], tuple[tuple[int, int, int], ...]]:
        table = self._tables.get(year)
        if table is None:
            if self._counted is None:
                days: tuple[int, ...] = _year_days(self.rule, year)
            else:
                lo, hi = date(year, 1, 1).toordinal(), date(year, 12, 31).toordinal()
                days = self._counted[bisect_left(self._counted, lo):bisect_left(self._counted, hi + 1)]
            exdates = self.rule.exdates
            kept = [d for d in days if (d in exdates) == self.excluded]
            table = (tuple(kept), tuple(date.fromordinal(d).timetuple()[:3] for d in kept))
            if len(self._tables) >= self._TABLES_KEPT:
                self._tables.clear()
            self._tables[year] = table
        return table

    def days_from(self, year: int, month: int, day: int, last_year: int) -> Iterator[tuple[int, int, int]]:
        first = date(year, month, day).toordinal()
        for y in range(max(year, self._first_year), min(last_year, self._last_year) + 1):
            ordinals, days = self._table(y)
            yield from days[bisect_left(ordinals, first):]


def _has_day(rule: Rule) -> bool:
    return next(days_after(rule, rule.start, _REPEAT[rule.freq]), None) is not None


@lru_cache(maxsize=16384)
def compile_rule(expression: str, zone: str, month_end: str = "skip") -> Rule:
    """parse_rrule, then reject a rule that yields no day at all, naming the culprit part."""
    rule = parse_rrule(expression, zone, month_end)
    if _has_day(rule):
        return rule
    if rule.by_set_pos and _has_day(replace(rule, by_set_pos=())):
        positions = ",".join(str(p) for p in rule.by_set_pos)
        raise SpecError("expression", f"BYSETPOS={positions} out of range: no {rule.freq} period of this rule "
                                      "has that many days")
    if rule.until is not None:
        raise SpecError("expression", "UNTIL: the rule yields no day between DTSTART and UNTIL")
    raise SpecError("expression", "RRULE: the rule never yields a calendar day")
