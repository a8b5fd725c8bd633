"""The HTTP API: one FastAPI app over a ControlPlane, its routes by resource (schedule_routes,
occurrence_routes, tenant_routes, key_routes), who may call them (access) and how failures are
answered (errors); /healthz, /readyz and /metrics (health_routes) need no key.

Reads come from the materialized views; writes go through the commands topic. Every route under
`/v1/tenants/{tenant}` first checks that the caller's key may act for that tenant and answers 404
otherwise, exactly as for a tenant or schedule that does not exist: a key of tenant A learns
nothing about tenant B.
"""
from fastapi import FastAPI

from scheduler.api.access import Access
from scheduler.api.errors import ERROR_RESPONSES, add_error_handlers
from scheduler.api.health_routes import View, add_health_routes
from scheduler.api.key_routes import add_key_routes
from scheduler.api.keys import Keys
from scheduler.api.occurrence_routes import add_occurrence_routes
from scheduler.api.plane import ControlPlane
from scheduler.api.schedule_routes import add_schedule_routes
from scheduler.api.shared_keys import SharedKeyStore
from scheduler.api.tenant_routes import add_tenant_routes


def create_app(plane: ControlPlane, keys: Keys) -> FastAPI:
    app = FastAPI(title="Kafka job scheduler control plane", version="1",
                  description="Schedules, occurrences and tenants. Every call carries `Authorization: Bearer <key>`.",
                  responses=ERROR_RESPONSES)
    add_error_handlers(app)

    def views() -> list[View]:
        key_view = [keys.view] if isinstance(keys, SharedKeyStore) else []
        return [plane.schedules, plane.occurrences, plane.tenants.view, *key_view]

    add_health_routes(app, views)
    access = Access(keys)
    add_schedule_routes(app, plane, access)
    add_occurrence_routes(app, plane, access)
    add_tenant_routes(app, plane, access)
    if isinstance(keys, SharedKeyStore):
        add_key_routes(app, keys, access.admin)
    return app
