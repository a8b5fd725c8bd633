"""Whether a process is alive (its loop turns) and ready (it does the work it was given).

Pure functions of timestamps and counts: the processes record a heartbeat and a few figures, and
the HTTP endpoint asks these functions at request time. Liveness and readiness answer different
questions on purpose: a process restoring a large partition is alive (do not restart it, that
would restart the restore) but not ready (do not count it as serving).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

# A scheduler turn polls at most until its next due entry (seconds) and commits within 30 s; a worker's
# loop polls for 0.2 s. Silence longer than this means the loop is stuck, not idle.
LOOP_SILENCE_S = 60.0


@dataclass(frozen=True)
class Probe:
    """One answer: `ok`, and the one-line reason shown in the response body."""

    ok: bool
    reason: str


class Heartbeat:
    """The monotonic time a loop last turned; `beat()` is one float store, cheap enough for every turn.

    It starts at its creation, so start-up (connecting, reading views) gets the same grace as a turn
    instead of failing liveness before the loop exists. A float assignment is atomic under the GIL,
    so the HTTP thread reads it without a lock."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def beat(self) -> None:
        self.last = time.monotonic()


def alive(last_beat: float, now: float, max_silence_s: float = LOOP_SILENCE_S) -> Probe:
    """The loop turned within `max_silence_s` (monotonic seconds)."""
    silent = now - last_beat
    if silent > max_silence_s:
        return Probe(False, f"the loop has not turned for {silent:.1f}s (limit {max_silence_s:.0f}s)")
    return Probe(True, f"the loop turned {silent:.1f}s ago")


def worker_alive(last_beat: float, handler_started: float | None, now: float,
                 max_silence_s: float, max_handler_s: float) -> Probe:
    """A worker's loop stands still while a handler runs: that is alive up to the group's
    max.poll.interval (`max_handler_s`), after which the group itself considers the worker gone."""
    if handler_started is not None:
        running = now - handler_started
        if running > max_handler_s:
            return Probe(False, f"a handler has run for {running:.1f}s (max.poll.interval {max_handler_s:.0f}s)")
        return Probe(True, f"a handler is running, for {running:.1f}s")
    return alive(last_beat, now, max_silence_s)


def scheduler_ready(live: Probe, owned: int, restoring: int) -> Probe:
    """Ready: alive, owning partitions, and none of them still restoring (so every one dispatches)."""
    if not live.ok:
        return live
    if restoring:
        return Probe(False, f"{restoring} of its partitions still restoring")
    if not owned:
        return Probe(False, "no partition assigned")
    return Probe(True, f"{owned} partitions owned and dispatching")


def worker_ready(live: Probe, assigned: int | None) -> Probe:
    """Ready: alive and assigned at least one partition (`assigned` None: a share group, which hands out
    records rather than partitions, so subscribing is all there is)."""
    if not live.ok:
        return live
    if assigned is None:
        return Probe(True, "subscribed to its share group")
    if not assigned:
        return Probe(False, "no partition assigned")
    return Probe(True, f"{assigned} partitions assigned")


def views_ready(behind: list[str]) -> Probe:
    """Ready: every view caught up with what its topic held when asked (`behind`: the views that are not)."""
    if behind:
        return Probe(False, f"views not caught up: {', '.join(sorted(behind))}")
    return Probe(True, "views caught up")
