"""What every console page works with: the `Console` (views, sessions, templates), the `Viewer` a request
comes from, page errors and redirects. A leaf the pages (`pages`, `actions`) and the mounting (`web`) share,
so neither imports the other."""
from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment

from scheduler.api.keys import Principal
from scheduler.api.plane import ControlPlane
from scheduler.console.engine_metrics import EngineMetrics
from scheduler.console.follower import ConsoleIndexes
from scheduler.console.ledger import Ledger
from scheduler.console.sessions import COOKIE, Session, Sessions, csrf_ok
from scheduler.wire.records import ScheduleState, Tenant

PREFIX = "/ui"


class PageError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class LoginRequired(Exception):
    pass


def not_found(what: str) -> PageError:
    return PageError(404, f"{what} not found")


@dataclass(frozen=True)
class Viewer:
    session: Session
    principal: Principal

    @property
    def tenants(self) -> frozenset[str] | None:
        """The tenants this viewer may see; None: all (an admin key)."""
        return None if self.principal.admin else frozenset({str(self.principal.tenant)})


def utc_text(ms: int | None) -> str:
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def seconds_text(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


@dataclass
class Console:
    plane: ControlPlane
    sessions: Sessions
    indexes: ConsoleIndexes
    engine: EngineMetrics
    ledger: Ledger | None
    templates: Environment

    def render(self, name: str, request: Request, viewer: Viewer | None, status: int = 200,
               **context: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(
            request=request, viewer=viewer, csrf=viewer.session.csrf if viewer else "", prefix=PREFIX,
            now_ms=int(time.time() * 1000), **context)
        return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})

    def viewer(self, request: Request) -> Viewer:
        found = self.sessions.find(request.cookies.get(COOKIE))
        if found is None:
            raise LoginRequired()
        return Viewer(*found)

    def scope(self, viewer: Viewer, tenant: str) -> str:
        """The tenant, if this viewer may see it and it is registered; 404 either way otherwise."""
        if not viewer.principal.may_access(tenant) or self.plane.tenants.view.get(tenant) is None:
            raise not_found(f"tenant {tenant!r}")
        return tenant

    def schedule(self, tenant: str, schedule_id: str) -> ScheduleState:
        state = self.plane.schedules.get(tenant, schedule_id)
        if state is None:
            raise not_found(f"schedule {schedule_id!r}")
        return state

    def visible_tenants(self, viewer: Viewer) -> list[Tenant]:
        return [t for t in self.plane.tenants.view.list() if viewer.principal.may_access(t["tenant"])]

    async def form(self, request: Request, viewer: Viewer) -> dict[str, str]:
        """The posted form (urlencoded), after its CSRF token is checked."""
        body = (await request.body()).decode("utf-8", errors="replace")
        fields = {k: v[-1] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True).items()}
        if not csrf_ok(viewer.session, fields.get("csrf")):
            raise PageError(403, "the form has expired: reload the page and try again")
        return fields


def redirect(path: str, **query: str) -> RedirectResponse:
    suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
    return RedirectResponse(f"{PREFIX}{path}{suffix}", status_code=303)
