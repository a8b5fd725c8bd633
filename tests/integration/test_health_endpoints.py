"""/healthz, /readyz and /metrics of real processes on the session broker: the scheduler is ready once its
partitions are restored, a worker once assigned, and the API answers all three without a key."""
from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

import httpx
from api_harness import ApiServer
from engine_harness import SchedulerProcess, ensure_layout, scrape
from worker_harness import WorkerProcess, enqueue, occurrence

from helpers.waiting import wait_until
from scheduler.broker.local import free_port

NOT_READY_YET = ("no partition assigned", "still restoring", "connection refused")


def probe(port: int, path: str) -> tuple[int, str]:
    """(status, body) of a probe; status 0 while nothing listens yet (the process is starting)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except urllib.error.URLError as error:
        return 0, str(error.reason)


def wait_ready(port: int, alive: Callable[[], bool], timeout: float) -> list[str]:
    """Poll /readyz until 200; returns the reasons of the 503s seen on the way, for the caller to judge."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        assert alive(), "the process exited"
        status, body = probe(port, "/readyz")
        if status == 200:
            return seen
        seen.append(body.strip())
        assert time.monotonic() < deadline, f"/readyz never 200: last {status} {body!r}"
        time.sleep(0.2)


def test_a_scheduler_is_ready_once_its_partitions_are_restored(kafka_bootstrap, unique_prefix, tmp_path) -> None:
    ensure_layout(kafka_bootstrap, unique_prefix)
    port = free_port()
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a",
                               ("--metrics-port", str(port))).start()
    try:
        seen = wait_ready(port, process.alive, 90)
        assert all(any(reason in s.lower() for reason in NOT_READY_YET) for s in seen), seen
        status, body = probe(port, "/healthz")
        assert status == 200 and body.startswith("the loop turned"), body
        samples = scrape(port)
        assert samples[("scheduler_owned_partitions", ())] > 0
        assert samples[("scheduler_partitions_restoring", ())] == 0
        assert probe(port, "/readyz")[1].endswith("partitions owned and dispatching\n")
    finally:
        assert process.terminate() == 0, process.log_tail()


def test_a_worker_is_ready_once_assigned_and_counts_what_it_handles(kafka_bootstrap, unique_prefix, tmp_path) -> None:
    tenant = "acme"
    ensure_layout(kafka_bootstrap, unique_prefix, [tenant])
    port = free_port()
    worker = WorkerProcess(kafka_bootstrap, unique_prefix, tenant, "worker_handlers:record", tmp_path / "work",
                           extra_args=("--metrics-port", str(port))).start()
    try:
        wait_ready(port, lambda: worker.proc.poll() is None, 90)
        assert probe(port, "/healthz")[0] == 200
        assert scrape(port)[("scheduler_worker_assigned_partitions", ())] >= 1
        enqueue(kafka_bootstrap, unique_prefix, [occurrence("s1", tenant)])
        succeeded = ("scheduler_worker_occurrences_total", (("outcome", "SUCCEEDED"),))
        wait_until(lambda: scrape(port).get(succeeded) == 1, 60, "the occurrence counted as SUCCEEDED")
        assert scrape(port)[("scheduler_worker_handler_seconds_count", (("outcome", "SUCCEEDED"),))] == 1
        assert worker.terminate() == 0
    finally:
        worker.stop_quietly()


def test_the_api_answers_its_probes_and_metrics_without_a_key(kafka_bootstrap, unique_prefix, tmp_path) -> None:
    ensure_layout(kafka_bootstrap, unique_prefix)
    server = ApiServer(kafka_bootstrap, unique_prefix, tmp_path / "api.log")
    try:
        server.wait_ready()
        assert httpx.get(server.url() + "/v1/tenants", timeout=10).status_code == 401  # the API itself wants a key
        for path in ("/healthz", "/readyz"):
            answer = httpx.get(server.url() + path, timeout=10)
            assert answer.status_code == 200, (path, answer.text)
        text = httpx.get(server.url() + "/metrics", timeout=10).text
        assert 'scheduler_api_requests_total{method="GET",route="/v1/tenants",status="401"} 1.0' in text
        assert 'route="/readyz",status="200"' in text
    finally:
        server.stop()
