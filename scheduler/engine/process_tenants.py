"""What a scheduler process knows of tenants: quotas and rates from the followed tenants topic (or the
process's defaults), the rate limits that apply them, and which tenants' topics exist already."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.engine.config import EngineConfig
from scheduler.engine.fairness import RateLimits
from scheduler.engine.task_context import TenantPolicy
from scheduler.kafka.admin import ensure_tenants_topics
from scheduler.kafka.views import TenantView
from scheduler.wire.codec import RecordCodec
from scheduler.wire.topology import Topology

TENANT_CATCH_UP_S = 5.0  # longest wait for the tenants view before a command of an unknown tenant is refused


class ProcessTenants:
    def __init__(self, config: EngineConfig, topology: Topology, common: dict[str, Any]) -> None:
        self.config = config
        self.topology = topology
        self.common = common
        self.defaults = {
            "max_active_schedules": config.max_active_schedules,
            "trigger_rate_per_s": config.trigger_rate_per_s,
            "catch_up_rate_per_s": config.catch_up_rate_per_s,
            "retry_budget_per_min": config.retry_budget_per_min,
            "max_concurrency": config.max_concurrency,
        }
        self.view: TenantView | None = None  # quotas and rates, followed in the background once running
        self.known: set[str] = set()  # tenants whose topics exist
        self.trigger_limits = RateLimits(self._trigger_rate)
        self.catch_up_limits = RateLimits(lambda tenant: self.quota(tenant, "catch_up_rate_per_s"))
        self.retry_limits = RateLimits(lambda tenant: self.quota(tenant, "retry_budget_per_min") / 60,
                                       burst_seconds=60)
        self._topic_names: dict[tuple[str, str, str | None], str] = {}

    def follow(self, codec: RecordCodec, existing_topics: set[str]) -> None:
        config = self.config
        self.view = TenantView(config.bootstrap_servers, config.prefix, codec, config.client_config)
        marker = f"{config.prefix}.occurrences."
        self.known.update(name[len(marker):].rsplit(".", 1)[0] for name in existing_topics if name.startswith(marker))

    def close(self) -> None:
        if self.view is not None:
            self.view.close()

    def policy(self) -> TenantPolicy:
        return TenantPolicy(topic=self.topic, registered=self.registered,
                            max_active_schedules=lambda tenant: self.quota(tenant, "max_active_schedules"),
                            max_concurrency=lambda tenant: self.quota(tenant, "max_concurrency"),
                            retry_allowed=self._retry_allowed)

    def ensure_topics(self, tenants: set[str]) -> None:
        """Before a turn produces records for tenants: their topics, made once (an admin round trip each,
        made before the turn's first record, so no Kafka transaction waits on it)."""
        missing = tenants - self.known
        if missing:
            ensure_tenants_topics(self.common, self.topology, self.config.prefix, sorted(missing))
            self.known.update(missing)

    def quota(self, tenant: str, name: str) -> Any:
        found: Mapping[str, Any] | None = self.view.get(tenant) if self.view is not None else None
        return found[name] if found is not None else self.defaults[name]

    def registered(self, tenant: str) -> bool:
        """Asked before a command of `tenant` is applied. A tenant missing from the followed view may have
        been registered just before its first command: the view catches up before the answer is no."""
        if self.config.open_tenants:
            return True
        assert self.view is not None
        if self.view.get(tenant) is not None:
            return True
        self.view.wait_caught_up(TENANT_CATCH_UP_S)
        return self.view.get(tenant) is not None

    def topic(self, key: str, tenant: str, priority: str | None) -> str:
        cache_key = (key, tenant, priority)
        name = self._topic_names.get(cache_key)
        if name is None:
            name = self._topic_names[cache_key] = self.topology.topic_name(
                key, self.config.prefix, tenant=tenant, priority=priority)
        return name

    def _trigger_rate(self, tenant: str) -> float:
        override = self.config.tenant_trigger_rates.get(tenant)
        return override if override is not None else self.quota(tenant, "trigger_rate_per_s")

    def _retry_allowed(self, tenant: str, now_ms: int) -> bool:
        return self.retry_limits.bucket(tenant).take(1, now_ms) == 1
