"""`scheduler api`: serve the HTTP API with uvicorn over one ControlPlane."""
from __future__ import annotations

from pathlib import Path

import uvicorn

from scheduler.api.app import create_app
from scheduler.api.keys import KeyStore
from scheduler.api.plane import ControlPlane


def serve(bootstrap: str, prefix: str, host: str, port: int, key_file: Path, timeout_s: float) -> None:
    """One process, one set of views: uvicorn runs a single worker (more processes mean more views)."""
    plane = ControlPlane.open(bootstrap, prefix, timeout_s)
    try:
        uvicorn.run(create_app(plane, KeyStore(key_file)), host=host, port=port, log_level="info")
    finally:
        plane.close()
