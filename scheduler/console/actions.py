"""The console's actions: log in and out, and every change behind a confirmation page.

A button leads to a GET page that says what will happen; only its form's POST (with the
session's CSRF token) acts, through the same client calls as the HTTP API. An update is shown
as a dry run (the next fires before and after) and applied only from that page, conditional on
the version it was computed for, so a change made meanwhile is refused instead of overwritten.
"""
from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from scheduler.console.sessions import COOKIE
from scheduler.console.site import (
    PREFIX,
    Console,
    PageError,
    Viewer,
    not_found,
    redirect,
)
from scheduler.control.client import SchedulerError, dry_run_diff
from scheduler.wire.limits import MAX_NOTE_LENGTH
from scheduler.wire.records import ScheduleState

Record = dict[str, Any]

SCHEDULE_ACTIONS = {"pause": "Pause", "resume": "Resume", "trigger": "Trigger now"}
# Spec fields the update form edits (the rest of the spec is kept as it is).
EDITABLE = ("expression", "time_zone", "flexible_window_ms")


def _safe_next(target: str) -> str:
    """Only a path of this console: a log-in link must not send the browser elsewhere."""
    return target if target.startswith(f"{PREFIX}/") and not target.startswith("//") else f"{PREFIX}/tenants"


def _edited(spec: Mapping[str, Any], fields: dict[str, str]) -> Record:
    changed = dict(spec)
    for name in EDITABLE:
        value = fields.get(name, "").strip()
        if not value:
            continue
        if name == "flexible_window_ms":
            if not value.isdigit() or len(value) > 12:
                raise PageError(422, "flexible_window_ms: a whole number of milliseconds is required")
            changed[name] = int(value)
        else:
            changed[name] = value
    return changed


def router(console: Console) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    def act(call: Any) -> Record:
        try:
            return call()
        except SchedulerError as exc:
            raise PageError(409 if exc.reason in ("INVALID_STATE", "VERSION_CONFLICT") else 422,
                            f"{exc.reason}: {exc.message}") from exc

    @r.post("/login", response_class=HTMLResponse)
    async def login(request: Request) -> Response:
        body = urllib.parse.parse_qs((await request.body()).decode("utf-8", errors="replace"))
        key, target = body.get("key", [""])[-1], body.get("next", [""])[-1]
        session = console.sessions.login(key)
        if session is None:
            return console.render("login.html", request, None, 401, next=target, failed=True)
        response = redirect("/tenants") if not target else _to(_safe_next(target))
        response.set_cookie(COOKIE, session.token, max_age=int(console.sessions.ttl_s), path=PREFIX,
                            httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    @r.post("/logout", response_class=HTMLResponse)
    async def logout(request: Request) -> Response:
        viewer = console.viewer(request)
        await console.form(request, viewer)
        console.sessions.logout(viewer.session.token)
        response = redirect("/login")
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    def scoped(request: Request, tenant: str, schedule_id: str) -> tuple[Viewer, ScheduleState]:
        viewer = console.viewer(request)
        console.scope(viewer, tenant)
        return viewer, console.schedule(tenant, schedule_id)

    @r.get("/tenants/{tenant}/schedules/{schedule_id}/confirm/{action}", response_class=HTMLResponse)
    def confirm(request: Request, tenant: str, schedule_id: str, action: str) -> Response:
        viewer, state = scoped(request, tenant, schedule_id)
        if action not in SCHEDULE_ACTIONS:
            raise not_found(f"action {action!r}")
        return console.render("confirm.html", request, viewer, tenant=tenant, what=SCHEDULE_ACTIONS[action],
                              subject=f"schedule {schedule_id} (version {state['version']}, {state['state']})",
                              action=f"{PREFIX}/tenants/{tenant}/schedules/{schedule_id}/{action}",
                              back=f"{PREFIX}/tenants/{tenant}/schedules/{schedule_id}",
                              version=state["version"],
                              note_length=MAX_NOTE_LENGTH if action == "pause" else None)

    @r.post("/tenants/{tenant}/schedules/{schedule_id}/{action}", response_class=HTMLResponse)
    async def schedule_action(request: Request, tenant: str, schedule_id: str, action: str) -> Response:
        viewer, state = scoped(request, tenant, schedule_id)
        fields = await console.form(request, viewer)
        client = console.plane.client
        if action == "dry-run":
            return _dry_run(console, request, viewer, tenant, state, fields)
        version = int(fields["version"]) if fields.get("version", "").isdigit() else None
        if action == "pause":
            note = fields.get("note", "").strip() or None
            result = act(lambda: client.pause(tenant, schedule_id, version, note=note))
        elif action == "resume":
            result = act(lambda: client.resume(tenant, schedule_id, version))
        elif action == "trigger":
            result = act(lambda: client.trigger_now(tenant, schedule_id))
        elif action == "update":
            result = act(lambda: client.update(tenant, schedule_id, _edited(state["spec"], fields), version))
        else:
            raise not_found(f"action {action!r}")
        if result.get("version"):
            console.plane.schedules.wait_for_version(schedule_id, result["version"], 5.0)
        return redirect(f"/tenants/{urllib.parse.quote(tenant)}/schedules/{urllib.parse.quote(schedule_id)}",
                        done=f"{action}: {result['status']} (version {result.get('version')})")

    @r.get("/tenants/{tenant}/occurrences/{occurrence_id}/confirm/rerun", response_class=HTMLResponse)
    def confirm_rerun(request: Request, tenant: str, occurrence_id: str) -> Response:
        viewer = console.viewer(request)
        console.scope(viewer, tenant)
        status = console.plane.occurrences.get(tenant, occurrence_id)
        if status is None:
            raise not_found(f"occurrence {occurrence_id!r}")
        return console.render("confirm.html", request, viewer, tenant=tenant, what="Re-run",
                              subject=f"occurrence {occurrence_id} ({status['state']}, attempt {status['attempt']})",
                              action=f"{PREFIX}/tenants/{tenant}/occurrences/{occurrence_id}/rerun",
                              back=f"{PREFIX}/tenants/{tenant}/occurrences/{occurrence_id}", version="")

    @r.post("/tenants/{tenant}/occurrences/{occurrence_id}/rerun", response_class=HTMLResponse)
    async def rerun(request: Request, tenant: str, occurrence_id: str) -> Response:
        viewer = console.viewer(request)
        console.scope(viewer, tenant)
        await console.form(request, viewer)
        status = console.plane.occurrences.get(tenant, occurrence_id)
        if status is None:
            raise not_found(f"occurrence {occurrence_id!r}")
        result = act(lambda: console.plane.client.rerun(tenant, occurrence_id, status["schedule_id"]))
        return redirect(f"/tenants/{urllib.parse.quote(tenant)}/occurrences/{urllib.parse.quote(occurrence_id)}",
                        done=f"rerun: {result['status']}")

    return r


def _to(path: str) -> Response:
    return RedirectResponse(path, status_code=303)


def _dry_run(console: Console, request: Request, viewer: Viewer, tenant: str, state: ScheduleState,
             fields: dict[str, str]) -> Response:
    spec = _edited(state["spec"], fields)
    try:
        diff = dry_run_diff(state, spec, int(time.time() * 1000), 10)
    except SchedulerError as exc:
        raise PageError(422, f"{exc.reason}: {exc.message}") from exc
    rows = []
    for i in range(max(len(diff["before_ms"]), len(diff["after_ms"]))):
        before = diff["before_ms"][i] if i < len(diff["before_ms"]) else None
        after = diff["after_ms"][i] if i < len(diff["after_ms"]) else None
        rows.append({"before": before, "after": after, "changed": before != after})
    return console.render("diff.html", request, viewer, tenant=tenant, s=state, rows=rows,
                          fields={name: fields.get(name, "") for name in EDITABLE},
                          changes={k: (state["spec"].get(k), v) for k, v in spec.items() if state["spec"].get(k) != v})
