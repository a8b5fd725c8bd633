"""The HTTP API: routes, authentication and error mapping.

Reads come from the materialized views; writes go through the commands topic
and, once ACCEPTED, wait (briefly) until the view holds the new version, so a
client reads its own writes from the same server. Every route under
`/v1/tenants/{tenant}` first checks that the caller's key may act for that
tenant and answers 404 otherwise, exactly as for a tenant or schedule that does
not exist: a key of tenant A learns nothing about tenant B.
"""
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from scheduler.api.key_routes import add_key_routes
from scheduler.api.keys import Keys, Principal
from scheduler.api.models import (
    BackfillIn,
    CreateIn,
    Error,
    PatchIn,
    PreviewIn,
    Quotas,
    ScheduleId,
    ScheduleStatus,
    TenantIn,
    UpdateIn,
    result_json,
    schedule_json,
)
from scheduler.api.plane import ControlPlane
from scheduler.api.shared_keys import SharedKeyStore
from scheduler.control.client import (
    CommandTimeout,
    Conflict,
    NotFound,
    QuotaExceeded,
    SchedulerError,
    Unavailable,
    ValidationError,
    VersionConflict,
    dry_run_diff,
    preview,
)
from scheduler.kafka.views import ViewUnavailable

Record = dict[str, Any]

VIEW_WAIT_S = 5.0

# Most specific first: VersionConflict is a Conflict, CommandTimeout is Unavailable.
STATUS_BY_ERROR: tuple[tuple[type[SchedulerError], int], ...] = (
    (ValidationError, 422), (NotFound, 404), (VersionConflict, 412), (Conflict, 409),
    (QuotaExceeded, 429), (CommandTimeout, 504), (Unavailable, 503),
)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status)


def _status_of(exc: SchedulerError) -> int:
    for kind, status in STATUS_BY_ERROR:
        if isinstance(exc, kind):
            return status
    return 502  # a reason code this server does not know: the engine is newer


def _not_found(what: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"{what} not found")


def _if_match(value: str | None) -> int | None:
    """An If-Match header holds the schedule version as an ETag: "3", W/"3" or 3; * matches any."""
    if value is None or value.strip() == "*":
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not text.isdigit() or len(text) > 18:
        raise ApiError(422, "INVALID_REQUEST", "If-Match: a schedule version (an ETag such as \"3\") is required")
    return int(text)


def _expected(header: str | None, body: int | None) -> int | None:
    from_header = _if_match(header)
    if from_header is not None and body is not None and from_header != body:
        raise ApiError(422, "INVALID_REQUEST", "If-Match and expected_version disagree")
    return from_header if from_header is not None else body


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": Error} for status in (401, 404, 409, 412, 422, 429, 503, 504)
}


def create_app(plane: ControlPlane, keys: Keys) -> FastAPI:
    app = FastAPI(title="Kafka job scheduler control plane", version="1",
                  description="Schedules, occurrences and tenants. Every call carries `Authorization: Bearer <key>`.",
                  responses=ERROR_RESPONSES)
    bearer = HTTPBearer(auto_error=False)

    @app.exception_handler(ApiError)
    def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message)

    @app.exception_handler(SchedulerError)
    def _scheduler_error(_: Request, exc: SchedulerError) -> JSONResponse:
        return _error(_status_of(exc), exc.reason, exc.message)

    @app.exception_handler(ViewUnavailable)
    def _view_unavailable(_: Request, exc: ViewUnavailable) -> JSONResponse:
        return _error(503, "UNAVAILABLE", str(exc))

    @app.exception_handler(RequestValidationError)
    def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        return _error(422, "INVALID_REQUEST", details or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, "NOT_FOUND" if exc.status_code == 404 else "HTTP_ERROR", str(exc.detail))

    @app.exception_handler(UnicodeError)
    def _unicode(_: Request, exc: UnicodeError) -> JSONResponse:
        return _error(422, "INVALID_REQUEST", f"text is not valid Unicode: {exc}")

    def principal(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
        found = keys.verify(creds.credentials) if creds is not None else None
        if found is None:
            raise ApiError(401, "UNAUTHENTICATED", "a valid API key is required: Authorization: Bearer <key>")
        return found

    Caller = Annotated[Principal, Depends(principal)]

    def scope(tenant: str, caller: Caller) -> str:
        """The path's tenant, if the caller's key may act for it; 404 otherwise (no existence leak)."""
        if not caller.may_access(tenant):
            raise _not_found(f"tenant {tenant!r}")
        return tenant

    Tenant = Annotated[str, Depends(scope)]

    def admin(caller: Caller) -> Principal:
        if not caller.admin:
            raise ApiError(403, "FORBIDDEN", "an admin key is required")
        return caller

    Admin = Annotated[Principal, Depends(admin)]

    def registered(tenant: str) -> None:
        if plane.tenants.view.get(tenant) is None:
            raise ApiError(404, "UNKNOWN_TENANT", f"tenant {tenant!r} is not registered")

    def schedule_of(tenant: str, schedule_id: str) -> Record:
        state = plane.schedules.get(tenant, schedule_id)
        if state is None:
            raise NotFound("UNKNOWN_SCHEDULE", f"schedule {schedule_id!r} does not exist")
        return state

    def written(result: Record, response: Response) -> Record:
        """The command's result with the schedule as the view holds it once it has caught up."""
        state = plane.schedules.wait_for_version(result["schedule_id"], result["version"] or 0, VIEW_WAIT_S)
        body: Record = {"result": result_json(result)}
        if state is not None:
            body["schedule"] = schedule_json(state)
            response.headers["ETag"] = f'"{state["version"]}"'
        return body

    def command(call: Callable[[], Record], response: Response) -> Record:
        return written(call(), response)

    # -- schedules -----------------------------------------------------------------

    @app.post("/v1/tenants/{tenant}/schedules", status_code=201, tags=["schedules"])
    def create_schedule(tenant: Tenant, body: CreateIn, response: Response,
                        idempotency_key: Annotated[str | None, Header(max_length=200)] = None) -> Record:
        """Create a schedule; repeating a request with the same Idempotency-Key creates nothing new."""
        registered(tenant)
        return command(lambda: plane.client.create(tenant, body.spec.record(), schedule_id=body.schedule_id,
                                                   idempotency_key=idempotency_key), response)

    @app.get("/v1/tenants/{tenant}/schedules", tags=["schedules"])
    def list_schedules(tenant: Tenant, state: ScheduleStatus | None = None,
                       after: Annotated[str | None, Query(max_length=200)] = None,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Record:
        """The tenant's schedules by schedule_id; pass `next_after` back as `after` for the next page."""
        page = plane.schedules.list(tenant, state, after, limit)
        next_after = page[-1]["schedule_id"] if len(page) == limit else None
        return {"schedules": [schedule_json(s) for s in page], "next_after": next_after}

    @app.get("/v1/tenants/{tenant}/schedules/{schedule_id}", tags=["schedules"])
    def get_schedule(tenant: Tenant, schedule_id: ScheduleId, response: Response) -> Record:
        state = schedule_of(tenant, schedule_id)
        response.headers["ETag"] = f'"{state["version"]}"'
        return schedule_json(state)

    @app.put("/v1/tenants/{tenant}/schedules/{schedule_id}", tags=["schedules"])
    def replace_schedule(tenant: Tenant, schedule_id: ScheduleId, body: UpdateIn, response: Response,
                         if_match: Annotated[str | None, Header(max_length=40)] = None,
                         dry_run: bool = False, count: Annotated[int, Query(ge=0, le=1000)] = 5) -> Record:
        """Replace the spec. With dry_run=true nothing changes: the next fires before and after are returned."""
        expected = _expected(if_match, body.expected_version)
        return update(tenant, schedule_id, body.spec.record(), expected, dry_run, count, response)

    @app.patch("/v1/tenants/{tenant}/schedules/{schedule_id}", tags=["schedules"])
    def patch_schedule(tenant: Tenant, schedule_id: ScheduleId, body: PatchIn, response: Response,
                       if_match: Annotated[str | None, Header(max_length=40)] = None,
                       dry_run: bool = False, count: Annotated[int, Query(ge=0, le=1000)] = 5) -> Record:
        """Change some spec fields. The merge base is the version the server holds: without If-Match the
        update is conditional on that version, so a concurrent change yields 412 instead of being lost."""
        current = schedule_of(tenant, schedule_id)
        expected = _expected(if_match, body.expected_version)
        spec = {**current["spec"], **body.spec.fields()}
        return update(tenant, schedule_id, spec, current["version"] if expected is None else expected,
                      dry_run, count, response)

    def update(tenant: str, schedule_id: str, spec: Record, expected: int | None, dry_run: bool, count: int,
               response: Response) -> Record:
        if dry_run:
            current = schedule_of(tenant, schedule_id)
            if expected is not None and expected != current["version"]:
                raise VersionConflict("VERSION_CONFLICT",
                                      f"expected version {expected}, current version is {current['version']}")
            return dry_run_diff(current, spec, int(time.time() * 1000), count)
        return command(lambda: plane.client.update(tenant, schedule_id, spec, expected), response)

    @app.delete("/v1/tenants/{tenant}/schedules/{schedule_id}", tags=["schedules"])
    def cancel_schedule(tenant: Tenant, schedule_id: ScheduleId, response: Response,
                        if_match: Annotated[str | None, Header(max_length=40)] = None) -> Record:
        """Cancel the schedule (its state stays readable as CANCELED)."""
        return command(lambda: plane.client.cancel(tenant, schedule_id, _if_match(if_match)), response)

    @app.post("/v1/tenants/{tenant}/schedules/{schedule_id}/pause", tags=["schedules"])
    def pause_schedule(tenant: Tenant, schedule_id: ScheduleId, response: Response,
                       if_match: Annotated[str | None, Header(max_length=40)] = None) -> Record:
        return command(lambda: plane.client.pause(tenant, schedule_id, _if_match(if_match)), response)

    @app.post("/v1/tenants/{tenant}/schedules/{schedule_id}/resume", tags=["schedules"])
    def resume_schedule(tenant: Tenant, schedule_id: ScheduleId, response: Response,
                        if_match: Annotated[str | None, Header(max_length=40)] = None) -> Record:
        return command(lambda: plane.client.resume(tenant, schedule_id, _if_match(if_match)), response)

    @app.post("/v1/tenants/{tenant}/schedules/{schedule_id}/trigger", tags=["schedules"])
    def trigger_schedule(tenant: Tenant, schedule_id: ScheduleId) -> Record:
        """Fire one occurrence now; `next_fires_ms` holds its scheduled_for."""
        return {"result": result_json(plane.client.trigger_now(tenant, schedule_id))}

    @app.post("/v1/tenants/{tenant}/schedules/{schedule_id}/backfill", tags=["schedules"])
    def backfill_schedule(tenant: Tenant, schedule_id: ScheduleId, body: BackfillIn) -> Record:
        """Replay the fires of a past range (at most 1000) through the catch-up lane."""
        return {"result": result_json(plane.client.backfill(tenant, schedule_id, body.from_ms, body.to_ms,
                                                            body.overlap_override))}

    @app.get("/v1/tenants/{tenant}/schedules/{schedule_id}/preview", tags=["schedules"])
    def preview_schedule(tenant: Tenant, schedule_id: ScheduleId,
                         count: Annotated[int, Query(ge=0, le=1000)] = 10) -> Record:
        """The schedule's next fires from now (local computation, nothing sent)."""
        state = schedule_of(tenant, schedule_id)
        fires = preview(state["spec"], count, int(time.time() * 1000), state["fired_count"]) \
            if state["state"] == "ACTIVE" else []
        return {"schedule_id": schedule_id, "version": state["version"], "next_fires_ms": fires}

    @app.post("/v1/tenants/{tenant}/preview", tags=["schedules"])
    def preview_spec(tenant: Tenant, body: PreviewIn) -> Record:
        """The next fires of a spec that is not stored (to try one out before creating it)."""
        return {"next_fires_ms": preview(body.spec.record(), body.count, body.after_ms)}

    # -- occurrences ---------------------------------------------------------------

    @app.get("/v1/tenants/{tenant}/occurrences/{occurrence_id}", tags=["occurrences"])
    def get_occurrence(tenant: Tenant, occurrence_id: Annotated[str, Path(max_length=64)]) -> Record:
        status = plane.occurrences.get(tenant, occurrence_id)
        if status is None:
            raise NotFound("UNKNOWN_OCCURRENCE", f"occurrence {occurrence_id!r} does not exist")
        return status

    @app.post("/v1/tenants/{tenant}/occurrences/{occurrence_id}/rerun", tags=["occurrences"])
    def rerun_occurrence(tenant: Tenant, occurrence_id: Annotated[str, Path(max_length=64)]) -> Record:
        """Dispatch a finished or dead occurrence again, with the same occurrence_id."""
        status = plane.occurrences.get(tenant, occurrence_id)
        if status is None:
            raise NotFound("UNKNOWN_OCCURRENCE", f"occurrence {occurrence_id!r} does not exist")
        return {"result": result_json(plane.client.rerun(tenant, occurrence_id, status["schedule_id"]))}

    # -- tenants -------------------------------------------------------------------

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
            raise _not_found(f"tenant {tenant!r}")
        return found

    @app.patch("/v1/tenants/{tenant}", tags=["tenants"])
    def set_quotas(tenant: Tenant, _: Admin, body: Quotas) -> Record:
        """Change some quotas (admin)."""
        return plane.tenants.set_quota(tenant, **body.model_dump(exclude_none=True))

    @app.delete("/v1/tenants/{tenant}", status_code=204, tags=["tenants"])
    def delete_tenant(tenant: Tenant, _: Admin, force: bool = False) -> Response:
        """Delete a tenant's record (admin); refused with 409 while it has active or paused schedules."""
        plane.tenants.delete(tenant, plane.schedules, force)
        return Response(status_code=204)

    if isinstance(keys, SharedKeyStore):
        add_key_routes(app, keys, Admin)
    return app
