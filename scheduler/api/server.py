"""`scheduler api`: serve the HTTP API, and the operator console at /ui, with uvicorn over one ControlPlane."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import uvicorn

from scheduler.api.app import create_app
from scheduler.api.keys import KeyStore
from scheduler.api.plane import ControlPlane
from scheduler.api.shared_keys import SharedKeyStore


def serve(bootstrap: str, prefix: str, host: str, port: int, key_file: Path | None, timeout_s: float,
          tls_cert: Path | None = None, tls_key: Path | None = None, metrics_urls: list[str] | None = None,
          forecast_hours: float = 6.0, client_config: Mapping[str, str] | None = None) -> None:
    """One process, one set of views: uvicorn runs a single worker (more processes mean more views).

    Keys come from the shared `<prefix>.api-keys` topic, or from `key_file` when one is given. With
    `tls_cert` and `tls_key` (PEM files) it serves HTTPS only: a plain HTTP request gets no answer.
    The console (`/ui`) is mounted on the same app, behind the same keys. `client_config` goes to every
    Kafka client of the process (its own connection to a SASL_SSL cluster)."""
    from scheduler.audit.history import Ledger
    from scheduler.console.follower import ConsoleIndexes
    from scheduler.console.web import mount

    plane = ControlPlane.open(bootstrap, prefix, timeout_s, client_config)
    keys = KeyStore(key_file) if key_file is not None else SharedKeyStore(bootstrap, prefix, timeout_s, client_config)
    indexes = ConsoleIndexes(plane.schedules, plane.occurrences, int(forecast_hours * 3_600_000))
    app = create_app(plane, keys)
    mount(app, plane, keys, indexes, metrics_urls, Ledger.from_env(prefix))
    try:
        uvicorn.run(app, host=host, port=port, log_level="info",
                    ssl_certfile=str(tls_cert) if tls_cert else None, ssl_keyfile=str(tls_key) if tls_key else None)
    finally:
        indexes.close()
        if isinstance(keys, SharedKeyStore):
            keys.close()
        plane.close()
