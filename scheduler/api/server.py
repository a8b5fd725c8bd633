"""`scheduler api`: serve the HTTP API, and the operator console at /ui, with uvicorn over one ControlPlane."""
from __future__ import annotations

from pathlib import Path

import uvicorn

from scheduler.api.app import create_app
from scheduler.api.keys import KeyStore
from scheduler.api.plane import ControlPlane


def serve(bootstrap: str, prefix: str, host: str, port: int, key_file: Path, timeout_s: float,
          metrics_urls: list[str] | None = None, forecast_hours: float = 6.0) -> None:
    """One process, one set of views: uvicorn runs a single worker (more processes mean more views)."""
    from scheduler.console.follower import ConsoleIndexes
    from scheduler.console.ledger import Ledger
    from scheduler.console.web import mount

    plane = ControlPlane.open(bootstrap, prefix, timeout_s)
    keys = KeyStore(key_file)
    indexes = ConsoleIndexes(plane.schedules, plane.occurrences, int(forecast_hours * 3_600_000))
    app = create_app(plane, keys)
    mount(app, plane, keys, indexes, metrics_urls, Ledger.from_env(prefix))
    try:
        uvicorn.run(app, host=host, port=port, log_level="info")
    finally:
        indexes.close()
        plane.close()
