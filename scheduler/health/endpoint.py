"""One small threaded HTTP server per process: /metrics (Prometheus text), /healthz and /readyz.

prometheus_client's own server answers every path with the metrics, so it cannot carry the probes;
this one routes three paths and answers 404 for the rest. A probe answers 200 or 503 with its
one-line reason, which is what an orchestrator logs when it restarts or unroutes the process.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler.health.probes import Probe

DEFAULT_BIND = "127.0.0.1"  # metrics name tenants: exposing them beyond the host is a deliberate choice

ProbeFn = Callable[[], Probe]


def serve(bind: str, port: int, registry: CollectorRegistry, live: ProbeFn, ready: ProbeFn) -> ThreadingHTTPServer:
    """Serve on a daemon thread; returns the server (`shutdown()` stops it, `server_address` has the port)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                probe = (live if path == "/healthz" else ready)()
                self._answer(200 if probe.ok else 503, f"{probe.reason}\n".encode(), "text/plain; charset=utf-8")
            else:
                self._answer(404, b"not found: /metrics, /healthz or /readyz\n", "text/plain; charset=utf-8")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Scrapes and probes every few seconds would drown the process's own log."""

    server = ThreadingHTTPServer((bind, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"metrics:{port}", daemon=True).start()
    return server
