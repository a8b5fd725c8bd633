"""Keeps a worker's ScheduleView up to date from the tenant's compacted `<prefix>.schedules.<tenant>` topic.

The following itself (assigned consumer, no group, read_committed, from the beginning, in a
background thread) is the control plane's `CompactedView`; this adds only what a worker keeps
of each schedule: its version and state.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping

from scheduler.kafka.views import CompactedView, Record
from scheduler.wire.codec import RecordCodec
from scheduler.worker.view import DELETED, ScheduleView, ViewEntry

log = logging.getLogger(__name__)


class ViewFollower(CompactedView):
    schema = "ScheduleState"

    def __init__(self, bootstrap: str, topic: str, view: ScheduleView, codec: RecordCodec,
                 client_config: Mapping[str, str] | None = None) -> None:
        self.view = view
        super().__init__(bootstrap, topic, codec, client_config)

    def catch_up(self, timeout: float) -> bool:
        """Wait until the view holds what the topic held now; False (a lagging view) after `timeout`."""
        if self.wait_caught_up(timeout):
            return True
        log.warning("schedule view %s not read to its end within %.1fs; continuing with a lagging view",
                    self.topic, timeout)
        return False

    def _put(self, key: str, record: Record) -> None:
        lost = frozenset((a["occurrence_id"], a["attempt"], a["attempt_token"])
                         for a in record.get("lost_attempts", ()))
        self.view.apply(key, ViewEntry(record["version"], record["state"], lost))

    def _delete(self, key: str) -> None:
        self.view.apply(key, ViewEntry(None, DELETED))
