"""Cron (and RRULE) fires as UTC instants: walk matching local days, then map wall times through the DST contract.

Wall times are integer "local seconds" (the naive wall clock read as if UTC).
A day is *clean* when no offset transition lies within MAX_OFFSET of it: its
fires are then `midnight + time_of_day - offset` with no per-minute work and
no other day's fires can interleave with them. Only days near a transition
resolve each wall time through `dst.resolve_wall` and go through a small heap
that orders and de-duplicates (a shifted gap time can coincide with a real
fire; the unshifted one wins).

Every walk is bounded by the search horizon (`horizon.SEARCH_HORIZON_S`): it ends at the first
matching day lying that far past where it started or past its last fire, so a spec whose wall
times all fall in DST gaps costs a bounded walk instead of one to year 9998. The check is one
comparison per matching day, none per fire.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Protocol

from scheduler.timing.dst import resolve_wall
from scheduler.timing.horizon import SEARCH_HORIZON_S
from scheduler.timing.zones import MAX_OFFSET, MAX_YEAR, MIN_YEAR, ZoneRules

DAY = 86_400
_ORDINAL_EPOCH = date(1970, 1, 1).toordinal()

Fire = tuple[int, str | None]  # (epoch seconds, dst_rule)


class DaySource(Protocol):
    """Matching local days and the wall times of each: a CronExpression, or an RRULE's RuleDays."""

    @property
    def times_of_day(self) -> tuple[int, ...]:
        """Seconds after local midnight, ascending (read-only: the sources are frozen dataclasses)."""

    def days_from(self, year: int, month: int, day: int, last_year: int) -> Iterator[tuple[int, int, int]]: ...


def _midnight(year: int, month: int, day: int) -> int:
    return (date(year, month, day).toordinal() - _ORDINAL_EPOCH) * DAY


def _civil(wall: int) -> date:
    return date(1970, 1, 1) + timedelta(days=wall // DAY)


class CronTimeline:
    def __init__(self, expression: DaySource, rules: ZoneRules, gap: str, overlap: str):
        self.expression = expression
        self.rules = rules
        self.gap = gap
        self.overlap = overlap
        self.tod = expression.times_of_day
        self._span = (0, 0, 0)  # last quiet span seen: most days fall in the same one

    def _quiet_offset(self, lo: int, hi: int) -> int | None:
        """The offset if it is constant on [lo, hi), else None."""
        span = self._span
        if not (span[0] <= lo and hi <= span[1]):
            span = self._span = self.rules.span(lo)
            if not (span[0] <= lo and hi <= span[1]):
                return None
        return span[2]

    def _days(self, start_wall: int) -> Iterator[int]:
        """Local midnights (wall seconds) of matching days from the day of `start_wall` on."""
        start = _civil(start_wall)
        if start.year < MIN_YEAR:
            start = date(MIN_YEAR, 1, 1)
        for y, m, d in self.expression.days_from(start.year, start.month, start.day, MAX_YEAR):
            yield _midnight(y, m, d)

    def _start_wall(self, after: int) -> int:
        """No wall time earlier than this can produce an instant after `after`."""
        offset = self._quiet_offset(after - MAX_OFFSET, after + MAX_OFFSET)
        if offset is not None:
            return after + offset
        offsets, _ = self.rules.window(after - MAX_OFFSET, after + MAX_OFFSET)
        return after + min(offsets)

    def _floor(self, wall: int) -> int:
        """Every wall time >= `wall` maps to an instant >= this (shifted ones included)."""
        offset = self._quiet_offset(wall - MAX_OFFSET, wall + MAX_OFFSET)
        if offset is not None:
            return wall - offset
        offsets, _ = self.rules.window(wall - MAX_OFFSET, wall + MAX_OFFSET)
        return wall - max(offsets)

    def _day(self, midnight: int) -> tuple[int | None, list[tuple[int, int, str | None]]]:
        """(offset, []) for a clean day; (None, sorted [(instant, rank, rule)]) near a transition."""
        offset = self._quiet_offset(midnight - MAX_OFFSET, midnight + DAY + MAX_OFFSET)
        if offset is not None:
            return offset, []
        offsets, times = self.rules.window(midnight - MAX_OFFSET, midnight + DAY + MAX_OFFSET)
        fires = []
        for t in self.tod:
            for instant, rule in resolve_wall(midnight + t, offsets, times, self.gap, self.overlap):
                fires.append((instant, 0 if rule is None else 1, rule))
        fires.sort()
        return None, fires

    def iter_after(self, after: int) -> Iterator[Fire]:
        """Fires strictly after `after` (epoch seconds), ascending, without duplicates, up to the
        horizon: no day whose earliest instant lies more than SEARCH_HORIZON_S after `after` (or
        after the last fire yielded) is looked at."""
        heap: list[tuple[int, int, str | None]] = []
        last = None
        tod = self.tod
        for midnight in self._days(self._start_wall(after)):
            if midnight - MAX_OFFSET > (after if last is None else last) + SEARCH_HORIZON_S:
                break
            offset, fires = self._day(midnight)
            if offset is not None:
                while heap:
                    instant, _, rule = heapq.heappop(heap)
                    if instant != last:
                        last = instant
                        yield instant, rule
                base = midnight - offset
                for i in range(bisect_right(tod, after - base), len(tod)):
                    last = base + tod[i]
                    yield last, None
                continue
            for fire in fires:
                if fire[0] > after:
                    heapq.heappush(heap, fire)
            floor = self._floor(midnight + DAY)
            while heap and heap[0][0] < floor:
                instant, _, rule = heapq.heappop(heap)
                if instant != last:
                    last = instant
                    yield instant, rule
        while heap:
            instant, _, rule = heapq.heappop(heap)
            if instant != last:
                last = instant
                yield instant, rule

    def _between(self, lo: int, hi: int) -> Iterator[Fire]:
        for fire in self.iter_after(lo):
            if fire[0] > hi:
                return
            yield fire

    def _runs(self, after: int, until: int) -> Iterator[tuple[int, tuple[int, ...]] | list[Fire]]:
        """Fires in (after, until] as ascending runs: (base, times_of_day) for whole clean
        days, counted without enumeration, and explicit lists for everything else. Bounded as
        iter_after is: the walk ends a horizon past the last clean day's fires (days still
        pending are then listed by iter_after, which applies the same bound)."""
        tod = self.tod
        pending_from = after
        pending = False
        for midnight in self._days(self._start_wall(after)):
            if midnight - MAX_OFFSET > min(until, pending_from + SEARCH_HORIZON_S):
                break
            offset, _ = self._day(midnight)
            if offset is not None:
                base = midnight - offset
                first, last = base + tod[0], base + tod[-1]
                if first > after and last <= until:
                    if pending:
                        yield list(self._between(pending_from, first - 1))
                    yield base, tod
                    pending_from, pending = last, False
                    continue
            pending = True
        if pending:
            yield list(self._between(pending_from, until))

    def count(self, after: int, until: int) -> int:
        """Number of fires in (after, until] in time proportional to days, not fires."""
        total = 0
        for run in self._runs(after, until):
            total += len(run[1]) if isinstance(run, tuple) else len(run)
        return total

    def nth(self, after: int, n: int, until: int) -> Fire | None:
        """The n-th fire (1-based) in (after, until], found by counting whole days."""
        seen = 0
        for run in self._runs(after, until):
            if isinstance(run, tuple):
                base, tod = run
                if seen + len(tod) >= n:
                    return base + tod[n - seen - 1], None
                seen += len(tod)
            else:
                if seen + len(run) >= n:
                    return run[n - seen - 1]
                seen += len(run)
        return None
