"""The control plane's moving parts, opened together: command client, views, tenant registry."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.control.client import SchedulerClient
from scheduler.control.tenants import TenantRegistry
from scheduler.kafka.views import OccurrenceView, ScheduleView


@dataclass
class ControlPlane:
    client: SchedulerClient
    tenants: TenantRegistry

    @classmethod
    def open(cls, bootstrap: str, prefix: str, timeout_s: float = 30.0,
             client_config: Mapping[str, str] | None = None) -> ControlPlane:
        """Opens the views at once and reads them to their end, so the first request sees every schedule.
        `client_config`: librdkafka settings for every client (e.g. SASL_SSL), as --client-config gives them."""
        client = SchedulerClient(bootstrap, prefix, timeout_s, client_config=client_config)
        plane = cls(client, TenantRegistry(bootstrap, prefix, timeout_s, client_config))
        for view in (plane.schedules, plane.occurrences, plane.tenants.view):
            view.wait_caught_up(timeout_s)
        return plane

    @property
    def schedules(self) -> ScheduleView:
        return self.client.schedule_view()

    @property
    def occurrences(self) -> OccurrenceView:
        return self.client.occurrence_view()

    def close(self) -> None:
        self.tenants.close()
        self.client.close()
