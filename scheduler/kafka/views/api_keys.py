"""The view of the shared API keys, one compacted topic that every API server follows."""
from __future__ import annotations

from collections.abc import Mapping

from scheduler.kafka.views.compacted import CompactedView
from scheduler.wire.codec import RecordCodec
from scheduler.wire.records import ApiKey
from scheduler.wire.topology import Topology


class ApiKeyView(CompactedView[ApiKey]):
    """key_id -> ApiKey from `<prefix>.api-keys`: what every API server checks presented keys against."""

    schema = "ApiKey"

    def __init__(self, bootstrap: str, prefix: str, codec: RecordCodec | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self._keys: dict[str, ApiKey] = {}
        super().__init__(bootstrap, Topology.load().topic_name("api-keys", prefix), codec, client_config)

    def _put(self, key: str, record: ApiKey) -> None:
        self._keys[key] = record

    def _delete(self, key: str) -> None:
        self._keys.pop(key, None)

    def get(self, key_id: str) -> ApiKey | None:
        with self._cond:
            return self._keys.get(key_id)

    def list(self) -> list[ApiKey]:
        with self._cond:
            return sorted(self._keys.values(), key=lambda r: r["key_id"])
