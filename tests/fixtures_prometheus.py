"""One real Prometheus server (Debian's `prometheus`) per pytest session, scraping every second.

Its targets come from a file_sd file that tests rewrite (Prometheus watches it), so the one server
scrapes whatever scheduler a test starts.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler.broker.local import free_port

PROMETHEUS = "/usr/bin/prometheus"
CONFIG = """global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: scheduler
    file_sd_configs:
      - files: ["{targets}"]
        refresh_interval: 1s
"""


@dataclass
class Prometheus:
    url: str
    targets_file: Path
    process: subprocess.Popen

    def scrape(self, *targets: str) -> None:
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": list(targets), "labels": {}}]))
        tmp.replace(self.targets_file)

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def wait_for(self, expr: str, accept: Any, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll an instant query until `accept(result)`; the last result is returned either way."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if accept(result) or time.monotonic() > deadline:
                return result
            time.sleep(0.5)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if shutil.which(PROMETHEUS) is None:
        pytest.fail("prometheus is required: `make system-deps` installs Debian's package")
    home = tmp_path_factory.mktemp("prometheus")
    targets = home / "targets.json"
    targets.write_text("[]")
    (home / "prometheus.yml").write_text(CONFIG.format(targets=targets))
    port = free_port()
    log = open(home / "prometheus.log", "wb")
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={home / 'prometheus.yml'}", f"--storage.tsdb.path={home / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT)
    server = Prometheus(f"http://127.0.0.1:{port}", targets, process)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"prometheus did not start: {(home / 'prometheus.log').read_text()[-2000:]}")
        time.sleep(0.2)
    try:
        yield server
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()
