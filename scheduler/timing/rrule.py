"""RFC 5545 recurrence rules: the text of an `rrule` schedule, parsed and validated.

The expression is iCalendar content lines separated by whitespace or newlines:

    DTSTART;TZID=Europe/Berlin:20260113T090000
    RRULE:FREQ=MONTHLY;BYDAY=2TU
    EXDATE:20261208,20270112

DTSTART is a local date-time in the schedule's zone (a TZID, if given, must name
that zone) and fixes the one time of day of every fire. The rule yields local
days; the DST contract then turns each day's wall time into instants, as for
cron. What is left out of RFC 5545, and why, is in docs/time-semantics.md.
Every error names the offending part (e.g. `BYSETPOS=9 out of range`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timezone

from scheduler.timing.errors import SpecError
from scheduler.timing.zones import MAX_YEAR, MIN_YEAR, load_zone

FREQS = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY")
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")  # index = date.weekday()
MAX_COUNT = 50_000  # COUNT rules are enumerated once, when compiled
MAX_INTERVAL = 1000
_LEFT_OUT = {
    "HOURLY": "sub-daily rules are cron or rate schedules",
    "MINUTELY": "sub-daily rules are cron or rate schedules",
    "SECONDLY": "sub-daily rules are cron or rate schedules",
    "BYHOUR": "the time of day is DTSTART's (one per rule); use cron for several a day",
    "BYMINUTE": "the time of day is DTSTART's (one per rule); use cron for several a day",
    "BYSECOND": "the time of day is DTSTART's (one per rule); use cron for several a day",
    "BYWEEKNO": "ISO week numbers are not supported",
    "BYYEARDAY": "year days are not supported; use BYMONTH with BYMONTHDAY",
    "RDATE": "extra dates are one-shot schedules",
    "EXRULE": "EXRULE was removed from iCalendar (RFC 5545)",
}
_DATE = re.compile(r"^(\d{4})(\d{2})(\d{2})$")
_DATE_TIME = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(Z?)$")
_BYDAY = re.compile(r"^([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")


@dataclass(frozen=True)
class Rule:
    """A validated rule; days are date ordinals, the time of day is seconds after midnight."""

    freq: str
    interval: int
    start: int  # DTSTART's date
    time_of_day: int
    wkst: int
    by_month: frozenset[int]
    by_month_day: frozenset[int]
    by_day: frozenset[int]  # plain weekdays, 0 = Monday
    by_day_nth: frozenset[tuple[int, int]]  # (weekday, ordinal), ordinal negative from the end
    by_set_pos: tuple[int, ...]
    count: int | None
    until: int | None  # last allowed day (date ordinal)
    exdates: frozenset[int]
    clamp: bool


def _bad(part: str, message: str) -> SpecError:
    return SpecError("expression", f"{part}: {message}")


def _ints(name: str, text: str, limit: int, signed: bool = False) -> list[int]:
    """A comma list of integers in 1..limit (or -limit..-1 too when signed)."""
    values = []
    for item in text.split(","):
        if not re.fullmatch(r"[+-]?\d+", item):
            raise _bad(f"{name}={text}", f"{item!r} is not an integer")
        value = int(item)
        if value == 0 or abs(value) > limit or (value < 0 and not signed):
            raise SpecError("expression", f"{name}={item} out of range ({_range_text(limit, signed)})")
        values.append(value)
    return values


def _range_text(limit: int, signed: bool) -> str:
    return f"-{limit}..-1, 1..{limit}" if signed else f"1..{limit}"


def _parse_date_time(name: str, text: str, zone: str) -> datetime:
    """Naive local wall time; a `Z` value is read as the wall time it shows in `zone`."""
    match = _DATE_TIME.match(text)
    if not match:
        raise _bad(f"{name}={text}", "expected YYYYMMDDTHHMMSS (local) or YYYYMMDDTHHMMSSZ")
    y, mo, d, h, mi, s, utc = match.groups()
    try:
        value = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s))
    except ValueError as exc:
        raise _bad(f"{name}={text}", str(exc)) from exc
    if utc:
        value = value.replace(tzinfo=timezone.utc).astimezone(load_zone(zone)).replace(tzinfo=None)
    return value


def _parse_date(name: str, text: str) -> date:
    match = _DATE.match(text)
    if not match:
        raise _bad(f"{name}={text}", "expected YYYYMMDD")
    try:
        return date(*(int(g) for g in match.groups()))
    except ValueError as exc:
        raise _bad(f"{name}={text}", str(exc)) from exc


def _content_lines(expression: str, zone: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    lines: dict[str, list[tuple[dict[str, str], str]]] = {}
    for line in expression.split():
        head, sep, value = line.partition(":")
        if not sep:
            raise _bad(line, "expected NAME:VALUE (e.g. RRULE:FREQ=WEEKLY)")
        name, *params = head.split(";")
        name = name.upper()
        if name in _LEFT_OUT:
            raise _bad(name, f"not supported: {_LEFT_OUT[name]}")
        if name not in ("DTSTART", "RRULE", "EXDATE"):
            raise _bad(name, "unknown property (expected DTSTART, RRULE, EXDATE)")
        parsed: dict[str, str] = {}
        for param in params:
            key, eq, param_value = param.partition("=")
            if not eq or key.upper() not in ("TZID", "VALUE"):
                raise _bad(f"{name};{param}", "unknown parameter (expected TZID= or VALUE=)")
            parsed[key.upper()] = param_value if key.upper() == "TZID" else param_value.upper()
        if "TZID" in parsed and parsed["TZID"] != zone:
            raise _bad(f"{name};TZID={parsed['TZID']}", f"differs from the schedule's time_zone {zone!r}")
        lines.setdefault(name, []).append((parsed, value.upper()))
    return lines


def _rule_parts(text: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    for part in text.upper().split(";"):
        key, eq, value = part.partition("=")
        if not eq or not value:
            raise _bad(f"RRULE {part!r}", "expected NAME=VALUE")
        if key in _LEFT_OUT:
            raise _bad(key, f"not supported: {_LEFT_OUT[key]}")
        if key not in ("FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "BYMONTHDAY", "BYMONTH", "BYSETPOS", "WKST"):
            raise _bad(key, "unknown rule part")
        if key in parts:
            raise _bad(key, "given twice")
        parts[key] = value
    return parts


def _by_day(parts: dict[str, str], freq: str) -> tuple[set[int], set[tuple[int, int]]]:
    plain: set[int] = set()
    nth: set[tuple[int, int]] = set()
    limit = 53 if freq == "YEARLY" and "BYMONTH" not in parts else 5
    for item in parts["BYDAY"].split(",") if "BYDAY" in parts else []:
        match = _BYDAY.match(item)
        if not match:
            raise _bad(f"BYDAY={item}", "expected a weekday MO..SU, optionally after an ordinal (2TU, -1FR)")
        ordinal, weekday = match.groups()
        if ordinal is None:
            plain.add(WEEKDAYS.index(weekday))
            continue
        if freq not in ("MONTHLY", "YEARLY"):
            raise _bad(f"BYDAY={item}", f"an ordinal weekday needs FREQ=MONTHLY or YEARLY, not {freq}")
        n = int(ordinal)
        if n == 0 or abs(n) > limit:
            raise SpecError("expression", f"BYDAY={item} out of range (ordinals {_range_text(limit, True)})")
        nth.add((WEEKDAYS.index(weekday), n))
    return plain, nth


def _until(text: str, zone: str, time_of_day: int) -> int:
    """The last day whose fire (at DTSTART's time of day) is not after UNTIL."""
    if _DATE.match(text):
        return _parse_date("UNTIL", text).toordinal()
    until = _parse_date_time("UNTIL", text, zone)
    seconds = until.hour * 3600 + until.minute * 60 + until.second
    return until.toordinal() - (1 if seconds < time_of_day else 0)


def _exdates(lines: list[tuple[dict[str, str], str]], zone: str, time_of_day: int) -> frozenset[int]:
    days = set()
    for params, value in lines:
        for item in value.split(","):
            if _DATE.match(item) and params.get("VALUE", "DATE") == "DATE":
                days.add(_parse_date("EXDATE", item).toordinal())
                continue
            wall = _parse_date_time("EXDATE", item, zone)
            if wall.hour * 3600 + wall.minute * 60 + wall.second != time_of_day:
                raise _bad(f"EXDATE={item}", f"is not at DTSTART's time of day {time(*_hms(time_of_day))}")
            days.add(wall.toordinal())
    return frozenset(days)


def _hms(seconds: int) -> tuple[int, int, int]:
    return seconds // 3600, seconds // 60 % 60, seconds % 60


def parse_rrule(expression: str, zone: str, month_end: str = "skip") -> Rule:
    """Parse and check each part (raises SpecError naming it); rrule_days.compile_rule also
    checks that the rule yields a day at all."""
    if not isinstance(expression, str) or not expression.strip():
        raise SpecError("expression", "empty recurrence rule")
    lines = _content_lines(expression, zone)
    for name in ("DTSTART", "RRULE"):
        if len(lines.get(name, [])) != 1:
            raise _bad(name, "exactly one is required")
    start = _parse_date_time("DTSTART", lines["DTSTART"][0][1], zone)
    if not MIN_YEAR <= start.year <= MAX_YEAR:
        raise _bad(f"DTSTART={lines['DTSTART'][0][1]}", f"year outside {MIN_YEAR}..{MAX_YEAR}")
    time_of_day = start.hour * 3600 + start.minute * 60 + start.second
    parts = _rule_parts(lines["RRULE"][0][1])
    freq = parts.get("FREQ")
    if freq is None:
        raise _bad("FREQ", "required")
    if freq in _LEFT_OUT:
        raise _bad(f"FREQ={freq}", f"not supported: {_LEFT_OUT[freq]}")
    if freq not in FREQS:
        raise _bad(f"FREQ={freq}", f"must be one of {', '.join(FREQS)}")
    if "COUNT" in parts and "UNTIL" in parts:
        raise _bad("COUNT", "COUNT and UNTIL must not both be given (RFC 5545)")
    if "BYMONTHDAY" in parts and freq == "WEEKLY":
        raise _bad("BYMONTHDAY", "not allowed with FREQ=WEEKLY (RFC 5545)")
    if "BYSETPOS" in parts and not {"BYDAY", "BYMONTHDAY", "BYMONTH"} & set(parts):
        raise _bad("BYSETPOS", "needs another BY part to select from (RFC 5545)")
    interval = _ints("INTERVAL", parts.get("INTERVAL", "1"), MAX_INTERVAL)
    count = _ints("COUNT", parts["COUNT"], MAX_COUNT) if "COUNT" in parts else None
    set_size = {"YEARLY": 366, "MONTHLY": 31, "WEEKLY": 7, "DAILY": 1}[freq]
    set_pos = _ints("BYSETPOS", parts["BYSETPOS"], set_size, signed=True) if "BYSETPOS" in parts else []
    wkst = parts.get("WKST", "MO")
    if wkst not in WEEKDAYS:
        raise _bad(f"WKST={wkst}", "must be a weekday MO..SU")
    by_day, by_day_nth = _by_day(parts, freq)
    by_month = set(_ints("BYMONTH", parts["BYMONTH"], 12)) if "BYMONTH" in parts else set()
    by_month_day = set(_ints("BYMONTHDAY", parts["BYMONTHDAY"], 31, signed=True)) if "BYMONTHDAY" in parts else set()
    if not (by_day or by_day_nth or by_month_day):  # RFC 5545 / dateutil: DTSTART supplies the day
        if freq == "YEARLY":
            by_month = by_month or {start.month}
            by_month_day = {start.day}
        elif freq == "MONTHLY":
            by_month_day = {start.day}
        elif freq == "WEEKLY":
            by_day = {start.weekday()}
    return Rule(
        freq=freq, interval=interval[0], start=start.toordinal(), time_of_day=time_of_day,
        wkst=WEEKDAYS.index(wkst), by_month=frozenset(by_month), by_month_day=frozenset(by_month_day),
        by_day=frozenset(by_day), by_day_nth=frozenset(by_day_nth), by_set_pos=tuple(sorted(set(set_pos))),
        count=None if count is None else count[0],
        until=_until(parts["UNTIL"], zone, time_of_day) if "UNTIL" in parts else None,
        exdates=_exdates(lines.get("EXDATE", []), zone, time_of_day),
        clamp=month_end == "clamp",
    )
