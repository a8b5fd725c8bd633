"""What a worker counts per occurrence, and its probes, without a broker (a recording writer stands in)."""
from __future__ import annotations

import time

import pytest

from scheduler.cli import build_parser
from scheduler.worker import Occurrence, PermanentError, Worker
from scheduler.worker.metrics import WorkerMetrics

RECORD = {"occurrence_id": "s1/v1/1767225600000", "schedule_id": "s1", "tenant": "acme", "schedule_version": 1,
          "scheduled_for_ms": 1_767_225_600_000, "available_at_ms": 1_767_225_600_000, "priority": "NORMAL",
          "payload": b"", "attempt": 1, "dst_rule": None, "catch_up": False, "lease_ms": 300}


class Writer:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def write(self, events: list[dict]) -> None:
        self.events.extend(events)


def worker(handler) -> Worker:
    w = Worker("127.0.0.1:1", "sched", "acme", handler)
    w.writer = Writer()  # type: ignore[assignment]
    return w


def sample(w: Worker, name: str, **labels: str) -> float:
    return w.metrics.registry.get_sample_value(name, labels) or 0.0


def test_outcomes_durations_and_lease_renewals_are_counted() -> None:
    def slow(occurrence, ctx):
        time.sleep(0.25)  # the handler's own run time, measured below; a lease of 300 ms beats every 0.1 s

    w = worker(slow)
    w.attempt(Occurrence.from_record(RECORD))
    assert sample(w, "scheduler_worker_occurrences_total", outcome="SUCCEEDED") == 1
    assert sample(w, "scheduler_worker_handler_seconds_count", outcome="SUCCEEDED") == 1
    assert sample(w, "scheduler_worker_handler_seconds_sum", outcome="SUCCEEDED") >= 0.25
    assert sample(w, "scheduler_worker_lease_renewals_total", result="written") >= 1
    assert w.metrics.handler_started is None  # no handler runs any more: the loop's heartbeat counts again

    def refuse(occurrence, ctx):
        raise PermanentError("no")

    w.handler = refuse
    w.attempt(Occurrence.from_record(RECORD))
    assert sample(w, "scheduler_worker_occurrences_total", outcome="FAILED") == 1


def test_a_running_handler_keeps_the_worker_alive_and_a_stuck_one_does_not() -> None:
    metrics = WorkerMetrics()
    live, ready = metrics.probes(max_handler_s=300)
    assert live().ok and not ready().ok  # alive from the start, ready once assigned
    metrics.partitions(["p0"])
    assert ready().ok
    metrics.heartbeat.last -= 120  # the loop silent for two minutes ...
    metrics.handler_started = time.monotonic() - 100  # ... because a handler runs
    assert live().ok
    metrics.handler_started -= 250
    assert not live().ok and not ready().ok


def test_lag_series_follow_the_assignment() -> None:
    metrics = WorkerMetrics()
    metrics.lag({("t", 0): 5, ("t", 1): 0})
    metrics.lag({("t", 1): 2})
    get = metrics.registry.get_sample_value
    assert get("scheduler_worker_consumer_lag_records", {"topic": "t", "partition": "0"}) is None
    assert get("scheduler_worker_consumer_lag_records", {"topic": "t", "partition": "1"}) == 2


@pytest.mark.parametrize("command", ["worker", "run"])
def test_metrics_bind_defaults_to_loopback(command: str) -> None:
    base = ["worker", "--tenant", "acme", "--handler", "m:f"] if command == "worker" else ["run"]
    args = build_parser().parse_args([*base, "--metrics-port", "9464"])
    assert (args.metrics_port, args.metrics_bind) == (9464, "127.0.0.1")
    assert build_parser().parse_args([*base, "--metrics-bind", "0.0.0.0"]).metrics_bind == "0.0.0.0"
