"""HTTP routes of the tenants: register, list, get, change quotas, delete (all but reads need an admin key)."""
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Response

from scheduler.api.access import Access
from scheduler.api.errors import not_found
from scheduler.api.models import Quotas, TenantIn
from scheduler.api.plane import ControlPlane

Record = dict[str, Any]

if TYPE_CHECKING:  # what mypy sees of Access's dependency types, which each app makes at run time
    from scheduler.api.keys import Principal

    Tenant = str
    Admin = Principal
    Caller = Principal


def add_tenant_routes(app: FastAPI, plane: ControlPlane, access: Access) -> None:
    if not TYPE_CHECKING:
        Tenant, Admin, Caller = access.tenant, access.admin, access.caller

    @app.post("/v1/tenants", status_code=201, tags=["tenants"])
    def register_tenant(_: Admin, body: TenantIn) -> Record:
        """Register a tenant: its topics are created and its quotas written (admin)."""
        quotas = body.model_dump(exclude_none=True, exclude={"tenant"})
        return plane.tenants.register(body.tenant, **quotas)

    @app.get("/v1/tenants", tags=["tenants"])
    def list_tenants(caller: Caller) -> Record:
        """All tenants for an admin key; a tenant key sees its own only."""
        return {"tenants": [t for t in plane.tenants.list() if caller.may_access(t["tenant"])]}

    @app.get("/v1/tenants/{tenant}", tags=["tenants"])
    def get_tenant(tenant: Tenant) -> Record:
        found = plane.tenants.view.get(tenant)
        if found is None:
            raise not_found(f"tenant {tenant!r}")
        return dict(found)  # the response body: a plain dict

    @app.patch("/v1/tenants/{tenant}", tags=["tenants"])
    def set_quotas(tenant: Tenant, _: Admin, body: Quotas) -> Record:
        """Change some quotas (admin)."""
        return plane.tenants.set_quota(tenant, **body.model_dump(exclude_none=True))

    @app.delete("/v1/tenants/{tenant}", status_code=204, tags=["tenants"])
    def delete_tenant(tenant: Tenant, _: Admin, force: bool = False) -> Response:
        """Delete a tenant's record (admin); refused with 409 while it has active or paused schedules."""
        plane.tenants.delete(tenant, plane.schedules, force)
        return Response(status_code=204)
