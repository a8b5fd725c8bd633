"""The control plane's view of occurrence statuses, by id and by schedule."""
from __future__ import annotations

from collections.abc import Mapping

from scheduler.kafka.views.compacted import CompactedView
from scheduler.wire.codec import RecordCodec
from scheduler.wire.records import OccurrenceStatus
from scheduler.wire.topology import Topology


class OccurrenceView(CompactedView[OccurrenceStatus]):
    """occurrence_id -> OccurrenceStatus from `<prefix>.occurrence-status-changelog`."""

    schema = "OccurrenceStatus"

    def __init__(self, bootstrap: str, prefix: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self._by_id: dict[str, OccurrenceStatus] = {}
        self._by_schedule: dict[str, dict[str, OccurrenceStatus]] = {}
        super().__init__(bootstrap, Topology.load().topic_name("occurrence-status-changelog", prefix), codec,
                         client_config)

    def _put(self, key: str, record: OccurrenceStatus) -> None:
        self._by_id[key] = record
        self._by_schedule.setdefault(record["schedule_id"], {})[key] = record
        self._changed(key, record)

    def _delete(self, key: str) -> None:
        current = self._by_id.pop(key, None)
        if current is not None:
            self._by_schedule.get(current["schedule_id"], {}).pop(key, None)
            self._changed(key, None)

    def _entries(self) -> Mapping[str, OccurrenceStatus]:
        return self._by_id

    def for_schedule(self, tenant: str, schedule_id: str, limit: int = 50) -> list[OccurrenceStatus]:
        """The schedule's most recent occurrences (by scheduled_for, newest first) the changelog still holds."""
        with self._cond:
            mine = [s for s in self._by_schedule.get(schedule_id, {}).values() if s["tenant"] == tenant]
        return sorted(mine, key=lambda s: (s["scheduled_for_ms"], s["occurrence_id"]), reverse=True)[:limit]

    def get(self, tenant: str, occurrence_id: str) -> OccurrenceStatus | None:
        """The occurrence's status, or None when unknown or another tenant's."""
        with self._cond:
            status = self._by_id.get(occurrence_id)
        return status if status is not None and status["tenant"] == tenant else None
