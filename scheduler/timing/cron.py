"""Five-field cron expressions: parsing into per-field sets and matching calendar days.

Grammar (Vixie cron plus the Quartz day extensions the issue asks for):
minute hour day-of-month month day-of-week; each field a comma list of `*`,
`*/s`, `a`, `a-b`, `a-b/s`, `a/s` (a to the field maximum); month and weekday
names (JAN, MON; case-insensitive); weekday 7 = Sunday; `L` in day-of-month
(last day), and Quartz's `dW` (the weekday nearest day d, never leaving the
month) and `LW` (the month's last weekday), each the field's only item;
`d#n` (n-th weekday d, n = 1..5), `Ld` and `dL` (last weekday d of
the month) in day-of-week. A day-of-month value a month lacks (31 in April) is
skipped, or with month_end="clamp" read as the month's last day. Macros: @hourly @daily @midnight @weekly @monthly
@yearly @annually. When both day fields are restricted a day matches if either
matches; a day field whose text starts with `*` (e.g. `*/2`) counts as
unrestricted and then both must match (Vixie's DOM_STAR/DOW_STAR rule).
Every expression is also validated by croniter so we never accept what the
reference library rejects.
"""
from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from croniter import croniter

from scheduler.timing.errors import SpecError

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
MONTH_NAMES = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
DAY_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_ITEM = re.compile(r"^(?:(\*)|([0-9A-Z]+)(?:-([0-9A-Z]+))?)(?:/([0-9]+))?$")
_SATISFIABILITY_YEARS = 400  # the Gregorian calendar (weekdays included) repeats every 400 years
_NEAREST_WEEKDAY = re.compile(r"^([0-9]+)W$")
MONTH_END_OPTIONS = ("skip", "clamp")


def _bad(message: str) -> SpecError:
    return SpecError("expression", message)


@dataclass(frozen=True)
class DayRule:
    """Which calendar days match: the day-of-month and day-of-week fields combined."""

    dom: frozenset[int]
    dom_last: bool
    dom_star: bool
    dow: frozenset[int]
    dow_nth: frozenset[tuple[int, int]]
    dow_last: frozenset[int]
    dow_star: bool
    dom_nearest_weekday: int | None = None  # `dW`
    dom_last_weekday: bool = False  # `LW`
    clamp: bool = False  # month_end="clamp"

    def _dom_hit(self, day: int, weekday: int, month_length: int) -> bool:
        if day in self.dom or (self.dom_last and day == month_length):
            return True
        if self.clamp and day == month_length and any(d > month_length for d in self.dom):
            return True
        target = self.dom_nearest_weekday
        if target is not None and self.clamp:
            target = min(target, month_length)
        if target is not None and target <= month_length:
            if day == nearest_weekday(target, (weekday + target - day) % 7, month_length):
                return True
        if self.dom_last_weekday:
            return day == nearest_weekday(month_length, (weekday + month_length - day) % 7, month_length)
        return False

    def matches(self, day: int, weekday: int, month_length: int) -> bool:
        """weekday: 0 = Sunday."""
        dom_hit = self._dom_hit(day, weekday, month_length)
        dow_hit = (
            weekday in self.dow
            or (weekday, (day - 1) // 7 + 1) in self.dow_nth
            or (weekday in self.dow_last and day + 7 > month_length)
        )
        if self.dom_star or self.dow_star:
            return dom_hit and dow_hit
        return dom_hit or dow_hit


def nearest_weekday(day: int, weekday: int, month_length: int) -> int:
    """Quartz's `W`: the Monday-Friday day nearest `day` (weekday 0 = Sunday) within its month."""
    if weekday == 6:
        return day - 1 if day > 1 else day + 2
    if weekday == 0:
        return day + 1 if day < month_length else day - 2
    return day


@lru_cache(maxsize=65536)
def matching_days(rule: DayRule, year: int, month: int) -> tuple[int, ...]:
    """The days of one month that match, ascending (cached: walks reuse months)."""
    first_weekday, length = calendar.monthrange(year, month)
    sunday_based = (first_weekday + 1) % 7
    return tuple(d for d in range(1, length + 1) if rule.matches(d, (sunday_based + d - 1) % 7, length))


@dataclass(frozen=True)
class CronExpression:
    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    day_rule: DayRule
    times_of_day: tuple[int, ...]  # seconds after local midnight, ascending

    def days_from(self, year: int, month: int, day: int, last_year: int) -> Iterator[tuple[int, int, int]]:
        """Matching (year, month, day) from the given date on, ascending, up to `last_year`."""
        while year <= last_year:
            for m in self.months:
                if m < month:
                    continue
                for d in matching_days(self.day_rule, year, m):
                    if m > month or d >= day:
                        yield year, m, d
            year, month, day = year + 1, 1, 1


def _value(token: str, index: int, lo: int, hi: int) -> int:
    names = MONTH_NAMES if index == 3 else DAY_NAMES if index == 4 else {}
    if token in names:
        return names[token]
    if not token.isdigit():
        raise _bad(f"{_FIELD_NAMES[index]}: unknown value {token!r}")
    value = int(token)
    if not lo <= value <= hi:
        raise _bad(f"{_FIELD_NAMES[index]}: {value} is outside {lo}-{hi}")
    return value


def _plain_item(item: str, index: int) -> set[int]:
    lo, hi = _BOUNDS[index]
    match = _ITEM.match(item)
    if not match:
        raise _bad(f"{_FIELD_NAMES[index]}: cannot parse {item!r}")
    star, first, last, step_text = match.groups()
    step = int(step_text) if step_text else 1
    if step < 1:
        raise _bad(f"{_FIELD_NAMES[index]}: step must be at least 1 in {item!r}")
    if star:
        start, end = lo, hi
    else:
        start = _value(first, index, lo, hi)
        if last is not None:
            end = _value(last, index, lo, hi)
            if index == 4 and last == "SUN":
                end = 7
        else:
            end = hi if step_text else start
        if start > end:
            raise _bad(f"{_FIELD_NAMES[index]}: range {item!r} runs backwards")
    values = set(range(start, end + 1, step))
    return {0 if v == 7 else v for v in values} if index == 4 else values


def _day_of_week_item(item: str, rule: dict[str, Any]) -> None:
    nth = re.match(r"^([0-9A-Z]+)#([0-9]+)$", item)
    last = re.match(r"^L([0-9A-Z]+)$", item) or re.match(r"^([0-9A-Z]+)L$", item)
    if nth:
        weekday = _value(nth.group(1), 4, 0, 7) % 7
        n = int(nth.group(2))
        if not 1 <= n <= 5:
            raise _bad(f"day-of-week: #{n} must be 1-5 in {item!r}")
        rule["dow_nth"].add((weekday, n))
    elif last:
        rule["dow_last"].add(_value(last.group(1), 4, 0, 7) % 7)
    else:
        rule["dow"].update(_plain_item(item, 4))


def _croniter_text(fields: list[str]) -> str:
    """croniter spells 'last Friday' only as L5 and knows no W: rewrite Quartz's 5L, 15W and LW
    to the plain day croniter checks (the syntax around them is still its to judge)."""
    dow = ",".join(re.sub(r"^([0-9A-Z]+)L$", r"L\1", item) for item in fields[4].split(","))
    dom = re.sub(r"^(L|[0-9]+)W$", r"\1", fields[2])
    return " ".join(fields[:2] + [dom, fields[3], dow])


def _day_of_month_field(field: str, rule: dict[str, Any]) -> None:
    nearest = _NEAREST_WEEKDAY.match(field)
    if "W" in field and "," in field:
        raise _bad(f"day-of-month: W takes a single day, not a list (Quartz), got {field!r}")
    if field == "LW":
        rule["dom_last_weekday"] = True
    elif nearest:
        rule["dom_nearest_weekday"] = _value(nearest.group(1), 2, *_BOUNDS[2])
    elif "W" in field:
        raise _bad(f"day-of-month: W follows a single day (15W) or L (LW), got {field!r}")
    else:
        for item in field.split(","):
            if item == "L":
                rule["dom_last"] = True
            else:
                rule["dom"] |= _plain_item(item, 2)


@lru_cache(maxsize=16384)
def parse_cron(text: str, month_end: str = "skip") -> CronExpression:
    """Parse and validate a cron expression (raises SpecError("expression", ...)).

    month_end="clamp" reads a day-of-month value the month lacks as its last day.
    """
    if month_end not in MONTH_END_OPTIONS:
        raise SpecError("month_end", f"must be one of {', '.join(MONTH_END_OPTIONS)}, got {month_end!r}")
    if not isinstance(text, str) or not text.strip():
        raise _bad("empty cron expression")
    source = text.strip()
    expanded = MACROS.get(source.lower(), source) if source.startswith("@") else source
    if expanded.startswith("@"):
        raise _bad(f"unknown macro {source!r} (known: {', '.join(sorted(MACROS))})")
    fields = expanded.upper().split()
    if len(fields) != 5:
        raise _bad(f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
    minutes: set[int] = set()
    hours: set[int] = set()
    months: set[int] = set()
    rule: dict[str, Any] = {"dom": set(), "dom_last": False, "dow": set(), "dow_nth": set(), "dow_last": set(),
                  "dom_nearest_weekday": None, "dom_last_weekday": False}
    for item in fields[0].split(","):
        minutes |= _plain_item(item, 0)
    for item in fields[1].split(","):
        hours |= _plain_item(item, 1)
    _day_of_month_field(fields[2], rule)
    for item in fields[3].split(","):
        months |= _plain_item(item, 3)
    for item in fields[4].split(","):
        _day_of_week_item(item, rule)
    if not croniter.is_valid(_croniter_text(fields)):
        raise _bad(f"croniter rejects {source!r}")
    day_rule = DayRule(
        dom=frozenset(rule["dom"]),
        dom_last=rule["dom_last"],
        dom_star=fields[2].startswith("*"),
        dow=frozenset(rule["dow"]),
        dow_nth=frozenset(rule["dow_nth"]),
        dow_last=frozenset(rule["dow_last"]),
        dow_star=fields[4].startswith("*"),
        dom_nearest_weekday=rule["dom_nearest_weekday"],
        dom_last_weekday=rule["dom_last_weekday"],
        clamp=month_end == "clamp",
    )
    ordered_months = tuple(sorted(months))
    if not any(matching_days(day_rule, 2000 + y, m) for y in range(_SATISFIABILITY_YEARS) for m in ordered_months):
        raise _bad(f"{source!r} never matches any calendar day")
    return CronExpression(
        text=source,
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        months=ordered_months,
        day_rule=day_rule,
        times_of_day=tuple(h * 3600 + m * 60 for h in sorted(hours) for m in sorted(minutes)),
    )
