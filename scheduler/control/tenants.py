"""Tenant registry: the `Tenant` records of the compacted `<prefix>.tenants` topic.

The control plane writes the records; the engine reads them for the quotas it
enforces. Registering a tenant creates its topics first, so its workers can
subscribe before its first schedule fires. Deleting one writes a tombstone and
keeps its topics (their data may still be wanted; remove them with Kafka's tools).
Two operators registering the same name at once both "win" (last write wins on
the single partition): registration is an operator action, not a hot path.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from scheduler.control.errors import Conflict, NotFound, Unavailable, ValidationError
from scheduler.kafka.admin import TopicEnsureError, ensure_tenant_topics
from scheduler.kafka.clients import DURABLE_PRODUCER, client_settings, connection, delivered_or_why
from scheduler.kafka.replication import ReplicationError
from scheduler.kafka.views import ScheduleView, TenantView
from scheduler.kafka.views.writer import ViewWriter
from scheduler.wire import vocabulary
from scheduler.wire.codec import Codec
from scheduler.wire.records import Tenant
from scheduler.wire.topology import InvalidNameError, Topology, validate_name_part

Record = dict[str, Any]

MAX_TENANT_LENGTH = 100

# Quota fields of the Tenant record with their defaults (the schema's: every field that has one), and their
# lower bounds.
QUOTA_DEFAULTS: dict[str, int | float] = vocabulary.field_defaults("Tenant")
_MINIMUM: dict[str, float] = {"max_active_schedules": 0, "trigger_rate_per_s": 1e-3, "max_concurrency": 1,
                              "catch_up_rate_per_s": 1e-3, "retry_budget_per_min": 0}
_INT_FIELDS = frozenset({"max_active_schedules", "max_concurrency", "retry_budget_per_min"})
_MAXIMUM = 2**31 - 1


def validate_tenant_name(name: str) -> str:
    """A tenant name is part of topic names (and of ACL prefixes), so Kafka's rules apply."""
    try:
        validate_name_part("tenant", name)
    except InvalidNameError as exc:
        raise ValidationError("INVALID_TENANT", str(exc)) from exc
    if len(name) > MAX_TENANT_LENGTH:
        raise ValidationError("INVALID_TENANT", f"tenant name longer than {MAX_TENANT_LENGTH} characters")
    return name


def validate_quotas(quotas: dict[str, Any]) -> dict[str, int | float]:
    """Known fields only, numbers within bounds; ints stay ints (the schema's long/int fields)."""
    unknown = set(quotas) - set(QUOTA_DEFAULTS)
    if unknown:
        raise ValidationError("INVALID_QUOTA", f"unknown quota fields: {sorted(unknown)}")
    checked: dict[str, int | float] = {}
    for name, value in quotas.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValidationError("INVALID_QUOTA", f"{name}: a finite number is required")
        if name in _INT_FIELDS and value != int(value):
            raise ValidationError("INVALID_QUOTA", f"{name}: an integer is required")
        if not _MINIMUM[name] <= value <= _MAXIMUM:
            raise ValidationError("INVALID_QUOTA", f"{name}: must be between {_MINIMUM[name]:g} and {_MAXIMUM}")
        checked[name] = int(value) if name in _INT_FIELDS else float(value)
    return checked


@dataclass
class TenantRegistry(ViewWriter[TenantView]):
    bootstrap_servers: str
    prefix: str = "sched"
    timeout_s: float = 30.0
    # librdkafka settings for every Kafka client of the registry (the CLI's quiet log, credentials).
    client_config: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        self.codec = Codec.default()
        self.topology = Topology.load()
        self.topic = self.topology.topic_name("tenants", self.prefix)
        self.connection = connection(self.bootstrap_servers, self.client_config)
        self.view = TenantView(self.bootstrap_servers, self.prefix, self.codec, self.client_config)
        self.producer = Producer(client_settings(self.connection, DURABLE_PRODUCER))

    def _fresh_view(self) -> TenantView:
        if not self.view.wait_caught_up(self.timeout_s):
            raise Unavailable("TIMEOUT", f"view of {self.topic} did not catch up in {self.timeout_s:g}s")
        return self.view

    def get(self, name: str) -> Tenant:
        record = self._fresh_view().get(name)
        if record is None:
            raise NotFound("UNKNOWN_TENANT", f"tenant {name!r} is not registered")
        return record

    def list(self) -> list[Tenant]:
        return self._fresh_view().list()

    def register(self, name: str, **quotas: Any) -> Record:
        validate_tenant_name(name)
        checked = validate_quotas(quotas)
        if self._fresh_view().get(name) is not None:
            raise Conflict("ALREADY_EXISTS", f"tenant {name!r} is already registered")
        try:
            ensure_tenant_topics(self.connection, self.topology, self.prefix, name)
        except (ReplicationError, TopicEnsureError) as exc:  # a factor the cluster cannot hold: nothing registered
            raise Unavailable("UNAVAILABLE", str(exc)) from exc
        record = {"tenant": name, **QUOTA_DEFAULTS, **checked, "created_at_ms": int(time.time() * 1000)}
        self._write(name, record)
        return record

    def set_quota(self, name: str, **quotas: Any) -> Record:
        checked = validate_quotas(quotas)
        record = {**self.get(name), **checked}
        self._write(name, record)
        return record

    def delete(self, name: str, schedules: ScheduleView, force: bool = False) -> None:
        """Refused while the tenant has active or paused schedules (per the caught-up view) unless forced."""
        self.get(name)
        if not schedules.wait_caught_up(self.timeout_s):
            raise Unavailable("TIMEOUT", "the schedules view did not catch up")
        live = schedules.count_live(name)
        if live and not force:
            raise Conflict("TENANT_HAS_SCHEDULES",
                           f"tenant {name!r} has {live} active or paused schedules: cancel them or force")
        self._write(name, None)

    def _write(self, name: str, record: Record | None) -> None:
        value = None if record is None else self.codec.encode("Tenant", record)
        failed = delivered_or_why(self.producer, self.topic, name.encode(), value, self.timeout_s)
        if failed is not None:
            raise Unavailable("UNAVAILABLE", failed)
        self._fresh_view()  # read-your-writes for whoever serves reads from this registry's view
