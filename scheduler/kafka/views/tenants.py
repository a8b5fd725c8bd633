"""The registered tenants and their quotas, as every reader of `<prefix>.tenants` sees them."""
from __future__ import annotations

from collections.abc import Mapping

from scheduler.kafka.views.compacted import CompactedView
from scheduler.wire.codec import RecordCodec
from scheduler.wire.records import Tenant
from scheduler.wire.topology import Topology


class TenantView(CompactedView[Tenant]):
    """tenant -> Tenant record from the single-partition `<prefix>.tenants` topic."""

    schema = "Tenant"

    def __init__(self, bootstrap: str, prefix: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self._by_name: dict[str, Tenant] = {}
        super().__init__(bootstrap, Topology.load().topic_name("tenants", prefix), codec, client_config)

    def _put(self, key: str, record: Tenant) -> None:
        self._by_name[key] = record
        self._changed(key, record)

    def _delete(self, key: str) -> None:
        if self._by_name.pop(key, None) is not None:
            self._changed(key, None)

    def _entries(self) -> Mapping[str, Tenant]:
        return self._by_name

    def get(self, tenant: str) -> Tenant | None:
        with self._cond:
            return self._by_name.get(tenant)

    def list(self) -> list[Tenant]:
        with self._cond:
            return [self._by_name[name] for name in sorted(self._by_name)]
