"""The console's plumbing: mounting under /ui, log-in, tenant scope, templates and error pages.

Same rules as the HTTP API: a session acts for the key it was opened with, and a tenant page
the key may not see answers 404 exactly as a tenant that does not exist. Everything the pages
load (one stylesheet) is served from /ui/static by this process.
"""
from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from scheduler.api.keys import KeyStore, Principal
from scheduler.api.plane import ControlPlane
from scheduler.console.engine_metrics import EngineMetrics
from scheduler.console.follower import ConsoleIndexes
from scheduler.audit.history import Ledger
from scheduler.console.sessions import COOKIE, Session, Sessions, csrf_ok
from scheduler.control.specs import SPEC_INSTANT_FIELDS
from scheduler.timing.cli_values import format_duration_ms

HERE = Path(__file__).parent
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


def spec_field_text(value: object, name: str) -> str:
    """A spec field as people read it: durations as `5m` (the field's `_ms` value beside it), instants in UTC."""
    if value is None:
        return "—"
    if name in SPEC_INSTANT_FIELDS and isinstance(value, int):
        return utc_text(value)
    if name.endswith("_ms") and isinstance(value, int):
        return f"{format_duration_ms(value)} ({value} ms)"
    return str(value)


def _templates() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
    env.filters["utc"] = utc_text
    env.filters["secs"] = seconds_text
    env.filters["spec_field"] = spec_field_text
    env.filters["q"] = lambda value: urllib.parse.quote(str(value), safe="")
    env.filters["text"] = lambda data: data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)
    return env


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

    def schedule(self, tenant: str, schedule_id: str) -> dict[str, Any]:
        state = self.plane.schedules.get(tenant, schedule_id)
        if state is None:
            raise not_found(f"schedule {schedule_id!r}")
        return state

    def visible_tenants(self, viewer: Viewer) -> list[dict[str, Any]]:
        return [t for t in self.plane.tenants.view.list() if viewer.principal.may_access(t["tenant"])]

    async def form(self, request: Request, viewer: Viewer) -> dict[str, str]:
        """The posted form (urlencoded), after its CSRF token is checked."""
        body = (await request.body()).decode("utf-8", errors="replace")
        fields = {k: v[-1] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True).items()}
        if not csrf_ok(viewer.session, fields.get("csrf")):
            raise PageError(403, "the form has expired: reload the page and try again")
        return fields


def mount(app: FastAPI, plane: ControlPlane, keys: KeyStore, indexes: ConsoleIndexes,
          metrics_urls: list[str] | None = None, ledger: Ledger | None = None) -> Console:
    """Serve the console at /ui on `app` (the HTTP API's app, so it shares the process's views)."""
    from scheduler.console import actions, pages

    console = Console(plane, Sessions(keys), indexes, EngineMetrics(metrics_urls or []), ledger, _templates())
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="console-static")

    @app.exception_handler(LoginRequired)
    def _login(request: Request, _: LoginRequired) -> Response:
        target = urllib.parse.quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
        return RedirectResponse(f"{PREFIX}/login?next={target}", status_code=303)

    @app.exception_handler(PageError)
    def _page_error(request: Request, exc: PageError) -> Response:
        found = console.sessions.find(request.cookies.get(COOKIE))
        return console.render("error.html", request, Viewer(*found) if found else None, exc.status,
                              error_status=exc.status, message=exc.message)

    app.include_router(pages.router(console), prefix=PREFIX)
    app.include_router(actions.router(console), prefix=PREFIX)
    return console


def redirect(path: str, **query: str) -> RedirectResponse:
    suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
    return RedirectResponse(f"{PREFIX}{path}{suffix}", status_code=303)
