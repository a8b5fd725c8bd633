"""What the tasks have due, read at the edges of a loop turn: whether a turn has work, how long its poll may
wait, and each partition's due-and-not-sent figures for the backlog gauges.

Pure reads of the tasks' scans and timelines, with `now_ms` passed in (scheduler/engine/runtime.py runs the
turn); the pacing decision itself (`poll_timeout_s`) takes plain facts and a reader of the next due entry.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from scheduler.engine.metrics import PartitionReading
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import CATCH_UP, DISPATCH, WAKE

BACKLOG_COUNTED = 1_000  # due entries (and due fires not planned) counted per partition for the backlog gauge
LANES = (DISPATCH, CATCH_UP)


@dataclass(frozen=True)
class Pace:
    """What the poll's wait depends on besides the next due entry."""

    restoring: bool      # a partition is restoring: its slices run between polls
    held_up: bool        # the last turn had due work and could send none of it (rate or running-slot limits)
    stage_filling: bool  # an open stage is writing its records ahead of its instant
    stage_under_way: bool  # a stage is open: it keeps its own timing
    turn_began_ms: int   # when the last turn with work began
    idle_poll_ms: int
    turn_interval_ms: int


def next_due_ms(tasks: Iterable[SchedulerTask]) -> int | None:
    """The soonest entry due in any task's strict or catch-up lane."""
    dues = [due for task in tasks for lane in LANES if (due := task.scan.next_due_ms(lane)) is not None]
    return min(dues, default=None)


def poll_timeout_s(now_ms: int, next_due: Callable[[], int | None], pace: Pace) -> float:
    """Until the next due entry, but no sooner than a turn interval after the last turn began; after a
    turn that could send nothing of what was due (all held back by rate or running-slot limits) the idle
    poll, so waiting on a limit does not spin the loop. Without the interval a steady stream of due
    entries (one every 0.4 ms at the daily average) had the loop commit a transaction for every few of
    them, and the turns' fixed cost became most of the engine's CPU. An open stage keeps its timing.
    `next_due` (the soonest due entry) is asked only when it counts: a filling stage spins the loop."""
    if pace.restoring:
        return 0.0
    if pace.held_up:
        return pace.idle_poll_ms / 1000.0
    if pace.stage_filling:
        return 0.0
    soonest_ms = next_due()
    wait_ms = pace.idle_poll_ms if soonest_ms is None else min(pace.idle_poll_ms, soonest_ms - now_ms)
    if not pace.stage_under_way:
        wait_ms = max(wait_ms, pace.turn_began_ms + pace.turn_interval_ms - now_ms)
    return max(0.0, wait_ms / 1000.0)


def has_due_entries(tasks: Iterable[SchedulerTask], now_ms: int) -> bool:
    return any((due := task.scan.next_due_ms(lane)) is not None and due <= now_ms
               for task in tasks for lane in LANES)


def partition_readings(tasks: Mapping[int, SchedulerTask], now_ms: int) -> list[PartitionReading]:
    """What is due and not sent per partition: entries due, and fires due but not yet planned."""
    return [PartitionReading(p, task.scan.next_due_ms(DISPATCH), task.timeline.next_wake_ms(),
                             task.scan.count_due(DISPATCH, now_ms, BACKLOG_COUNTED),
                             task.scan.count_due(WAKE, now_ms, BACKLOG_COUNTED))
            for p, task in tasks.items()]
