"""Real `scheduler api` processes, for the tests that need the HTTP API as a client sees it (shared keys, TLS)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from engine_harness import REPO

from helpers.waiting import wait_until
from scheduler.broker.local import free_port


class ApiServer:
    """`scheduler api` in a child process on a free port; `extra`: more of its flags (e.g. --tls-cert)."""

    def __init__(self, bootstrap: str, prefix: str, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix}
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "scheduler", "api", "--port", str(self.port), *extra],
                                         cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    def wait_ready(self, scheme: str = "http", **client: object) -> None:
        def answers() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                httpx.get(self.url(scheme) + "/openapi.json", timeout=2, **client)
                return True
            except httpx.TransportError:
                return False
        wait_until(answers, 60, f"the API server on {self.port}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
