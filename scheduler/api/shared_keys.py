"""API keys shared by every API server: the compacted `<prefix>.api-keys` topic, followed by each.

Every server keeps the topic in memory (an ApiKeyView, like the other views) and checks presented
keys against it, so a key created through any server, or `scheduler api keys create`, works on all
of them once their views have read it, and a revocation (a tombstone) is refused by all of them as
soon as they read it: a poll of the follower thread, well under a second on a healthy cluster.
Only sha256 of a key's secret is in the topic; the key itself is shown once, to its creator.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Producer

from scheduler.api.keys import Principal, _digest, check_key, new_key
from scheduler.control.client import NotFound, Unavailable
from scheduler.control.tenants import validate_tenant_name
from scheduler.kafka.clients import DURABLE_PRODUCER, client_settings, connection, delivered_or_why
from scheduler.kafka.views import ApiKeyView
from scheduler.kafka.views.writer import ViewWriter
from scheduler.wire.codec import Codec
from scheduler.wire.records import ApiKey
from scheduler.wire.topology import Topology

Record = dict[str, Any]


class SharedKeyStore(ViewWriter[ApiKeyView]):
    def __init__(self, bootstrap: str, prefix: str, timeout_s: float = 30.0,
                 client_config: Mapping[str, str] | None = None) -> None:
        self.codec = Codec.default()
        self.topic = Topology.load().topic_name("api-keys", prefix)
        self.timeout_s = timeout_s
        self.view = ApiKeyView(bootstrap, prefix, self.codec, client_config)
        self.producer = Producer(client_settings(connection(bootstrap, client_config), DURABLE_PRODUCER))

    def verify(self, presented: str) -> Principal | None:
        return check_key(presented, self.view.get)

    def create(self, tenant: str | None) -> str:
        """A new key for `tenant` (None: admin), returned once; it works here as soon as this returns."""
        if tenant is not None:
            validate_tenant_name(tenant)
        key_id, secret, key = new_key()
        self._write(key_id, {"key_id": key_id, "tenant": tenant, "sha256": _digest(secret),
                             "created_at_ms": int(time.time() * 1000)})
        return key

    def list(self) -> list[Record]:
        """Ids and tenants only: the hashes stay in the topic."""
        self._caught_up()
        return [{"key_id": r["key_id"], "tenant": r["tenant"], "admin": r["tenant"] is None,
                 "created_at_ms": r["created_at_ms"]} for r in self.view.list()]

    def revoke(self, key_id: str) -> None:
        self._caught_up()
        if self.view.get(key_id) is None:
            raise NotFound("UNKNOWN_KEY", f"no API key {key_id!r}")
        self._write(key_id, None)

    def _caught_up(self) -> None:
        if not self.view.wait_caught_up(self.timeout_s):
            raise Unavailable("TIMEOUT", f"view of {self.topic} did not catch up in {self.timeout_s:g}s")

    def _write(self, key_id: str, record: ApiKey | None) -> None:
        value = None if record is None else self.codec.encode("ApiKey", record)
        failed = delivered_or_why(self.producer, self.topic, key_id.encode(), value, self.timeout_s)
        if failed is not None:
            raise Unavailable("UNAVAILABLE", failed)
        self._caught_up()  # read-your-writes on this server
