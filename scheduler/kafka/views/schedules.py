"""The control plane's view of every schedule, by id and by tenant (`<prefix>.schedules`)."""
from __future__ import annotations

import time
from collections.abc import Mapping

from scheduler.kafka.views.compacted import CompactedView
from scheduler.wire.codec import RecordCodec
from scheduler.wire.records import ScheduleState
from scheduler.wire.topology import Topology

# Schedules in these states hold (or are asking for) a slot of the tenant's quota and can still fire.
LIVE_STATES = frozenset({"ACTIVE", "PAUSED", "PENDING"})
# A PENDING schedule waits for the quota check of its CREATE: it does not exist yet for readers.
HIDDEN_STATES = frozenset({"PENDING"})


class ScheduleView(CompactedView[ScheduleState]):
    """schedule_id -> ScheduleState from `<prefix>.schedules`, indexed by tenant."""

    schema = "ScheduleState"

    def __init__(self, bootstrap: str, prefix: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self._by_id: dict[str, ScheduleState] = {}
        self._by_tenant: dict[str, dict[str, ScheduleState]] = {}
        super().__init__(bootstrap, Topology.load().topic_name("schedules", prefix), codec, client_config)

    def _put(self, key: str, record: ScheduleState) -> None:
        current = self._by_id.get(key)
        # A re-published older version (an engine restore) must not undo a newer one.
        if current is not None and current["version"] > record["version"]:
            return
        if current is not None and current["tenant"] != record["tenant"]:
            self._by_tenant.get(current["tenant"], {}).pop(key, None)
        self._by_id[key] = record
        self._by_tenant.setdefault(record["tenant"], {})[key] = record
        self._changed(key, record)

    def _delete(self, key: str) -> None:
        current = self._by_id.pop(key, None)
        if current is not None:
            self._by_tenant.get(current["tenant"], {}).pop(key, None)
            self._changed(key, None)

    def _entries(self) -> Mapping[str, ScheduleState]:
        return self._by_id

    def get(self, tenant: str, schedule_id: str) -> ScheduleState | None:
        """The schedule, or None when it does not exist or belongs to another tenant."""
        with self._cond:
            state = self._by_tenant.get(tenant, {}).get(schedule_id)
        return None if state is None or state["state"] in HIDDEN_STATES else state

    def list(self, tenant: str, state: str | None = None, after: str | None = None,
             limit: int | None = None) -> list[ScheduleState]:
        """The tenant's schedules ordered by schedule_id, from the one after `after` (a page cursor)."""
        with self._cond:
            mine = list(self._by_tenant.get(tenant, {}).values())
        selected = sorted((s for s in mine if s["state"] not in HIDDEN_STATES
                           and (state is None or s["state"] == state)
                           and (after is None or s["schedule_id"] > after)), key=lambda s: s["schedule_id"])
        return selected if limit is None else selected[:limit]

    def count_live(self, tenant: str) -> int:
        with self._cond:
            return sum(1 for s in self._by_tenant.get(tenant, {}).values() if s["state"] in LIVE_STATES)

    def wait_for_version(self, schedule_id: str, version: int, timeout: float) -> ScheduleState | None:
        """The schedule once the view holds `version` or newer; None if it did not arrive in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                current = self._by_id.get(schedule_id)
                if current is not None and current["version"] >= version and current["state"] not in HIDDEN_STATES:
                    return current
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
