"""Fire instants of a ScheduleSpec: the next N after an instant, counts and n-th fires.

The per-kind timelines work in epoch integers; this module applies the spec's
window ([start_at, end_at], inclusive) and max_fires, and converts to datetimes.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import lru_cache
from itertools import islice

from scheduler.timing.cron import parse_cron
from scheduler.timing.cron_timeline import CronTimeline, DaySource
from scheduler.timing.errors import SpecError
from scheduler.timing.horizon import SEARCH_HORIZON_YEARS
from scheduler.timing.instants import US_PER_S, from_us, require_aware, to_us
from scheduler.timing.once import OnceTimeline, once_fires
from scheduler.timing.rate import MAX_US, RateTimeline, parse_period
from scheduler.timing.rrule_days import RuleDays, compile_rule
from scheduler.timing.spec import ScheduleSpec
from scheduler.timing.zones import zone_rules

Raw = tuple[int, str | None]  # (epoch microseconds, dst_rule)


@dataclass(frozen=True)
class Fire:
    """One fire instant; dst_rule names the DST rule that moved or chose it (for audit), else None."""

    scheduled_for: datetime
    dst_rule: str | None


class _CronMicros:
    """Adapts the seconds-based day timeline (cron, RRULE) to the microsecond interface, and
    steps from its last answer: after a fire f was returned as the first fire after `a`, any
    `after` in [a, f) has f as its next fire too (a scheduler's cursor advances just so), and the
    walk resumes from f instead of searching again. The memo is one immutable tuple per
    compiled spec, so concurrent readers at worst miss it."""

    def __init__(self, timeline: CronTimeline):
        self.timeline = timeline
        self._last: tuple[int, Raw] | None = None  # (after, the first fire after it)

    def iter_after(self, after: int) -> Iterator[Raw]:
        last = self._last
        if last is not None and last[0] <= after < last[1][0]:
            return self._resume(last[1])
        return self._remember(after, self.timeline.iter_after(after // US_PER_S))

    def _resume(self, fire: Raw) -> Iterator[Raw]:
        yield fire
        yield from self._remember(fire[0], self.timeline.iter_after(fire[0] // US_PER_S))

    def _remember(self, after: int, fires: Iterator[tuple[int, str | None]]) -> Iterator[Raw]:
        for seconds, rule in fires:
            fire = (seconds * US_PER_S, rule)
            self._last = (after, fire)
            yield fire
            after = fire[0]

    def count(self, after: int, until: int) -> int:
        return self.timeline.count(after // US_PER_S, until // US_PER_S)

    def nth(self, after: int, n: int, until: int) -> Raw | None:
        fire = self.timeline.nth(after // US_PER_S, n, until // US_PER_S)
        return None if fire is None else (fire[0] * US_PER_S, fire[1])


def _day_timeline(spec: ScheduleSpec, days: DaySource) -> _CronMicros:
    return _CronMicros(CronTimeline(days, zone_rules(spec.time_zone), spec.dst_gap, spec.dst_overlap))


@lru_cache(maxsize=4096)
def timeline(spec: ScheduleSpec) -> _CronMicros | RateTimeline | OnceTimeline:
    """Compiled once per spec: next-fire calls then only walk cached days."""
    if spec.kind == "cron":
        return _day_timeline(spec, parse_cron(spec.expression, spec.month_end))
    if spec.kind == "rrule":
        return _day_timeline(spec, RuleDays(compile_rule(spec.expression, spec.time_zone, spec.month_end)))
    if spec.kind == "rate":
        if spec.anchor_at is None:  # parse_spec gives every rate schedule one
            raise SpecError("anchor_at", "a rate schedule needs anchor_at (or start_at)")
        return RateTimeline(to_us(spec.anchor_at), parse_period(spec.expression))
    return OnceTimeline(once_fires(spec.expression, spec.time_zone, spec.dst_gap, spec.dst_overlap))


def _lower(spec: ScheduleSpec, after: datetime) -> int:
    return _lower_us(spec, to_us(require_aware(after, "after")))


def _lower_us(spec: ScheduleSpec, lower: int) -> int:
    return lower if spec.start_at is None else max(lower, to_us(spec.start_at) - 1)


def _upper(spec: ScheduleSpec, until: datetime | None) -> int:
    return _upper_us(spec, MAX_US if until is None else to_us(require_aware(until, "until")))


def _upper_us(spec: ScheduleSpec, upper: int) -> int:
    return upper if spec.end_at is None else min(upper, to_us(spec.end_at))


def _remaining(spec: ScheduleSpec, fired_before: int) -> int | None:
    return None if spec.max_fires is None else max(0, spec.max_fires - fired_before)


def _limit(spec: ScheduleSpec, limit: int | None, fired_before: int) -> int | None:
    remaining = _remaining(spec, fired_before)
    if limit is None or remaining is None:
        return remaining if limit is None else limit
    return min(limit, remaining)


def fires_between(
    spec: ScheduleSpec, after: datetime, until: datetime | None, limit: int | None = None, fired_before: int = 0
) -> list[Fire]:
    """Fires in (after, until], ascending, at most `limit` (and at most the max_fires left).

    Remembered per arguments: a turn of creates or wake-ups of one spec asks the same question
    many times (every schedule of a bulk load of daily crons starts at the turn's `now`)."""
    return list(_fires_between(spec, after, until, limit, fired_before))


@lru_cache(maxsize=4096)
def _fires_between(
    spec: ScheduleSpec, after: datetime, until: datetime | None, limit: int | None, fired_before: int
) -> tuple[Fire, ...]:
    lo, hi = _lower(spec, after), _upper(spec, until)
    limit = _limit(spec, limit, fired_before)
    if limit is None and hi == MAX_US:
        raise ValueError("fires_between needs an upper bound or a limit")
    raw = timeline(spec).iter_after(lo)
    out = []
    for instant, rule in raw if limit is None else islice(raw, limit):
        if instant > hi:
            break
        out.append(Fire(from_us(instant), rule))
    return tuple(out)


def instants_between(spec: ScheduleSpec, after_us: int, until_us: int, fired_before: int = 0) -> list[int]:
    """Fire instants in (after_us, until_us] as epoch microseconds: fires_between without building
    datetimes, for callers that only count fires (the console's forecast counts millions)."""
    return list(iter_instants(spec, after_us, until_us, fired_before))


def iter_instants(spec: ScheduleSpec, after_us: int, until_us: int, fired_before: int = 0) -> Iterator[int]:
    """instants_between one at a time, nothing cached: the reconciler walks a range of any length
    in bounded memory (fires_between remembers whole answers)."""
    lo, hi = _lower_us(spec, after_us), _upper_us(spec, until_us)
    limit = _remaining(spec, fired_before)
    raw = timeline(spec).iter_after(lo)
    for instant, _rule in raw if limit is None else islice(raw, limit):
        if instant > hi:
            return
        yield instant


def next_fires(spec: ScheduleSpec, after: datetime, count: int, fired_before: int = 0) -> list[Fire]:
    """The next `count` fires strictly after `after`, ascending (fewer if the schedule ends)."""
    if count < 0:
        raise ValueError("count must not be negative")
    return fires_between(spec, after, None, count, fired_before)


def next_fire(spec: ScheduleSpec, after: datetime, fired_before: int = 0) -> Fire | None:
    fires = next_fires(spec, after, 1, fired_before)
    return fires[0] if fires else None


@lru_cache(maxsize=4096)
def _excluded_timeline(spec: ScheduleSpec) -> _CronMicros:
    return _day_timeline(spec, RuleDays(compile_rule(spec.expression, spec.time_zone, spec.month_end), excluded=True))


def excluded_between(spec: ScheduleSpec, after: datetime, until: datetime) -> list[Fire]:
    """The fires in (after, until] an RRULE's EXDATEs took out (within start_at..end_at), ascending:
    what the schedule would have fired without them, so the engine can record each skip."""
    if spec.kind != "rrule" or not compile_rule(spec.expression, spec.time_zone, spec.month_end).exdates:
        return []
    lo, hi = _lower(spec, after), _upper(spec, until)
    out = []
    for instant, rule in _excluded_timeline(spec).iter_after(lo):
        if instant > hi:
            break
        out.append(Fire(from_us(instant), rule))
    return out


def count_fires(spec: ScheduleSpec, after: datetime, until: datetime, fired_before: int = 0) -> int:
    """Number of fires in (after, until] without enumerating them one by one."""
    lo, hi = _lower(spec, after), _upper(spec, until)
    total = timeline(spec).count(lo, hi) if hi > lo else 0
    remaining = _remaining(spec, fired_before)
    return total if remaining is None else min(total, remaining)


def nth_fire(spec: ScheduleSpec, after: datetime, n: int, fired_before: int = 0) -> Fire | None:
    """The n-th fire (1-based) strictly after `after`, or None if the schedule ends first."""
    if n < 1:
        raise ValueError("n must be at least 1")
    remaining = _remaining(spec, fired_before)
    if remaining is not None and n > remaining:
        return None
    upper = _upper(spec, None)
    found = timeline(spec).nth(_lower(spec, after), n, upper)
    if found is None or found[0] > upper:
        return None
    return Fire(from_us(found[0]), found[1])


def require_fire(spec: ScheduleSpec, now: datetime) -> None:
    """Raise SpecError("expression", ...) for a spec that never yields an instant under its own DST
    options: a one-shot whose local time falls in a skipped DST gap, or a cron or RRULE schedule
    with no fire within the search horizon after `now` (or after start_at when later).

    What validation adds to parse_spec for a spec about to be stored: such a spec would make every
    planning pass walk the horizon for nothing. end_at and max_fires are left out (a window that
    closes before the first fire is accepted, as before: the schedule completes at once); a rate
    fires once every period from its anchor and never fails this."""
    require_aware(now, "now")
    if spec.kind == "rate":
        return
    if spec.kind == "once":
        compiled = timeline(spec)
        if isinstance(compiled, OnceTimeline) and not compiled.fires:
            raise SpecError("expression", f"no fire: {spec.expression} falls in a DST gap of {spec.time_zone}, "
                                          f"skipped with dst_gap={spec.dst_gap}")
        return
    unbounded = spec if spec.end_at is None and spec.max_fires is None else replace(spec, end_at=None, max_fires=None)
    if next_fire(unbounded, now) is None:
        start = max(now, spec.start_at) if spec.start_at is not None else now
        raise SpecError("expression", f"no fire in the next {SEARCH_HORIZON_YEARS} years after "
                                      f"{start.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%SZ}: its days end, or "
                                      f"every wall time of them falls in a DST gap (dst_gap={spec.dst_gap})")
