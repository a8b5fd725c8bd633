"""The due-load forecast: strict and flexible occurrences due per second over the next hours, per tenant.

Kept as counters maintained incrementally, so a request reads (tenants x minutes) numbers and
never expands a schedule: a schedule's fires are computed when it changes (create, update,
pause, resume, cancel) and, as the window slides forward, only for schedules whose next fire
enters it (a heap ordered by that fire). A schedule's contribution is not stored: it is
recomputed from the spec to be taken back, which gives the same fires because the time logic is
pure. Pure too: the caller passes `now_ms` in (the follower thread reads the clock).

The forecast counts nominal instants (scheduled_for). Flexible occurrences (flexible_window_ms
> 0) may be spread over their window by the engine; they are counted at its start, apart from
the strict ones, which must all go at their instant.
"""
from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from scheduler.timing import instants
from scheduler.timing.fires import instants_between, next_fire
from scheduler.timing.spec import ScheduleSpec, SpecError
from scheduler.timing.spec_record import compile_spec
from scheduler.wire.records import ScheduleState

Slot = tuple[str, str]  # (tenant, lane)

STRICT, FLEXIBLE = "strict", "flexible"
LANES = (STRICT, FLEXIBLE)


class Share(NamedTuple):
    """What one schedule adds to the forecast: its fires (from `spec`) counted in (tenant, lane)."""

    tenant: str
    lane: str
    spec: ScheduleSpec
    fired_before: int  # fires the engine has made already: they count against max_fires


def share_of(state: ScheduleState | None) -> Share | None:
    """An ACTIVE schedule adds its fires; any other state (or an uncompilable spec) adds nothing."""
    if state is None or state["state"] != "ACTIVE":
        return None
    spec = state["spec"]
    try:
        compiled = compile_spec(spec)
    except (SpecError, OverflowError, ValueError):
        return None
    lane = FLEXIBLE if (spec.get("flexible_window_ms") or 0) > 0 else STRICT
    # Without max_fires the count of past fires changes nothing: keep it out of the key, so the
    # republished state of every fire is recognised as no change.
    fired = state["fired_count"] if compiled.max_fires is not None else 0
    return Share(state["tenant"], lane, compiled, fired)


@dataclass
class _Held:
    share: Share
    since_ms: int  # its fires are counted from here (exclusive): the window's start when it was added
    generation: int


def _fires_ms(share: Share, after_ms: int, until_ms: int) -> list[int]:
    """Fires in (after_ms, until_ms] as epoch ms, capped by max_fires counted from `after_ms`."""
    # (after_ms, until_ms] in ms is (after_us + 999, until_us + 999] in microseconds.
    fires = instants_between(share.spec, after_ms * 1000 + 999, until_ms * 1000 + 999, share.fired_before)
    return [us // 1000 for us in fires]


def _next_ms(share: Share, after_ms: int, fired_before: int) -> int | None:
    fire = next_fire(share.spec, instants.to_datetime(after_ms), fired_before)
    return None if fire is None else instants.to_ms(fire.scheduled_for)


class ForecastIndex:
    """Counters of fires per (second, tenant, lane) over the window (start_ms, end_ms]. Not thread-safe."""

    def __init__(self, horizon_ms: int, now_ms: int) -> None:
        self.horizon_ms = horizon_ms
        self.start_ms = window_start(now_ms)
        self.end_ms = self.start_ms + horizon_ms
        self._held: dict[str, _Held] = {}
        self._heap: list[tuple[int, str, int]] = []  # (next fire after end_ms, schedule_id, generation)
        self._generations = itertools.count()
        self.seconds: dict[int, Counter[Slot]] = {}
        self.minutes: dict[int, Counter[Slot]] = {}

    @property
    def schedules(self) -> int:
        """Schedules that add fires (ACTIVE ones)."""
        return len(self._held)

    # -- counters ------------------------------------------------------------------

    def _count(self, slot: Slot, fires_ms: list[int], sign: int) -> None:
        per_second = Counter(ms // 1000 for ms in fires_ms)
        per_minute: Counter[int] = Counter()
        for second, n in per_second.items():
            per_minute[second - second % 60] += n
        _add(self.seconds, per_second, slot, sign)
        _add(self.minutes, per_minute, slot, sign)

    def _window_fires(self, held: _Held) -> list[int]:
        """The fires `held` has in the counters now (those before start_ms have been dropped)."""
        # Only a max_fires cap depends on where counting began; otherwise start where the counters do.
        since = held.since_ms if held.share.spec.max_fires is not None else self.start_ms
        return [ms for ms in _fires_ms(held.share, since, self.end_ms) if ms > self.start_ms]

    # -- changes -------------------------------------------------------------------

    def apply(self, schedule_id: str, state: ScheduleState | None) -> None:
        """The schedule's latest state (None: deleted): its old fires go, its new ones come."""
        share = share_of(state)
        held = self._held.get(schedule_id)
        if held is not None and held.share == share:
            return
        if held is not None:
            del self._held[schedule_id]
            self._count((held.share.tenant, held.share.lane), self._window_fires(held), -1)
        if share is None:
            return
        held = self._held[schedule_id] = _Held(share, self.start_ms, next(self._generations))
        fires = _fires_ms(share, self.start_ms, self.end_ms)
        self._count((share.tenant, share.lane), fires, +1)
        self._push(schedule_id, held, self.end_ms, share.fired_before + len(fires))

    def _push(self, schedule_id: str, held: _Held, after_ms: int, fired_before: int) -> None:
        following = _next_ms(held.share, after_ms, fired_before)
        if following is not None:
            heapq.heappush(self._heap, (following, schedule_id, held.generation))

    def advance(self, now_ms: int) -> int:
        """Slide the window to start at now's second; returns how many fires entered it."""
        start = window_start(now_ms)
        if start <= self.start_ms:
            return 0
        self._drop_before(start)
        self.start_ms = start
        new_end = start + self.horizon_ms
        entered = 0
        while self._heap and self._heap[0][0] <= new_end:
            _, schedule_id, generation = heapq.heappop(self._heap)
            held = self._held.get(schedule_id)
            if held is None or held.generation != generation:
                continue  # changed since: its new share was pushed on its own
            capped = held.share.spec.max_fires is not None
            counted = len(_fires_ms(held.share, held.since_ms, self.end_ms)) if capped else 0
            fires = _fires_ms(held.share._replace(fired_before=held.share.fired_before + counted),
                              self.end_ms, new_end)
            self._count((held.share.tenant, held.share.lane), fires, +1)
            entered += len(fires)
            self._push(schedule_id, held, new_end, held.share.fired_before + counted + len(fires))
        self.end_ms = new_end
        return entered

    def _drop_before(self, start_ms: int) -> None:
        """Seconds wholly before the new start are no longer a forecast."""
        for second in range((self.start_ms + 1) // 1000, (start_ms + 1) // 1000):
            gone = self.seconds.pop(second, None)
            if gone is None:
                continue
            minute_start = second - second % 60
            minute = self.minutes[minute_start]
            minute.subtract(gone)
            for slot in [slot for slot, n in minute.items() if not n]:
                del minute[slot]
            if not minute:
                del self.minutes[minute_start]


def _add(table: dict[int, Counter[Slot]], counts: Counter[int], slot: Slot, sign: int) -> None:
    """Add (or take back) counts per bucket; empty entries go, so the tables hold only what is due."""
    for bucket, n in counts.items():
        slots = table.get(bucket)
        if slots is None:
            slots = table[bucket] = Counter()
        value = slots.get(slot, 0) + sign * n
        if value:
            slots[slot] = value
        else:
            slots.pop(slot, None)
            if not slots:
                del table[bucket]


def window_start(now_ms: int) -> int:
    """The exclusive lower bound that keeps whole seconds: fires from the start of now's second on."""
    return now_ms // 1000 * 1000 - 1


@dataclass(frozen=True)
class Peak:
    minute_s: int
    total: int
    seconds: list[tuple[int, Counter[Slot]]]  # the busiest seconds of the minute, busiest first


@dataclass(frozen=True)
class Forecast:
    """What the forecast page shows, read from the counters (no schedule is expanded)."""

    start_ms: int
    end_ms: int
    minutes: list[int]                          # minute starts (epoch s) in the window
    per_tenant: dict[str, dict[str, list[int]]]  # tenant -> lane -> due per minute
    peaks: list[Peak]

    def totals(self, lane: str) -> list[int]:
        return [sum(t[lane][i] for t in self.per_tenant.values()) for i in range(len(self.minutes))]


def read(index: ForecastIndex, tenants: frozenset[str] | None, peaks: int = 5, peak_seconds: int = 10) -> Forecast:
    """Per-minute counts of the tenants a caller may see (None: all), and its busiest minutes by second."""
    first = (index.start_ms + 1) // 1000
    minutes = list(range(first - first % 60, index.end_ms // 1000 + 1, 60))
    per_tenant: dict[str, dict[str, list[int]]] = {}
    for i, minute in enumerate(minutes):
        for (tenant, lane), n in index.minutes.get(minute, Counter()).items():
            if n and (tenants is None or tenant in tenants):
                lanes = per_tenant.setdefault(tenant, {lane: [0] * len(minutes) for lane in LANES})
                lanes[lane][i] += n
    totals = [sum(lanes[lane][i] for lanes in per_tenant.values() for lane in LANES) for i in range(len(minutes))]
    busiest = sorted((i for i, n in enumerate(totals) if n), key=lambda i: (-totals[i], minutes[i]))[:peaks]
    return Forecast(index.start_ms, index.end_ms, minutes, dict(sorted(per_tenant.items())),
                    [Peak(minutes[i], totals[i], _busiest_seconds(index, minutes[i], tenants, peak_seconds))
                     for i in sorted(busiest, key=lambda i: minutes[i])])


def _busiest_seconds(index: ForecastIndex, minute: int, tenants: frozenset[str] | None,
                     keep: int) -> list[tuple[int, Counter[Slot]]]:
    found = []
    for second in range(minute, minute + 60):
        slots = Counter({slot: n for slot, n in index.seconds.get(second, Counter()).items()
                         if n and (tenants is None or slot[0] in tenants)})
        if slots:
            found.append((second, slots))
    return sorted(found, key=lambda item: (-item[1].total(), item[0]))[:keep]
