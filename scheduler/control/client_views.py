"""The client's reads: its views of the compacted schedule and occurrence topics, opened on first use and
caught up before each read, so a read after a command's result sees what the command did."""
from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from scheduler.control.errors import NotFound, Unavailable
from scheduler.kafka.views import CompactedView, OccurrenceView, ScheduleView
from scheduler.wire.codec import Codec
from scheduler.wire.records import OccurrenceStatus, ScheduleState

Record = dict[str, Any]


class ClientViews:
    """What `SchedulerClient` reads with; it sets these attributes."""

    bootstrap_servers: str
    prefix: str
    timeout_s: float
    client_config: Mapping[str, str] | None
    codec: Codec
    _lock: threading.Lock
    _views: dict[str, CompactedView]

    def schedule_view(self) -> ScheduleView:
        """The client's view of `<prefix>.schedules`, opened on first use."""
        with self._lock:
            if "schedules" not in self._views:
                self._views["schedules"] = ScheduleView(self.bootstrap_servers, self.prefix, self.codec,
                                                        self.client_config)
            view = self._views["schedules"]
        assert isinstance(view, ScheduleView)
        return view

    def occurrence_view(self) -> OccurrenceView:
        with self._lock:
            if "occurrences" not in self._views:
                self._views["occurrences"] = OccurrenceView(self.bootstrap_servers, self.prefix, self.codec,
                                                            self.client_config)
            view = self._views["occurrences"]
        assert isinstance(view, OccurrenceView)
        return view

    def _caught_up(self, view: CompactedView) -> None:
        if not view.wait_caught_up(self.timeout_s):
            raise Unavailable("TIMEOUT", f"view of {view.topic} did not catch up in {self.timeout_s:g}s")

    def get(self, tenant: str, schedule_id: str) -> ScheduleState:
        """The schedule's current state (read-your-writes: the view is caught up first)."""
        view = self.schedule_view()
        self._caught_up(view)
        state = view.get(tenant, schedule_id)
        if state is None:
            raise NotFound("UNKNOWN_SCHEDULE", f"schedule {schedule_id!r} does not exist")
        return state

    def list(self, tenant: str, state: str | None = None) -> list[ScheduleState]:
        view = self.schedule_view()
        self._caught_up(view)
        return view.list(tenant, state)

    def occurrence(self, tenant: str, occurrence_id: str) -> OccurrenceStatus:
        view = self.occurrence_view()
        self._caught_up(view)
        status = view.get(tenant, occurrence_id)
        if status is None:
            raise NotFound("UNKNOWN_OCCURRENCE", f"occurrence {occurrence_id!r} does not exist")
        return status
