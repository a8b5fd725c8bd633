"""The console's mounting under /ui: its routes, static files, templates and error pages (the pages' shared
plumbing, log-in and tenant scope, is `scheduler.console.site`).

Same rules as the HTTP API: a session acts for the key it was opened with, and a tenant page
the key may not see answers 404 exactly as a tenant that does not exist. Everything the pages
load (one stylesheet) is served from /ui/static by this process.
"""
from __future__ import annotations

import urllib.parse
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from scheduler.api.keys import Keys
from scheduler.api.plane import ControlPlane
from scheduler.console import actions, pages
from scheduler.console.engine_metrics import EngineMetrics
from scheduler.console.follower import ConsoleIndexes
from scheduler.console.ledger import Ledger
from scheduler.console.sessions import COOKIE, Sessions

# The pages' shared contract lives in `site` (a leaf); re-exported, as callers import it from here.
from scheduler.console.site import (  # noqa: F401
    PREFIX,
    Console,
    LoginRequired,
    PageError,
    Viewer,
    not_found,
    redirect,
    seconds_text,
    utc_text,
)

HERE = Path(__file__).parent


def _templates() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
    env.filters["utc"] = utc_text
    env.filters["secs"] = seconds_text
    env.filters["q"] = lambda value: urllib.parse.quote(str(value), safe="")
    env.filters["text"] = lambda data: data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)
    return env


def mount(app: FastAPI, plane: ControlPlane, keys: Keys, indexes: ConsoleIndexes,
          metrics_urls: list[str] | None = None, ledger: Ledger | None = None) -> Console:
    """Serve the console at /ui on `app` (the HTTP API's app, so it shares the process's views)."""
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
