"""IANA zones and their UTC-offset transitions, as integer tables.

`zoneinfo` answers one conversion at a time; evaluating schedules fast needs to
know *whether* a day is near a transition at all. `ZoneRules` builds, per zone
and year, the list of transition instants by sampling zoneinfo (zoneinfo stays
the single source of truth) and bisecting each change to the second.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from datetime import datetime, timedelta
from functools import cache, lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from scheduler.timing.errors import SpecError
from scheduler.timing.instants import EPOCH, UTC, utc_offset

# Bound on |UTC offset| (tzdata's largest, a historical LMT, is under 16 h):
# the instant of a wall time w always lies in [w - MAX_OFFSET, w + MAX_OFFSET].
MAX_OFFSET = 26 * 3600
# Sampling step when building a year's table: two transitions closer than this
# that cancel each other out would go unnoticed (tzdata has none).
_SAMPLE_STEP = 3 * 3600
MIN_YEAR = 2
MAX_YEAR = 9998


@cache
def _known_zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


@lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo:
    """An IANA zone by name; unknown names are an error, never a silent UTC."""
    if not isinstance(name, str) or name not in _known_zone_names():
        raise SpecError("time_zone", f"unknown IANA time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise SpecError("time_zone", f"unknown IANA time zone {name!r}") from exc


def year_start(year: int) -> int:
    return int((datetime(year, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())


def year_of(seconds: int) -> int:
    return (EPOCH + timedelta(seconds=seconds)).year


# Room for every DST zone's tables over a search horizon (timing/horizon.py) and more: a tenant walking
# never-firing specs through zone after zone then costs each table once, never a rebuild.
@lru_cache(maxsize=32768)
def _year_table(name: str, year: int) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(offset in force at the start of `year`, transition instants in the year, offsets after each).

    The year is sampled on a fixed grid in one pass (a comprehension: this is what a walk over a
    search horizon of never-firing days pays per year, so it is kept to one zoneinfo call per
    sample) and every interval whose ends differ is bisected to the second, as often as it holds
    changes."""
    zone = load_zone(name)
    at = datetime.fromtimestamp
    start, end = year_start(year), year_start(year + 1)
    grid = [*range(start - 1, end - 1, _SAMPLE_STEP), end - 1]
    samples = [utc_offset(at(t, zone)) for t in grid]
    current = samples[0]
    times: list[int] = []
    offsets: list[int] = []
    for i in range(1, len(grid)):
        lo = grid[i - 1]
        while samples[i] != current:
            hi = grid[i]
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if at(mid, zone).utcoffset() == current:
                    lo = mid
                else:
                    hi = mid
            current = utc_offset(at(hi, zone))
            times.append(hi)
            offsets.append(int(current.total_seconds()))
            lo = hi
    return int(samples[0].total_seconds()), tuple(times), tuple(offsets)


class ZoneRules:
    """Offsets and transitions of one zone, in integer epoch seconds."""

    def __init__(self, name: str):
        load_zone(name)
        self.name = name

    def offset_at(self, instant: int) -> int:
        year = min(max(year_of(instant), MIN_YEAR), MAX_YEAR)
        first, times, offsets = _year_table(self.name, year)
        index = bisect_right(times, instant) - 1
        return offsets[index] if index >= 0 else first

    def window(self, lo: int, hi: int) -> tuple[list[int], list[int]]:
        """Transitions in [lo, hi): (offsets, times) with offsets[0] in force at lo and
        offsets[i + 1] in force from times[i] on."""
        offsets = [self.offset_at(lo)]
        times: list[int] = []
        first_year = min(max(year_of(lo), MIN_YEAR), MAX_YEAR)
        last_year = min(max(year_of(hi), MIN_YEAR), MAX_YEAR)
        for year in range(first_year, last_year + 1):
            _, year_times, year_offsets = _year_table(self.name, year)
            i, j = bisect_right(year_times, lo), bisect_left(year_times, hi)
            times.extend(year_times[i:j])
            offsets.extend(year_offsets[i:j])
        return offsets, times

    def span(self, instant: int) -> tuple[int, int, int]:
        """(lo, hi, offset): the offset is constant on [lo, hi) around `instant`; the span
        is cut at the nearest transitions, and at most a year beyond `instant`'s year."""
        year = min(max(year_of(instant), MIN_YEAR + 1), MAX_YEAR - 1)
        times: list[int] = []
        for y in (year - 1, year, year + 1):
            times.extend(_year_table(self.name, y)[1])
        index = bisect_right(times, instant)
        lo = times[index - 1] if index else year_start(year - 1)
        hi = times[index] if index < len(times) else year_start(year + 2)
        return lo, hi, self.offset_at(instant)


@lru_cache(maxsize=1024)
def zone_rules(name: str) -> ZoneRules:
    return ZoneRules(name)
