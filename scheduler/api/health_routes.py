"""/healthz, /readyz and /metrics of the HTTP API, open to anyone who reaches the port (no key):
orchestrators and Prometheus have none, and the answers name no tenant or schedule.

/readyz is the API's own notion of serving: its views (schedules, occurrences, tenants, keys) have
caught up with what their topics held when asked, so a read it answers is not older than the
request. The routes are left out of the OpenAPI document: they are not part of the control plane's
contract, and a 503 there is an answer, not an error of the API.
"""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from scheduler.health.probes import Probe, views_ready

REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CATCH_UP_S = 1.0  # per view: a /readyz request waits at most this long for each
UNMATCHED = "unmatched"  # the route label of requests no route took: their paths would be unbounded labels


class View(Protocol):
    topic: str

    def wait_caught_up(self, timeout: float = 30.0) -> bool: ...


class ApiMetrics:
    """Requests by route template (never the raw path: ids would make a series each), method and status."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        PlatformCollector(registry=r)
        self.requests = Counter("scheduler_api_requests", "HTTP requests answered, by route, method and status",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("scheduler_api_request_seconds", "HTTP request latency, by route and method",
                                 ["route", "method"], buckets=REQUEST_BUCKETS, registry=r)


def add_health_routes(app: FastAPI, views: Callable[[], Sequence[View]]) -> ApiMetrics:
    """`views`: the views /readyz checks, asked per request (the plane opens some on first use)."""
    metrics = ApiMetrics()

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", UNMATCHED)
        metrics.requests.labels(route, request.method, str(response.status_code)).inc()
        metrics.latency.labels(route, request.method).observe(time.perf_counter() - started)
        return response

    def probe_response(probe: Probe) -> PlainTextResponse:
        return PlainTextResponse(probe.reason + "\n", status_code=200 if probe.ok else 503)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> PlainTextResponse:
        """Answering at all is the API's liveness: the event loop serves requests."""
        return probe_response(Probe(True, "serving"))

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> PlainTextResponse:
        """Sync on purpose: waiting for the views runs on the thread pool, not on the event loop."""
        return probe_response(views_ready([v.topic for v in views() if not v.wait_caught_up(CATCH_UP_S)]))

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return metrics
