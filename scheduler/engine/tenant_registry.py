"""Every scheduler process follows the compacted tenants topic: quotas and rates per tenant.

The topic is small (one record per tenant), so each process reads all of it
and keeps it current between loop turns, without blocking the loop.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from scheduler.codec import DecodeError

log = logging.getLogger(__name__)

Record = dict[str, Any]


class TenantRegistry:
    def __init__(self, bootstrap_servers: str, topic: str, codec: Any, defaults: Record) -> None:
        self.codec = codec
        self.defaults = defaults
        self.tenants: dict[str, Record] = {}
        self.version = 0  # bumped on every change, so rate limiters know to rebuild
        self._consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"tenants-{uuid.uuid4()}",
                                   "enable.auto.commit": False, "isolation.level": "read_committed"})
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def poll(self) -> None:
        for msg in self._consumer.consume(1000, timeout=0):
            if msg.error():
                continue
            tenant = (msg.key() or b"").decode(errors="replace")
            if msg.value() is None:
                self.tenants.pop(tenant, None)
            else:
                try:
                    self.tenants[tenant] = self.codec.decode("Tenant", msg.value())
                except DecodeError as exc:
                    log.warning("ignoring undecodable tenant record %s: %s", tenant, exc)
                    continue
            self.version += 1

    def quota(self, tenant: str, name: str) -> Any:
        found = self.tenants.get(tenant)
        return found[name] if found is not None else self.defaults[name]

    def close(self) -> None:
        self._consumer.close()
