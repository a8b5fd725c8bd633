"""Renews an attempt's lease while its handler runs: HEARTBEAT events on `<prefix>.attempts`.

The scheduler records an attempt LOST (and retries its occurrence) once it has heard nothing of
it for the schedule's `lease_ms`, counted on its own clock from the last STARTED or HEARTBEAT it
processed. Beating every lease/3 leaves room for two heartbeats to be late or lost before that
happens; a handler's explicit `ctx.heartbeat()` counts as a beat and pushes the next one back.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from scheduler.worker.events import attempt_event
from scheduler.worker.occurrence import AttemptContext, Occurrence

log = logging.getLogger(__name__)

BEATS_PER_LEASE = 3
MIN_INTERVAL_S = 0.1

Event = dict[str, object]


def interval_s(lease_ms: int) -> float:
    return max(MIN_INTERVAL_S, lease_ms / 1000 / BEATS_PER_LEASE)


class Heartbeat:
    """A background thread beating for one attempt; `ctx.renew` beats now (the handler's heartbeat)."""

    def __init__(self, occurrence: Occurrence, ctx: AttemptContext, worker_id: str, clock_ms: Callable[[], int],
                 record: Callable[[Event], None]) -> None:
        self.occurrence = occurrence
        self.ctx = ctx
        self.worker_id = worker_id
        self.clock_ms = clock_ms
        self.record = record
        self.interval = interval_s(occurrence.lease_ms)
        self.beats = 0
        self._lock = threading.Lock()  # one beat at a time: the thread's and the handler's
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{ctx.attempt_token[:8]}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.ctx.renew = self.beat
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stops beating before the outcome is written, so no heartbeat follows it."""
        self.ctx.renew = None
        self._done.set()
        self._thread.join()

    def beat(self, progress: str | None = None) -> bool:
        with self._lock:
            if self._done.is_set() or self.ctx.lease_lost.is_set():
                return False
            self._last = time.monotonic()
            event = attempt_event(self.occurrence, "HEARTBEAT", self.ctx.attempt_token, self.worker_id,
                                  self.clock_ms(), progress=progress)
            try:
                self.record(event)
            except Exception as error:  # the next beat tries again; the lease allows for two misses
                log.warning("heartbeat of occurrence %s not written: %s", self.occurrence.occurrence_id, error)
                return False
            self.beats += 1
            return True

    def _run(self) -> None:
        while not self._done.wait(max(0.0, self._last + self.interval - time.monotonic())):
            if time.monotonic() >= self._last + self.interval:
                self.beat()
