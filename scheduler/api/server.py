"""`scheduler api`: serve the HTTP API with uvicorn over one ControlPlane."""
from __future__ import annotations

from pathlib import Path

import uvicorn

from scheduler.api.app import create_app
from scheduler.api.keys import KeyStore
from scheduler.api.plane import ControlPlane
from scheduler.api.shared_keys import SharedKeyStore


def serve(bootstrap: str, prefix: str, host: str, port: int, key_file: Path | None, timeout_s: float) -> None:
    """One process, one set of views: uvicorn runs a single worker (more processes mean more views).

    Keys come from the shared `<prefix>.api-keys` topic, or from `key_file` when one is given."""
    plane = ControlPlane.open(bootstrap, prefix, timeout_s)
    keys = KeyStore(key_file) if key_file is not None else SharedKeyStore(bootstrap, prefix, timeout_s)
    try:
        uvicorn.run(create_app(plane, keys), host=host, port=port, log_level="info")
    finally:
        if isinstance(keys, SharedKeyStore):
            keys.close()
        plane.close()
