"""Keeps the console's derived indexes up to date: the forecast and the per-tenant occurrence figures.

The views call their listeners on their follower thread under their lock, so the listeners here
only record the change (the latest state per key wins); one thread of ours applies the changes
and slides the forecast window with the clock. A request reads the indexes under a lock and
never waits for that thread: `pending` says how far behind it is.
"""
from __future__ import annotations

import logging
import threading
import time

from scheduler.console.forecast import Forecast, ForecastIndex, read
from scheduler.console.occurrence_stats import OccurrenceStats, TenantFigures
from scheduler.kafka.views import OccurrenceView, ScheduleView
from scheduler.wire.records import OccurrenceStatus, ScheduleState

log = logging.getLogger(__name__)

DEFAULT_HORIZON_MS = 6 * 3_600_000
TICK_S = 0.25
SLIDE_STEP_MS = 10_000


def _now_ms() -> int:
    return int(time.time() * 1000)


class ConsoleIndexes:
    def __init__(self, schedules: ScheduleView, occurrences: OccurrenceView,
                 horizon_ms: int = DEFAULT_HORIZON_MS) -> None:
        self.forecast = ForecastIndex(horizon_ms, _now_ms())
        self.stats = OccurrenceStats()
        self._lock = threading.Lock()          # guards the indexes
        self._busy = threading.Lock()          # held while a batch of changes is being applied
        self._dirty_lock = threading.Lock()    # guards the queued changes (taken on the views' threads)
        self._schedules: dict[str, ScheduleState | None] = {}
        self._occurrences: dict[str, OccurrenceStatus | None] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        schedules.subscribe(self._schedule_changed)
        occurrences.subscribe(self._occurrence_changed)
        self._thread = threading.Thread(target=self._run, name="console-indexes", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(10)

    def _schedule_changed(self, key: str, record: ScheduleState | None) -> None:
        with self._dirty_lock:
            self._schedules[key] = record
        self._wake.set()

    def _occurrence_changed(self, key: str, record: OccurrenceStatus | None) -> None:
        with self._dirty_lock:
            self._occurrences[key] = record
        self._wake.set()

    @property
    def pending(self) -> int:
        """Changes the views have seen that the indexes do not hold yet."""
        with self._dirty_lock:
            return len(self._schedules) + len(self._occurrences)

    def wait_applied(self, timeout: float) -> bool:
        """Until every change seen so far is applied (tests and benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.pending and not self._busy.locked():
                return True
            time.sleep(0.02)
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            with self._busy:  # taken before the swap, so wait_applied never sees "nothing pending, idle" early
                with self._dirty_lock:
                    schedules, self._schedules = self._schedules, {}
                    occurrences, self._occurrences = self._occurrences, {}
                self._apply(schedules, occurrences)

    def _apply(self, schedules: dict[str, ScheduleState | None],
               occurrences: dict[str, OccurrenceStatus | None]) -> None:
        # In slices, so a request waits for at most one slice of a large catch-up.
        items = list(schedules.items())
        for start in range(0, len(items), 2000):
            with self._lock:
                for key, record in items[start:start + 2000]:
                    try:
                        self.forecast.apply(key, record)
                    except (ArithmeticError, ValueError):  # one odd schedule must not stop the index
                        log.exception("forecast: schedule %s left out", key)
        with self._lock:
            for key, status in occurrences.items():
                self.stats.apply(key, status)
        # Slide in steps too: after a long catch-up the window may have a lot of ground to cover.
        target = _now_ms()
        while True:
            with self._lock:
                step = min(target, self.forecast.start_ms + 1 + SLIDE_STEP_MS)
                self.forecast.advance(step)
            if step >= target:
                return

    def read_forecast(self, tenants: frozenset[str] | None) -> Forecast:
        with self._lock:
            return read(self.forecast, tenants)

    def figures(self, tenant: str) -> TenantFigures:
        with self._lock:
            return self.stats.figures(tenant)
