"""HTTP routes of a tenant's schedules: create, list, get, replace, patch, cancel, pause, resume,
trigger, backfill, preview.

Writes go through the commands topic and, once ACCEPTED, wait (briefly) until the view holds the
new version, so a client reads its own writes from the same server; the schedule's version is its
ETag, and If-Match makes a write conditional on it."""
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Header, Query, Response

from scheduler.api.access import Access
from scheduler.api.errors import ApiError
from scheduler.api.models import (
    BackfillIn,
    CreateIn,
    PatchIn,
    PauseIn,
    PreviewIn,
    ScheduleId,
    ScheduleStatus,
    TriggerIn,
    UpdateIn,
    result_json,
    schedule_json,
)
from scheduler.api.plane import ControlPlane
from scheduler.control.client import NotFound, VersionConflict, dry_run_diff, preview
from scheduler.wire.records import ScheduleState

Record = dict[str, Any]

if TYPE_CHECKING:  # what mypy sees of Access's dependency types, which each app makes at run time
    Tenant = str

VIEW_WAIT_S = 5.0


def if_match_version(value: str | None) -> int | None:
    """An If-Match header holds the schedule version as an ETag: "3", W/"3" or 3; * matches any."""
    if value is None or value.strip() == "*":
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not text.isdigit() or len(text) > 18:
        raise ApiError(422, "INVALID_REQUEST", "If-Match: a schedule version (an ETag such as \"3\") is required")
    return int(text)


def expected_version(header: str | None, body: int | None) -> int | None:
    from_header = if_match_version(header)
    if from_header is not None and body is not None and from_header != body:
        raise ApiError(422, "INVALID_REQUEST", "If-Match and expected_version disagree")
    return from_header if from_header is not None else body


class ScheduleCommands:
    """What the routes share: the tenant and schedule checks, a command and the wait for its result in the view."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def registered(self, tenant: str) -> None:
        if self.plane.tenants.view.get(tenant) is None:
            raise ApiError(404, "UNKNOWN_TENANT", f"tenant {tenant!r} is not registered")

    def schedule_of(self, tenant: str, schedule_id: str) -> ScheduleState:
        state = self.plane.schedules.get(tenant, schedule_id)
        if state is None:
            raise NotFound("UNKNOWN_SCHEDULE", f"schedule {schedule_id!r} does not exist")
        return state

    def command(self, call: Callable[[], Record], response: Response) -> Record:
        """The command's result with the schedule as the view holds it once it has caught up."""
        result = call()
        state = self.plane.schedules.wait_for_version(result["schedule_id"], result["version"] or 0, VIEW_WAIT_S)
        body: Record = {"result": result_json(result)}
        if state is not None:
            body["schedule"] = schedule_json(state)
            response.headers["ETag"] = f'"{state["version"]}"'
        return body

    def update(self, tenant: str, schedule_id: str, spec: Record, expected: int | None, dry_run: bool, count: int,
               response: Response) -> Record:
        if dry_run:
            current = self.schedule_of(tenant, schedule_id)
            if expected is not None and expected != current["version"]:
                raise VersionConflict("VERSION_CONFLICT",
                                      f"expected version {expected}, current version is {current['version']}")
            return dry_run_diff(current, spec, int(time.time() * 1000), count)
        return self.command(lambda: self.plane.client.update(tenant, schedule_id, spec, expected), response)


def add_schedule_routes(app: FastAPI, plane: ControlPlane, access: Access) -> None:
    if not TYPE_CHECKING:
        Tenant = access.tenant
    commands = ScheduleCommands(plane)
    command, schedule_of = commands.command, commands.schedule_of

    @app.post("/v1/tenants/{tenant}/schedules", status_code=201, tags=["schedules"])
    def create_schedule(tenant: Tenant, body: CreateIn, response: Response,
                        idempotency_key: Annotated[str | None, Header(max_length=200)] = None) -> Record:
        """Create a schedule; repeating a request with the same Idempotency-Key creates nothing new."""
        commands.registered(tenant)
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
        expected = expected_version(if_match, body.expected_version)
        return commands.update(tenant, schedule_id, body.spec.record(), expected, dry_run, count, response)

    @app.patch("/v1/tenants/{tenant}/schedules/{schedule_id}", tags=["schedules"])
    def patch_schedule(tenant: Tenant, schedule_id: ScheduleId, body: PatchIn, response: Response,
                       if_match: Annotated[str | None, Header(max_length=40)] = None,
                       dry_run: bool = False, count: Annotated[int, Query(ge=0, le=1000)] = 5) -> Record:
        """Change some spec fields. The merge base is the version the server holds: without If-Match the
        update is conditional on that version, so a concurrent change yields 412 instead of being lost."""
        current = schedule_of(tenant, schedule_id)
        expected = expected_version(if_match, body.expected_version)
        spec = {**current["spec"], **body.spec.fields()}
        return commands.update(tenant, schedule_id, spec, current["version"] if expected is None else expected,
                             dry_run, count, response)

    add_state_routes(app, plane, access, commands)
    add_fire_routes(app, plane, access, commands)


def add_state_routes(app: FastAPI, plane: ControlPlane, access: Access, commands: ScheduleCommands) -> None:
    """Cancel, pause and resume: the conditional changes of a schedule's state."""
    command = commands.command
    if not TYPE_CHECKING:
        Tenant = access.tenant

    @app.delete("/v1/tenants/{tenant}/schedules/{schedule_id}", tags=["schedules"])
    def cancel_schedule(tenant: Tenant, schedule_id: ScheduleId, response: Response,
                        if_match: Annotated[str | None, Header(max_length=40)] = None) -> Record:
        """Cancel the schedule (its state stays readable as CANCELED)."""
        return command(lambda: plane.client.cancel(tenant, schedule_id, if_match_version(if_match)), response)

    @app.post("/v1/tenants/{tenant}/schedules/{schedule_id}/pause", tags=["schedules"])
    def pause_schedule(tenant: Tenant, schedule_id: ScheduleId, response: Response, body: PauseIn | None = None,
                       if_match: Annotated[str | None, Header(max_length=40)] = None) -> Record:
        """Pause the schedule; the body is optional, its `note` (why) stays on the schedule until resumed."""
        note = None if body is None else body.note
        return command(lambda: plane.client.pause(tenant, schedule_id, if_match_version(if_match), note=note),
                       response)

    @app.post("/v1/tenants/{tenant}/schedules/{schedule_id}/resume", tags=["schedules"])
    def resume_schedule(tenant: Tenant, schedule_id: ScheduleId, response: Response,
                        if_match: Annotated[str | None, Header(max_length=40)] = None) -> Record:
        return command(lambda: plane.client.resume(tenant, schedule_id, if_match_version(if_match)), response)


def add_fire_routes(app: FastAPI, plane: ControlPlane, access: Access, commands: ScheduleCommands) -> None:
    """Fires on demand (trigger, backfill) and computed ones (preview): nothing here waits for the view."""
    if not TYPE_CHECKING:
        Tenant = access.tenant

    @app.post("/v1/tenants/{tenant}/schedules/{schedule_id}/trigger", tags=["schedules"])
    def trigger_schedule(tenant: Tenant, schedule_id: ScheduleId, body: TriggerIn | None = None) -> Record:
        """Fire one occurrence now (under `overlap_override` when given); `next_fires_ms` holds its scheduled_for."""
        override = None if body is None else body.overlap_override
        return {"result": result_json(plane.client.trigger_now(tenant, schedule_id, override))}

    @app.post("/v1/tenants/{tenant}/schedules/{schedule_id}/backfill", tags=["schedules"])
    def backfill_schedule(tenant: Tenant, schedule_id: ScheduleId, body: BackfillIn) -> Record:
        """Replay the fires of a past range (at most 1000) through the catch-up lane."""
        return {"result": result_json(plane.client.backfill(tenant, schedule_id, body.from_ms, body.to_ms,
                                                            body.overlap_override))}

    @app.get("/v1/tenants/{tenant}/schedules/{schedule_id}/preview", tags=["schedules"])
    def preview_schedule(tenant: Tenant, schedule_id: ScheduleId,
                         count: Annotated[int, Query(ge=0, le=1000)] = 10) -> Record:
        """The schedule's next fires from now (local computation, nothing sent)."""
        state = commands.schedule_of(tenant, schedule_id)
        fires = preview(state["spec"], count, int(time.time() * 1000), state["fired_count"]) \
            if state["state"] == "ACTIVE" else []
        return {"schedule_id": schedule_id, "version": state["version"], "next_fires_ms": fires}

    @app.post("/v1/tenants/{tenant}/preview", tags=["schedules"])
    def preview_spec(tenant: Tenant, body: PreviewIn) -> Record:
        """The next fires of a spec that is not stored (to try one out before creating it)."""
        return {"next_fires_ms": preview(body.spec.record(), body.count, body.after_ms)}
