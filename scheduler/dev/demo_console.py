"""The tour's control plane for `scheduler demo`: the demo tenant registered (so the console knows it, not
an open tenant only the engine accepts), and the HTTP API with its console started beside the scheduler,
their address and an admin key printed, so a newcomer opens the console on what the demo makes."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from scheduler.api.shared_keys import SharedKeyStore
from scheduler.broker.ports import free_port
from scheduler.control.errors import Conflict
from scheduler.control.tenants import TenantRegistry

API_HOST = "127.0.0.1"
API_PORT = 8080  # the API's default; a free port instead when something listens there
QUIET = {"log_level": "0"}


def register_tenant(bootstrap: str, prefix: str, tenant: str) -> None:
    """Registered once; a demo run again finds it registered."""
    with TenantRegistry(bootstrap, prefix, client_config=QUIET) as registry:
        try:
            registry.register(tenant)
        except Conflict:
            pass


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        busy = probe.connect_ex((API_HOST, API_PORT)) == 0
    return free_port() if busy else API_PORT


@dataclass
class DemoApi:
    process: subprocess.Popen[bytes]
    url: str
    key: str

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_api(bootstrap: str, prefix: str, tenant: str, metrics_url: str, log: Path) -> DemoApi:
    """`scheduler api` on API_PORT (or a free one) with the keys every server shares, and a new admin key."""
    with SharedKeyStore(bootstrap, prefix, client_config=QUIET) as store:
        key = store.create(None)
    port = _port()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:  # the server's access log, apart from the worker's lines
        process = subprocess.Popen([sys.executable, "-m", "scheduler", "api", "--host", API_HOST, "--port",
                                    str(port), "--metrics-url", metrics_url], env=env, stdout=out, stderr=out)
    url = f"http://{API_HOST}:{port}"
    print(f"console: {url}/ui/tenants/{tenant}   HTTP API: {url}/docs   (its log: {log})\n"
          f"admin key (log in with it; shown once): {key}", flush=True)
    return DemoApi(process, url, key)
