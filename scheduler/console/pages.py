"""The console's pages (GET): tenants, a tenant's schedules, a schedule, an occurrence, the forecast."""
from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from scheduler.console.fire_rows import fire_rows
from scheduler.console.forecast import FLEXIBLE, STRICT
from scheduler.console.site import Console, Viewer, not_found, redirect
from scheduler.control.client import SchedulerError, preview
from scheduler.control.occurrence_history import view_row
from scheduler.wire.records import ScheduleState

Record = dict[str, Any]

PAGE = 50
NEXT_FIRES = 20
STATES = ("ACTIVE", "PAUSED", "CANCELED", "COMPLETED")


def _now_ms() -> int:
    return int(time.time() * 1000)


def router(console: Console) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("", response_class=HTMLResponse)
    @r.get("/", response_class=HTMLResponse)
    def home(request: Request) -> Response:
        console.viewer(request)
        return redirect("/tenants")

    @r.get("/login", response_class=HTMLResponse)
    def login_page(request: Request, next: str = "") -> Response:
        return console.render("login.html", request, None, next=next, failed=False)

    @r.get("/tenants", response_class=HTMLResponse)
    def tenants(request: Request) -> Response:
        viewer = console.viewer(request)
        rows = []
        for tenant in console.visible_tenants(viewer):
            name = tenant["tenant"]
            live = console.plane.schedules.count_live(name)
            rows.append({"tenant": tenant, "live": live, "figures": console.indexes.figures(name)})
        engine = console.engine.read()
        return console.render("tenants.html", request, viewer, rows=rows, engine=engine)

    @r.get("/tenants/{tenant}", response_class=HTMLResponse)
    def tenant_page(request: Request, tenant: str, q: Annotated[str, Query(max_length=200)] = "",
                    state: str = "", after: Annotated[str, Query(max_length=200)] = "") -> Response:
        viewer = console.viewer(request)
        console.scope(viewer, tenant)
        now = _now_ms()
        chosen = [s for s in console.plane.schedules.list(tenant, state if state in STATES else None,
                                                          after or None)
                  if q.lower() in s["schedule_id"].lower()]
        page = chosen[:PAGE]
        rows = [{"state": s, "next": _next(s, now)} for s in page]
        more = page[-1]["schedule_id"] if len(chosen) > PAGE else ""
        return console.render("tenant.html", request, viewer, tenant=console.plane.tenants.view.get(tenant),
                              rows=rows, q=q, state=state, states=STATES, more=more, matched=len(chosen),
                              figures=console.indexes.figures(tenant))

    @r.get("/tenants/{tenant}/schedules/{schedule_id}", response_class=HTMLResponse)
    def schedule_page(request: Request, tenant: str, schedule_id: str, done: str = "") -> Response:
        viewer = console.viewer(request)
        console.scope(viewer, tenant)
        state = console.schedule(tenant, schedule_id)
        now = _now_ms()
        fires = fire_rows(state["spec"], state["fired_count"], now, NEXT_FIRES) if state["state"] == "ACTIVE" else []
        history = _history(console, tenant, schedule_id, state)
        return console.render("schedule.html", request, viewer, tenant=tenant, s=state, spec=state["spec"],
                              fires=fires, done=done, **history)

    @r.get("/tenants/{tenant}/occurrences/{occurrence_id}", response_class=HTMLResponse)
    def occurrence_page(request: Request, tenant: str, occurrence_id: str, done: str = "") -> Response:
        viewer = console.viewer(request)
        console.scope(viewer, tenant)
        status = console.plane.occurrences.get(tenant, occurrence_id)
        if status is None:
            raise not_found(f"occurrence {occurrence_id!r}")
        return console.render("occurrence.html", request, viewer, tenant=tenant, o=status, done=done)

    @r.get("/forecast", response_class=HTMLResponse)
    def forecast_page(request: Request, tenant: Annotated[str, Query(max_length=200)] = "",
                      hours: Annotated[float, Query(gt=0, le=48)] = 6) -> Response:
        viewer = console.viewer(request)
        if tenant:
            console.scope(viewer, tenant)
        return forecast_view(console, request, viewer, tenant, hours)

    return r


def forecast_view(console: Console, request: Request, viewer: Viewer, tenant: str, hours: float) -> Response:
    """The forecast page from the index: its cost depends on tenants x minutes, not on schedules."""
    allowed = frozenset({tenant}) if tenant else viewer.tenants
    hours = min(hours, console.indexes.forecast.horizon_ms / 3_600_000)  # the index looks no further
    forecast = console.indexes.read_forecast(allowed)
    shown = min(len(forecast.minutes), int(hours * 60) + 1)
    strict, flexible = forecast.totals(STRICT)[:shown], forecast.totals(FLEXIBLE)[:shown]
    summary = []
    for name, lanes in forecast.per_tenant.items():
        s, f = lanes[STRICT][:shown], lanes[FLEXIBLE][:shown]
        top = max(range(shown), key=lambda i: s[i] + f[i]) if shown else 0
        summary.append({"tenant": name, "strict": sum(s), "flexible": sum(f), "peak_minute": forecast.minutes[top],
                        "peak_strict": s[top] if shown else 0, "peak_flexible": f[top] if shown else 0,
                        "series_strict": s, "series_flexible": f})
    busiest = max((a + b for a, b in zip(strict, flexible, strict=True)), default=0)
    return console.render("forecast.html", request, viewer, forecast=forecast, minutes=forecast.minutes[:shown],
                          strict=strict, flexible=flexible, busiest=busiest, summary=summary, tenant=tenant,
                          hours=hours, pending=console.indexes.pending, indexed=console.indexes.forecast.schedules,
                          STRICT=STRICT, FLEXIBLE=FLEXIBLE)


def _next(state: ScheduleState, now_ms: int) -> list[int]:
    if state["state"] != "ACTIVE":
        return []
    try:
        return preview(state["spec"], 3, now_ms, state["fired_count"])
    except SchedulerError:
        return []


def _history(console: Console, tenant: str, schedule_id: str, state: ScheduleState) -> Record:
    """Versions and recent occurrences: from the audit ledger when configured, else from the views."""
    error = None
    if console.ledger is not None:
        try:
            return {"source": "ledger", "ledger_error": None,
                    "versions": console.ledger.versions(tenant, schedule_id),
                    "occurrences": console.ledger.occurrences(tenant, schedule_id)}
        except Exception as exc:  # noqa: BLE001 - a driver or database failure: say so, use the views
            error = f"{type(exc).__name__}: {exc}"
    occurrences = [view_row(status) for status in console.plane.occurrences.for_schedule(tenant, schedule_id)]
    versions = [{"version": state["version"], "state": state["state"], "spec": state["spec"],
                 "fired_count": state["fired_count"], "next_fire_ms": state["next_fire_ms"],
                 "updated_at_ms": state["updated_at_ms"]}]
    return {"source": "views", "ledger_error": error, "versions": versions, "occurrences": occurrences}
