"""HTTP routes of a tenant's occurrences: an occurrence's status, and a rerun of a finished one."""
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Path

from scheduler.api.access import Access
from scheduler.api.models import result_json
from scheduler.api.plane import ControlPlane
from scheduler.control.client import NotFound

Record = dict[str, Any]

if TYPE_CHECKING:  # what mypy sees of Access's dependency types, which each app makes at run time
    Tenant = str


def add_occurrence_routes(app: FastAPI, plane: ControlPlane, access: Access) -> None:
    if not TYPE_CHECKING:
        Tenant = access.tenant

    def status_of(tenant: str, occurrence_id: str) -> Record:
        status = plane.occurrences.get(tenant, occurrence_id)
        if status is None:
            raise NotFound("UNKNOWN_OCCURRENCE", f"occurrence {occurrence_id!r} does not exist")
        return dict(status)  # the response body: a plain dict

    @app.get("/v1/tenants/{tenant}/occurrences/{occurrence_id}", tags=["occurrences"])
    def get_occurrence(tenant: Tenant, occurrence_id: Annotated[str, Path(max_length=64)]) -> Record:
        return status_of(tenant, occurrence_id)

    @app.post("/v1/tenants/{tenant}/occurrences/{occurrence_id}/rerun", tags=["occurrences"])
    def rerun_occurrence(tenant: Tenant, occurrence_id: Annotated[str, Path(max_length=64)]) -> Record:
        """Dispatch a finished or dead occurrence again, with the same occurrence_id."""
        status = status_of(tenant, occurrence_id)
        return {"result": result_json(plane.client.rerun(tenant, occurrence_id, status["schedule_id"]))}
