"""The shared metrics + probes server routes three paths, on the address it is given."""
from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from scheduler.health.endpoint import serve
from scheduler.health.probes import Probe


@pytest.fixture
def server() -> Iterator[tuple[str, list[Probe]]]:
    registry = CollectorRegistry()
    Counter("scheduler_test_things", "things", registry=registry).inc(3)
    answers = [Probe(True, "alive"), Probe(False, "2 of its partitions still restoring")]
    running = serve("127.0.0.1", 0, registry, lambda: answers[0], lambda: answers[1])
    try:
        yield f"http://127.0.0.1:{running.server_address[1]}", answers
    finally:
        running.shutdown()
        running.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_metrics_and_probes_on_one_port(server) -> None:
    url, answers = server
    status, text = get(url + "/metrics")
    assert status == 200 and "scheduler_test_things_total 3.0" in text
    assert get(url + "/healthz") == (200, "alive\n")
    assert get(url + "/readyz") == (503, "2 of its partitions still restoring\n")
    answers[1] = Probe(True, "4 partitions owned and dispatching")
    assert get(url + "/readyz?verbose") == (200, "4 partitions owned and dispatching\n")
    assert get(url + "/other")[0] == 404


def test_it_listens_only_on_the_bind_address(server) -> None:
    url, _ = server
    port = url.rsplit(":", 1)[1]
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.2:{port}/healthz", timeout=2)
