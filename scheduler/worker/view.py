"""The tenant's schedule view: schedule_id -> (version, state), from `<prefix>.schedules.<tenant>`.

Workers check it before side effects. It follows a compacted topic, so it may lag behind the
scheduler: an occurrence of a schedule the view has not seen yet, or made from a version newer
than the view's, is processed (the view is behind, not the occurrence).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from scheduler.worker.occurrence import AttemptContext, Occurrence

# A tombstone (the schedule was deleted) is kept as this state, so its occurrences are skipped.
DELETED = "DELETED"
# States in which occurrences of the current version must not run.
INACTIVE = frozenset({"CANCELED", "PAUSED", DELETED})
# States that stop an attempt already running (pausing lets a running attempt finish).
ENDED = frozenset({"CANCELED", DELETED})


@dataclass(frozen=True)
class ViewEntry:
    version: int | None  # None for a deletion (a tombstone carries no version)
    state: str
    lost: frozenset[tuple[str, int, str]] = frozenset()  # (occurrence_id, attempt, token) that lost their lease

    def lost_tokens(self) -> set[str]:
        return {token for _, _, token in self.lost}


def staleness(entry: ViewEntry | None, occurrence: Occurrence) -> str | None:
    """Why `occurrence` must not run according to `entry`, or None when it may run."""
    if entry is None:
        return None
    if entry.state == DELETED:
        return "schedule was deleted"
    assert entry.version is not None
    if entry.version > occurrence.schedule_version:
        return (f"schedule is at version {entry.version} ({entry.state}); "
                f"the occurrence was made from version {occurrence.schedule_version}")
    if entry.version == occurrence.schedule_version and entry.state in INACTIVE:
        return f"schedule is {entry.state}"
    return None


class ScheduleView:
    """Latest entry per schedule, updated by a follower thread and read by the worker.

    Running attempts register their context with `watch`: an update that ends the schedule
    (CANCELED, deleted) sets its `cancelled` while the handler still runs, and one that names
    the attempt's token among the schedule's lost attempts sets `lease_lost` too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, ViewEntry] = {}
        self._watchers: dict[str, set[AttemptContext]] = {}

    def apply(self, schedule_id: str, entry: ViewEntry) -> None:
        with self._lock:
            current = self._entries.get(schedule_id)
            # A compacted topic read from the start never goes backwards, but a re-published older
            # version (e.g. after an engine restore) must not undo a newer one.
            if (current is not None and current.version is not None and entry.version is not None
                    and entry.version < current.version):
                return
            self._entries[schedule_id] = entry
            watchers = list(self._watchers.get(schedule_id, ()))
        for ctx in watchers:
            _notify(ctx, entry)

    def get(self, schedule_id: str) -> ViewEntry | None:
        with self._lock:
            return self._entries.get(schedule_id)

    def staleness(self, occurrence: Occurrence) -> str | None:
        return staleness(self.get(occurrence.schedule_id), occurrence)

    def is_lost(self, occurrence: Occurrence) -> bool:
        """Has the scheduler recorded this attempt of the occurrence LOST (and retried it under another)?"""
        entry = self.get(occurrence.schedule_id)
        return entry is not None and any(oid == occurrence.occurrence_id and attempt == occurrence.attempt
                                         for oid, attempt, _ in entry.lost)

    def watch(self, schedule_id: str, ctx: AttemptContext) -> None:
        with self._lock:
            self._watchers.setdefault(schedule_id, set()).add(ctx)
            entry = self._entries.get(schedule_id)
        if entry is not None:
            _notify(ctx, entry)

    def unwatch(self, schedule_id: str, ctx: AttemptContext) -> None:
        with self._lock:
            watchers = self._watchers.get(schedule_id)
            if watchers is not None:
                watchers.discard(ctx)
                if not watchers:
                    del self._watchers[schedule_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def _notify(ctx: AttemptContext, entry: ViewEntry) -> None:
    if ctx.attempt_token in entry.lost_tokens():
        ctx.lose_lease()
    elif entry.state in ENDED:
        ctx.cancelled.set()
